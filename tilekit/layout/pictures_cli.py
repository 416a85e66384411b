"""``tilekit layout``: draw a layout from the command line, as SVG/PNG or as a terminal table.

Each kind of layout is a sub-command taking its constructor's parameters;
``examples`` writes the three reference pictures (blocked, mma accumulator,
128-byte swizzle) that ``docs/layouts/`` holds, from the same command lines
the help shows, so the documented commands and the pictures cannot drift.
"""

from __future__ import annotations

import argparse
import enum
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tilekit.errors import TilekitError
from tilekit.layout.cute import ComposedLayout, Layout, Swizzle
from tilekit.layout.distributed import (
    MatrixCount,
    blocked,
    ldmatrix,
    mma_m16n8k16_a,
    mma_m16n8k16_acc,
    mma_m16n8k16_b,
    wgmma_a_regs,
    wgmma_acc,
)
from tilekit.layout.pictures import (
    Labels,
    Picture,
    View,
    cute_picture,
    distributed_picture,
    save_picture,
    shared_picture,
)
from tilekit.layout.shared import Major, Operand, SwizzleMode, nvidia_swizzle, swizzled_shared

__all__ = ["EXAMPLES", "Kind", "add_parser", "run"]


class Kind(enum.Enum):
    """The sub-commands of ``tilekit layout``; the value is the name typed."""

    BLOCKED = "blocked"
    MMA_ACC = "mma-acc"
    MMA_A = "mma-a"
    MMA_B = "mma-b"
    WGMMA_ACC = "wgmma-acc"
    WGMMA_A = "wgmma-a"
    LDMATRIX = "ldmatrix"
    SWIZZLE = "swizzle"
    CUTE = "cute"
    EXAMPLES = "examples"


# The pictures `tilekit layout examples` writes: file name, then the command line that draws it.
EXAMPLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("blocked.svg", ("blocked", "--shape", "16", "16", "--size-per-thread", "2", "2",
                     "--threads-per-warp", "4", "8", "--warps", "2", "1", "--order", "1", "0")),
    ("mma_acc.svg", ("mma-acc", "--shape", "32", "32", "--warps", "2", "2")),
    ("swizzle_128b.svg", ("swizzle", "--mode", "128B", "--shape", "64", "64", "--dtype", "bf16")),
)

# Element sizes in bytes of the dtype names the swizzle command accepts.
DTYPE_BYTES: dict[str, int] = {
    "i8": 1, "u8": 1, "f8": 1, "e4m3": 1, "e5m2": 1,
    "f16": 2, "bf16": 2, "i16": 2, "u16": 2,
    "f32": 4, "tf32": 4, "i32": 4, "u32": 4,
    "f64": 8, "i64": 8, "u64": 8,
}

_SWIZZLE_MODES = {"none": SwizzleMode.NONE, "32b": SwizzleMode.B32, "64b": SwizzleMode.B64,
                  "128b": SwizzleMode.B128}

_DESCRIPTION = """\
Draw a layout: which thread and register hold each tile element (distributed
layouts), which offset and bank each element gets (shared layouts), or the
offset table of a CuTe shape:stride layout. Output is SVG, or PNG when
cairosvg, rsvg-convert or inkscape is installed; --text prints a table."""

_EPILOG = """\
examples:
  tilekit layout blocked --shape 16 16 --size-per-thread 2 2 --threads-per-warp 4 8 \\
      --warps 2 1 --order 1 0 -o blocked.svg
  tilekit layout mma-acc --shape 32 32 --warps 2 2 -o mma.svg      (also mma-a, mma-b)
  tilekit layout wgmma-acc --shape 64 128 --warps 4 1 -o wgmma.png
  tilekit layout swizzle --mode 128B --shape 64 64 --dtype bf16 -o swz.svg
  tilekit layout swizzle --shape 32 64 --dtype f16 --vec 8 --per-phase 1 --max-phase 8 --text
  tilekit layout cute "(4,(2,3)):(1,(4,8))" -o cute.svg
  tilekit layout examples -o docs/layouts    (blocked.svg, mma_acc.svg, swizzle_128b.svg)

Large tiles show their top-left corner (--max-cells, 0 for all; or --window
ROW COL ROWS COLS); cells shrink and drop their labels when too many columns
would not fit (--labels always keeps them). `tilekit layout KIND --help`
lists each kind's parameters."""


def _ints(parser: argparse.ArgumentParser, flag: str, help_text: str, **kwargs: Any) -> None:
    parser.add_argument(flag, type=int, nargs="+", metavar="N", help=help_text, **kwargs)


def _pair(parser: argparse.ArgumentParser, flag: str, default: tuple[int, int], what: str) -> None:
    parser.add_argument(flag, type=int, nargs=2, metavar=("M", "N"), default=default,
                        help=f"{what} (default {default[0]} {default[1]})")


def _output_options(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("output")
    out.add_argument("-o", "--output", metavar="FILE", help="write FILE.svg or FILE.png")
    out.add_argument("--text", action="store_true", help="print the picture as a table")
    out.add_argument("--title", help="the picture's title (default: the constructor call)")
    out.add_argument("--max-cells", type=int, default=View().max_cells, metavar="N",
                     help="per panel; larger tiles show their top-left corner (0: no limit; "
                          f"default {View().max_cells})")
    out.add_argument("--window", type=int, nargs=4, metavar=("ROW", "COL", "ROWS", "COLS"),
                     help="draw this part of every panel instead")
    out.add_argument("--cell-px", type=float, metavar="PX", help="cell size in pixels")
    out.add_argument("--labels", choices=[m.name.lower() for m in Labels], default="auto",
                     help="text in the cells: auto drops it when the cells must shrink")


def _add_kinds(parser: argparse.ArgumentParser) -> None:
    kinds = parser.add_subparsers(dest="kind_name", required=True, metavar="KIND")

    def kind(which: Kind, help_text: str) -> argparse.ArgumentParser:
        sub = kinds.add_parser(which.value, help=help_text, description=help_text)
        sub.set_defaults(kind=which, run=run)
        if which is not Kind.EXAMPLES:
            _output_options(sub)
        return sub

    sub = kind(Kind.BLOCKED, "Triton's blocked layout (vectorized loads, elementwise code)")
    _ints(sub, "--shape", "tile shape, dim0 first", required=True)
    _ints(sub, "--size-per-thread", "elements per thread in each dim (default all 1)")
    _ints(sub, "--threads-per-warp", "lanes along each dim (default: 32 along --order)")
    _ints(sub, "--warps", "warps along each dim (default all 1)")
    _ints(sub, "--order", "dims from most to least minor (default: last dim first)")
    for which, what, shape in ((Kind.MMA_ACC, "f32 accumulator", (16, 8)),
                               (Kind.MMA_A, "operand A", (16, 16)),
                               (Kind.MMA_B, "operand B", (16, 8))):
        sub = kind(which, f"the {what} of mma.sync.m16n8k16 (f16/bf16), tiled over warps")
        _pair(sub, "--shape", shape, "tile shape")
        _pair(sub, "--warps", (1, 1), "warps along M and N")
        _pair(sub, "--warp-order", (1, 0), "warp dims, most minor first")
    sub = kind(Kind.WGMMA_ACC, "the f32 accumulator of wgmma.mma_async.m64nNk16")
    _pair(sub, "--shape", (64, 64), "tile shape")
    _pair(sub, "--warps", (4, 1), "warps along M (4 per warpgroup) and N")
    sub.add_argument("--instr-n", type=int, help="the instruction's N (default: the tile's)")
    sub = kind(Kind.WGMMA_A, "operand A of wgmma.mma_async.m64nNk16 held in registers")
    _pair(sub, "--shape", (64, 16), "tile shape")
    _pair(sub, "--warps", (4, 1), "warps along M (4 per warpgroup) and N")
    sub = kind(Kind.LDMATRIX, "what each lane holds after ldmatrix.m8n8.x1/x2/x4")
    sub.add_argument("--count", choices=[c.name.lower() for c in MatrixCount], default="x4")
    sub.add_argument("--trans", action="store_true", help="the .trans variant")
    sub = kind(Kind.SWIZZLE, "a shared-memory tile: TMA/wgmma swizzle modes or the classic XOR")
    _ints(sub, "--shape", "tile shape, dim0 first (rows)", required=True)
    sub.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="bf16",
                     help="element type (default bf16)")
    sub.add_argument("--mode", choices=["none", "32B", "64B", "128B"], type=_mode_name,
                     help="TMA/wgmma swizzle (default 128B unless --vec/--per-phase/--max-phase)")
    sub.add_argument("--major", choices=[m.name for m in Major], default="K",
                     help="with --mode: K-major or MN-major storage (default K)")
    sub.add_argument("--operand", choices=[o.name for o in Operand], default="A",
                     help="with --mode: A (M x K) or B (K x N) (default A)")
    for flag in ("--vec", "--per-phase", "--max-phase"):
        sub.add_argument(flag, type=int, help="classic XOR swizzle parameter")
    _ints(sub, "--order", "classic swizzle: dims from most to least minor")
    sub.add_argument("--banks", type=int, default=32, help="shared-memory banks (default 32)")
    sub = kind(Kind.CUTE, "the offset table of a CuTe shape:stride layout")
    sub.add_argument("layout", help='CuTe notation, e.g. "(4,(2,3)):(1,(4,8))"')
    sub.add_argument("--swizzle", type=int, nargs=3, metavar=("B", "M", "S"),
                     help="compose with CuTe's Swizzle<B,M,S>")
    sub = kind(Kind.EXAMPLES, "write " + ", ".join(name for name, _ in EXAMPLES) + " into a folder")
    sub.add_argument("-o", "--output", metavar="DIR", required=True, help="the folder to write")
    sub.add_argument("--png", action="store_true", help="also write PNG files (needs a renderer)")


def _mode_name(text: str) -> str:
    """Accept 128b / 128B / NONE alike; argparse then checks the choice."""
    lowered = text.lower()
    return {"none": "none", "32b": "32B", "64b": "64B", "128b": "128B"}.get(lowered, text)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``layout`` on the ``tilekit`` command's sub-parsers."""
    parser = subparsers.add_parser(
        "layout", help="draw layouts as SVG/PNG pictures (or --text tables)",
        description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_kinds(parser)
    return parser


def _default_lanes(shape: Sequence[int], spt: Sequence[int], order: Sequence[int]) -> list[int]:
    """32 lanes spread along ``order`` until each dim is covered, the rest on the most minor dim."""
    lanes = [1] * len(shape)
    left = 32
    for dim in order:
        take = max(1, min(left, shape[dim] // max(1, spt[dim])))
        take = 1 << (take.bit_length() - 1)
        lanes[dim] = take
        left //= take
    lanes[order[0]] *= left
    return lanes


def _blocked(args: argparse.Namespace) -> Picture:
    shape = list(args.shape)
    rank = len(shape)
    spt = args.size_per_thread or [1] * rank
    order = args.order or list(reversed(range(rank)))
    if sorted(order) != list(range(rank)) or len(spt) != rank:
        tpw = args.threads_per_warp or [1] * rank  # let blocked() name what is wrong
    else:
        tpw = args.threads_per_warp or _default_lanes(shape, spt, order)
    warps = args.warps or [1] * rank
    layout = blocked(shape, spt, tpw, warps, order)
    title = (f"blocked(shape={shape}, size_per_thread={spt}, threads_per_warp={tpw}, "
             f"warps_per_cta={warps}, order={order})")
    return distributed_picture(layout, _view(args), args.title or title)


def _mma(args: argparse.Namespace) -> Picture:
    build = {Kind.MMA_ACC: mma_m16n8k16_acc, Kind.MMA_A: mma_m16n8k16_a,
             Kind.MMA_B: mma_m16n8k16_b}[args.kind]
    layout = build(args.shape, args.warps, args.warp_order)
    title = (f"{build.__name__}(shape={list(args.shape)}, warps_per_cta={list(args.warps)}, "
             f"warp_order={list(args.warp_order)})")
    return distributed_picture(layout, _view(args), args.title or title)


def _wgmma(args: argparse.Namespace) -> Picture:
    if args.kind is Kind.WGMMA_ACC:
        layout = wgmma_acc(args.shape, args.instr_n, args.warps)
        title = (f"wgmma_acc(shape={list(args.shape)}, instr_n={args.instr_n}, "
                 f"warps_per_cta={list(args.warps)})")
    else:
        layout = wgmma_a_regs(args.shape, args.warps)
        title = f"wgmma_a_regs(shape={list(args.shape)}, warps_per_cta={list(args.warps)})"
    return distributed_picture(layout, _view(args), args.title or title)


def _ldmatrix(args: argparse.Namespace) -> Picture:
    count = MatrixCount[args.count.upper()]
    layout = ldmatrix(count, args.trans)
    title = f"ldmatrix(MatrixCount.{count.name}, trans={args.trans})"
    return distributed_picture(layout, _view(args), args.title or title)


def _swizzle(args: argparse.Namespace) -> Picture:
    elem_bytes = DTYPE_BYTES[args.dtype]
    classic = {"vec": args.vec, "per_phase": args.per_phase, "max_phase": args.max_phase}
    if any(v is not None for v in classic.values()) or args.order is not None:
        if args.mode is not None:
            raise TilekitError(
                "--mode picks a TMA/wgmma swizzle; --vec/--per-phase/--max-phase/--order the "
                "classic XOR swizzle: give one or the other",
                hints=["the 128B mode of a 16-bit tile is the classic vec 8, per-phase 1, "
                       "max-phase 8 on 64-element rows"],
            )
        layout = swizzled_shared(args.shape, elem_bytes, order=args.order, **classic)
        shown = ", ".join(f"{k}={v}" for k, v in classic.items() if v is not None)
        title = f"swizzled_shared(shape={list(args.shape)}, {args.dtype}" + (
            f", {shown})" if shown else ")")
    else:
        mode = _SWIZZLE_MODES[(args.mode or "128B").lower()]
        layout = nvidia_swizzle(mode, args.shape, elem_bytes, Major[args.major],
                                Operand[args.operand])
        title = (f"nvidia_swizzle({mode.name}, shape={list(args.shape)}, {args.dtype}, "
                 f"{args.major}-major, operand {args.operand})")
    return shared_picture(layout, elem_bytes, args.banks, _view(args), args.title or title)


def _cute(args: argparse.Namespace) -> Picture:
    layout: Layout | ComposedLayout = Layout.parse(args.layout)
    if args.swizzle is not None:
        layout = ComposedLayout(Swizzle(*args.swizzle), 0, layout)
    return cute_picture(layout, _view(args), args.title)


_BUILDERS: dict[Kind, Callable[[argparse.Namespace], Picture]] = {
    Kind.BLOCKED: _blocked, Kind.MMA_ACC: _mma, Kind.MMA_A: _mma, Kind.MMA_B: _mma,
    Kind.WGMMA_ACC: _wgmma, Kind.WGMMA_A: _wgmma, Kind.LDMATRIX: _ldmatrix,
    Kind.SWIZZLE: _swizzle, Kind.CUTE: _cute,
}


def _view(args: argparse.Namespace) -> View:
    return View(
        max_cells=args.max_cells or None,
        window=tuple(args.window) if args.window else None,
        cell_px=args.cell_px,
        labels=Labels[args.labels.upper()],
    )


def _examples(args: argparse.Namespace) -> int:
    parser = argparse.ArgumentParser(prog="tilekit layout")
    _add_kinds(parser)
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    for name, argv in EXAMPLES:
        targets = [folder / name] + [(folder / name).with_suffix(".png")] * args.png
        example = parser.parse_args(list(argv))
        picture = _BUILDERS[example.kind](example)
        for target in targets:
            save_picture(picture, target, _view(example))
            print(f"wrote {target}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Build the picture the arguments describe and write or print it; the exit code."""
    try:
        if args.kind is Kind.EXAMPLES:
            return _examples(args)
        if args.output is None and not args.text:
            print("tilekit layout: nothing to do: give -o FILE.svg (or .png) or --text",
                  file=sys.stderr)
            return 2
        picture = _BUILDERS[args.kind](args)
        if args.output is not None:
            save_picture(picture, args.output, _view(args))
            print(f"wrote {args.output}")
        if args.text:
            sys.stdout.write(picture.to_text())
    except TilekitError as error:
        print(error, file=sys.stderr)
        return 1
    return 0
