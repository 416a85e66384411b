"""Pictures of layouts: who holds, or where lives, each element of a tile.

A layout's bases are exact but hard to read; a drawing of the tile answers
the questions people actually ask ("which thread holds (3, 5)?", "do these
rows hit the same bank?", "where did the swizzle put this element?"). Three
steps, kept apart so that each can be checked on its own:

1. a layout becomes a :class:`Picture`: panels of cells, each with its text
   lines, a fill colour and machine-readable facts (pure data, no drawing);
2. a picture becomes SVG text (pure string building, no dependency) or an
   ASCII table for terminals;
3. SVG becomes PNG through an external renderer (``cairosvg``, or
   ``rsvg-convert`` / ``inkscape`` on PATH) when one is installed.

Steps 2 and 3 live in :mod:`tilekit.layout.picture_output`; this module
makes pictures and re-exports its public names.

What is drawn, per kind:

* distributed layouts (``register``/``lane``/``warp``/``block`` -> ``dim0``,
  ``dim1``, ...): rows are ``dim0`` and columns ``dim1`` (rank 1: one row;
  rank 3 and more: one panel per index of the outer dims); each element says
  ``T<lane>:R<register>`` of the lowest thread holding it, ``W<warp>``, and
  ``xN`` when N threads hold it (a broadcast). Colour: one hue per warp from
  the Okabe-Ito palette (distinguishable with the common colour-vision
  deficiencies), lighter for higher lanes.
* shared layouts (``offset`` -> tensor): the tile, each element labelled with
  its offset and coloured by its bank (byte address / 4 mod banks: one hue per
  16-byte bank group, four shades within it); then the memory itself in
  128-byte rows, each slot labelled with the element it holds and coloured by
  that element's 16-byte chunk along its contiguous dim, so that a swizzle
  shows as colours permuted from row to row.
* CuTe shape:stride layouts: the offset table (rows mode 0, columns mode 1,
  one panel per index of further modes), coloured from dark (lowest offset)
  to yellow (highest) on the viridis ramp.

Large tiles stay readable: by default only the top-left corner of at most
``View.max_cells`` cells per panel is drawn (or any ``View.window``), and
when the labels do not fit in ``View.max_width_px`` the cells shrink and
the labels are dropped (every cell keeps a tooltip with the full facts).
"""

from __future__ import annotations

import enum
import math
import os
import shutil  # noqa: F401  (kept reachable as pictures.shutil: tests patch shutil.which here)
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilekit.errors import LayoutError, TilekitError
from tilekit.layout.cute import ComposedLayout, Layout
from tilekit.layout.inttuple import IntTuple, format_int_tuple, idx2crd, is_tuple
from tilekit.layout.linear import (
    BLOCK,
    LANE,
    OFFSET,
    REGISTER,
    WARP,
    LinearLayout,
    standard_out_dims,
)
from tilekit.layout.picture_output import (
    PngRenderer,
    find_png_renderer,
    picture_svg,
    picture_text,
    svg_to_png,
)

__all__ = [
    "BANK_BYTES",
    "Cell",
    "Labels",
    "PALETTE",
    "Panel",
    "Picture",
    "PictureError",
    "PngRenderer",
    "ROW_BYTES",
    "Swatch",
    "View",
    "cute_picture",
    "distributed_picture",
    "find_png_renderer",
    "render",
    "render_cute",
    "render_distributed",
    "render_shared",
    "save_picture",
    "shared_picture",
    "svg_to_png",
]

# Okabe & Ito, "Color Universal Design" (2008), black replaced by grey so labels stay legible.
PALETTE: tuple[str, ...] = (
    "#e69f00", "#56b4e9", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7", "#999999",
)
BANK_BYTES = 4  # NVIDIA and AMD (CDNA3) shared-memory banks are 4 bytes wide
ROW_BYTES = 128  # one memory row of the second shared view: 32 banks x 4 bytes
_CHUNK_BYTES = 16  # the unit swizzles move, and one bank group
_EMPTY_FILL = "#eeeeee"
_LANE_LIGHTEN = 0.6  # the highest lane is this much mixed with white
_SHADES = (0.0, 0.25, 0.45, 0.65)  # banks within a 16-byte group
# Viridis (matplotlib), sampled at 0, 1/4, 1/2, 3/4, 1: sequential and colour-blind friendly.
_VIRIDIS = ("#440154", "#3b528b", "#21918c", "#5ec962", "#fde725")
_MAX_HOLDERS_LISTED = 8
_MAX_POINTS = 1 << 22  # inputs or elements beyond this are refused: no picture can show them
_HARDWARE_DIMS = (BLOCK, WARP, LANE, REGISTER)  # most major first: the order holders are ranked


class PictureError(TilekitError):
    """A picture cannot be made as asked (bad window, unknown file type, no PNG renderer)."""


class Labels(enum.Enum):
    """Whether cells carry their text labels (tooltips are always kept)."""

    AUTO = enum.auto()  # labels when they fit in the width, else smaller cells without them
    ALWAYS = enum.auto()
    NEVER = enum.auto()


@dataclass(frozen=True)
class View:
    """Which part of the tile to draw, and how large.

    ``window`` is ``(first_row, first_col, rows, cols)`` of every panel; without
    it, panels larger than ``max_cells`` (None: no limit) show their top-left
    corner. ``cell_px`` fixes the cell size; by default cells fit their labels
    or shrink (labels dropped) to keep the picture within ``max_width_px``.
    """

    max_cells: int | None = 1024
    window: tuple[int, int, int, int] | None = None
    max_panels: int | None = 16
    cell_px: float | None = None
    labels: Labels = Labels.AUTO
    max_width_px: float = 2560.0


@dataclass(frozen=True)
class Cell:
    """One drawn element (or memory slot) at absolute tile coordinates (``row``, ``col``).

    ``facts`` are exported as ``data-*`` attributes so tools (and tests) can
    read a picture without parsing its labels.
    """

    row: int
    col: int
    lines: tuple[str, ...]
    fill: str
    tooltip: str
    facts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Panel:
    """A rectangular window of one 2-D slice of the tile."""

    title: str
    first_row: int
    first_col: int
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]
    cells: tuple[Cell, ...]

    @property
    def rows(self) -> int:
        return len(self.row_labels)

    @property
    def cols(self) -> int:
        return len(self.col_labels)


@dataclass(frozen=True)
class Swatch:
    """A legend entry: a colour and what it means."""

    fill: str
    text: str


@dataclass(frozen=True)
class Picture:
    """A drawable description of a layout: title, explanatory notes, panels, legend."""

    title: str
    notes: tuple[str, ...]
    panels: tuple[Panel, ...]
    legend: tuple[Swatch, ...]

    def to_svg(self, view: View = View()) -> str:
        return picture_svg(self, view)

    def to_text(self) -> str:
        return picture_text(self)


# ------------------------------------------------------------------------------------- colours


def _rgb(colour: str) -> tuple[float, float, float]:
    value = int(colour.lstrip("#"), 16)
    return ((value >> 16 & 255) / 255, (value >> 8 & 255) / 255, (value & 255) / 255)


def _hex(rgb: Sequence[float]) -> str:
    return "#" + "".join(f"{round(min(1.0, max(0.0, c)) * 255):02x}" for c in rgb)


def _lighten(colour: str, amount: float) -> str:
    """Mix with white; keeps the hue, so a shade still reads as its warp's (or group's) colour."""
    return _hex([c + (1.0 - c) * amount for c in _rgb(colour)])


def _ink(fill: str) -> str:
    """Black or white text, whichever contrasts more with ``fill`` (WCAG relative luminance)."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in _rgb(fill)]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return "#000000" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "#ffffff"


def _viridis(t: float) -> str:
    t = min(1.0, max(0.0, t)) * (len(_VIRIDIS) - 1)
    low = min(int(t), len(_VIRIDIS) - 2)
    a, b = _rgb(_VIRIDIS[low]), _rgb(_VIRIDIS[low + 1])
    frac = t - low
    return _hex([x + (y - x) * frac for x, y in zip(a, b, strict=True)])


def _bank_fill(bank: int) -> str:
    group = bank // (_CHUNK_BYTES // BANK_BYTES)
    return _lighten(PALETTE[group % len(PALETTE)], _SHADES[bank % len(_SHADES)])


# ------------------------------------------------------------------------------ panels of a tile


@dataclass(frozen=True)
class _Region:
    first_row: int
    first_col: int
    rows: int
    cols: int


def _region(rows: int, cols: int, view: View, keep_rows_whole: bool = False) -> _Region:
    """The window of a ``rows`` x ``cols`` grid to draw: ``view.window``, or a small enough corner.

    ``keep_rows_whole`` drops rows before columns (memory rows are the bank cycle).
    """
    if view.window is not None:
        first_row, first_col, n_rows, n_cols = view.window
        if not (0 <= first_row < rows and 0 <= first_col < cols) or n_rows < 1 or n_cols < 1:
            raise PictureError(
                f"window (first row {first_row}, first col {first_col}, {n_rows} x {n_cols}) is "
                f"outside the {rows} x {cols} grid",
                hints=[f"rows are 0..{rows - 1} and columns 0..{cols - 1}"],
            )
        return _Region(first_row, first_col, min(n_rows, rows - first_row),
                       min(n_cols, cols - first_col))
    n_rows, n_cols = rows, cols
    limit = view.max_cells
    if limit is not None:
        if limit < 1:
            raise PictureError(f"max_cells must be positive or None, got {limit}")
        while n_rows * n_cols > limit:
            if n_rows > 1 and (keep_rows_whole or n_rows >= n_cols):
                n_rows = -(-n_rows // 2)
            else:
                n_cols = -(-n_cols // 2)
    return _Region(0, 0, n_rows, n_cols)


def _crop_note(region: _Region, rows: int, cols: int, what: str) -> tuple[str, ...]:
    if (region.rows, region.cols) == (rows, cols):
        return ()
    last_row = region.first_row + region.rows - 1
    last_col = region.first_col + region.cols - 1
    return (f"{what}: showing rows {region.first_row}-{last_row} and columns "
            f"{region.first_col}-{last_col} of {rows} x {cols} (max_cells / window to change)",)


MakeCell = Callable[[int, int, int], Cell]  # (flat row-major index, row, col) -> Cell


def _tile_panels(
    shape: Sequence[int],
    view: View,
    make_cell: MakeCell,
    names: Sequence[str],
    keep_rows_whole: bool = False,
) -> tuple[tuple[Panel, ...], tuple[str, ...]]:
    """Panels of a row-major tile: rows names[-2], columns names[-1], one per outer index."""
    rank = len(shape)
    rows = shape[-2] if rank >= 2 else 1
    cols = shape[-1]
    outer = tuple(shape[:-2])
    count = math.prod(outer)
    region = _region(rows, cols, view, keep_rows_whole)
    notes = list(_crop_note(region, rows, cols, "tile"))
    shown = count if view.max_panels is None else min(count, view.max_panels)
    if shown < count:
        notes.append(f"showing {shown} of {count} panels (max_panels to change)")
    panels = []
    for p in range(shown):
        index = np.unravel_index(p, outer) if outer else ()
        title = ", ".join(f"{n}={int(i)}" for n, i in zip(names[:-2], index, strict=True))
        row_range = range(region.first_row, region.first_row + region.rows)
        col_range = range(region.first_col, region.first_col + region.cols)
        cells = tuple(
            make_cell((p * rows + r) * cols + c, r, c) for r in row_range for c in col_range
        )
        row_labels = tuple(str(r) for r in row_range) if rank >= 2 else ("",)
        panels.append(Panel(title, region.first_row, region.first_col, row_labels,
                            tuple(str(c) for c in col_range), cells))
    return tuple(panels), tuple(notes)


def _axes_note(names: Sequence[str], shape: Sequence[int]) -> str:
    if len(names) == 1:
        return f"one row: {names[0]} ({shape[0]}) left to right"
    note = f"rows: {names[-2]} ({shape[-2]}), columns: {names[-1]} ({shape[-1]})"
    if len(names) > 2:
        note += "; one panel per " + ", ".join(names[:-2])
    return note


def _tile_shape(layout: LinearLayout, what: str) -> tuple[LinearLayout, tuple[int, ...]]:
    """The layout with its out dims in order ``dim0, dim1, ...`` and the tile's shape."""
    rank = len(layout.out_dims)
    names = standard_out_dims(rank)
    if rank == 0 or set(layout.out_dims) != set(names):
        raise LayoutError(
            f"cannot draw a {what} layout with out dims {list(layout.out_dims)}: a picture needs "
            "tensor dims named dim0, dim1, ...",
            hints=["rename_outs to dim0, dim1, ... (dim0 is drawn as rows, dim1 as columns)"],
        )
    layout = layout.transpose_outs(names)
    shape = tuple(layout.out_dim_size(n) for n in names)
    if math.prod(shape) > _MAX_POINTS or layout.total_in_size > _MAX_POINTS:
        raise LayoutError(
            f"the {what} layout has {math.prod(shape)} elements and {layout.total_in_size} "
            f"inputs; pictures stop at {_MAX_POINTS}",
            hints=["draw a sublayout, or a smaller tile of the same construction"],
        )
    return layout, shape


def _in_coordinates(layout: LinearLayout, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Each in dim's value at every flat input (first in dim minor); absent dims are 0."""
    flat = np.arange(layout.total_in_size, dtype=np.int64)
    values: dict[str, np.ndarray] = {}
    shift = 0
    for name in layout.in_dims:
        bits = layout.in_dim_size_log2(name)
        values[name] = (flat >> shift) & ((1 << bits) - 1)
        shift += bits
    zeros = np.zeros_like(flat)
    return {name: values.get(name, zeros) for name in names}


def _row_major(layout: LinearLayout, shape: Sequence[int]) -> np.ndarray:
    """The row-major flat index of the element each flat input maps to."""
    outs = layout.apply_all()
    return np.ravel_multi_index(tuple(outs[n] for n in layout.out_dims), tuple(shape))


def _group_by_element(element: np.ndarray, rank_key: np.ndarray, size: int) -> tuple[
    np.ndarray, np.ndarray, np.ndarray
]:
    """Inputs sorted by (element, ``rank_key``); each element's start and count in that order."""
    order = np.lexsort((rank_key, element))
    counts = np.bincount(element, minlength=size)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return order, starts, counts


# ------------------------------------------------------------------------------- distributed


def _hardware_sizes(layout: LinearLayout) -> dict[str, int]:
    unknown = [n for n in layout.in_dims if n not in _HARDWARE_DIMS]
    if unknown:
        hint = ("a shared layout (in dim 'offset') is drawn by render_shared"
                if OFFSET in unknown else "rename_ins to register, lane, warp, block")
        raise LayoutError(
            f"cannot draw a distributed layout with in dims {unknown}: expected some of "
            f"{list(_HARDWARE_DIMS)}",
            hints=[hint],
        )
    return {n: layout.in_dim_size(n) if layout.has_in_dim(n) else 1 for n in _HARDWARE_DIMS}


def distributed_picture(
    layout: LinearLayout, view: View = View(), title: str | None = None
) -> Picture:
    """Each tile element labelled with the thread and register holding it, coloured by warp.

    The labelled holder is the lowest (block, warp, lane, register); ``xN``
    counts the distinct threads holding the element, and the tooltip lists them.
    """
    sizes = _hardware_sizes(layout)
    layout, shape = _tile_shape(layout, "distributed")
    names = layout.out_dims
    hw = _in_coordinates(layout, _HARDWARE_DIMS)
    n_elements = math.prod(shape)
    element = _row_major(layout, shape)
    thread = (hw[BLOCK] * sizes[WARP] + hw[WARP]) * sizes[LANE] + hw[LANE]
    order, starts, counts = _group_by_element(element, thread * sizes[REGISTER] + hw[REGISTER],
                                              n_elements)
    pairs = np.unique(element * (thread.max(initial=0) + 1) + thread)
    threads_per_element = np.bincount(pairs // (thread.max(initial=0) + 1), minlength=n_elements)

    def holder_text(i: int) -> str:
        parts = [f"{name} {int(hw[name][i])}" for name in _HARDWARE_DIMS
                 if sizes[name] > 1 or name in (LANE, REGISTER)]
        return " ".join(parts)

    def make_cell(flat: int, row: int, col: int) -> Cell:
        coords = np.unravel_index(flat, shape)
        where = "(" + ", ".join(str(int(c)) for c in coords) + ")"
        if counts[flat] == 0:
            return Cell(row, col, ("-",), _EMPTY_FILL, f"{where}: held by no thread",
                        (("holders", 0),))
        held = order[starts[flat]:starts[flat] + counts[flat]]
        first = int(held[0])
        lane, register = int(hw[LANE][first]), int(hw[REGISTER][first])
        warp, block = int(hw[WARP][first]), int(hw[BLOCK][first])
        n_threads = int(threads_per_element[flat])
        extra = [f"B{block}"] * (sizes[BLOCK] > 1) + [f"W{warp}"] * (sizes[WARP] > 1)
        extra += [f"x{n_threads}"] * (n_threads > 1)
        lines = (f"T{lane}:R{register}", " ".join(extra)) if extra else (f"T{lane}:R{register}",)
        hue = PALETTE[(block * sizes[WARP] + warp) % len(PALETTE)]
        fill = _lighten(hue, _LANE_LIGHTEN * lane / sizes[LANE])
        listed = "; ".join(holder_text(int(i)) for i in held[:_MAX_HOLDERS_LISTED])
        more = len(held) - _MAX_HOLDERS_LISTED
        tooltip = f"{where}: {listed}" + (f"; and {more} more" if more > 0 else "")
        facts = (("block", block), ("warp", warp), ("lane", lane), ("register", register),
                 ("holders", n_threads))
        return Cell(row, col, lines, fill, tooltip, facts)

    panels, crop = _tile_panels(shape, view, make_cell, names)
    dims = " x ".join(f"{n} {sizes[n]}" for n in reversed(_HARDWARE_DIMS) if layout.has_in_dim(n))
    notes = (
        _axes_note(names, shape) + f"; held by {dims}",
        "label: T<lane>:R<register> of the lowest thread holding the element, W<warp>, "
        "xN = N threads hold it (broadcast)",
        "colour: one hue per warp, lighter for higher lanes",
        *crop,
    )
    groups = sizes[BLOCK] * sizes[WARP]
    legend = [Swatch(PALETTE[g % len(PALETTE)], _group_name(g, sizes))
              for g in range(min(groups, 2 * len(PALETTE)))]
    if sizes[LANE] > 1:
        last = sizes[LANE] - 1
        legend += [Swatch(PALETTE[0], "warp 0 lane 0"),
                   Swatch(_lighten(PALETTE[0], _LANE_LIGHTEN * last / sizes[LANE]),
                          f"warp 0 lane {last}")]
    if groups > len(PALETTE):
        legend.append(Swatch(_EMPTY_FILL, f"hues repeat every {len(PALETTE)} warps"))
    shape_text = "x".join(map(str, shape))
    return Picture(title or f"distributed layout, tile {shape_text}", notes, panels,
                   tuple(legend))


def _group_name(group: int, sizes: dict[str, int]) -> str:
    block, warp = divmod(group, sizes[WARP])
    return f"block {block} warp {warp}" if sizes[BLOCK] > 1 else f"warp {warp}"


# ------------------------------------------------------------------------------------ shared


def _contiguous_dim(layout: LinearLayout) -> int:
    """The tensor dim offset bit 0 steps along: the dim whose 16-byte chunks a swizzle moves."""
    if layout.in_dim_size_log2(OFFSET) == 0:
        return len(layout.out_dims) - 1
    basis = layout.basis(OFFSET, 0)
    moved = [k for k, x in enumerate(basis) if x]
    return moved[0] if moved else len(layout.out_dims) - 1


def shared_picture(
    layout: LinearLayout,
    elem_bytes: int,
    target_banks: int = 32,
    view: View = View(),
    title: str | None = None,
) -> Picture:
    """The tile coloured by bank and labelled by offset, then the memory rows it is stored in.

    Bank of an element = (byte address / 4) mod ``target_banks`` at its lowest
    offset; ``xN`` marks an element stored at N offsets.
    """
    if layout.in_dims != (OFFSET,):
        raise LayoutError(
            f"a shared layout has the single in dim {OFFSET!r}; this one has "
            f"{list(layout.in_dims)}",
            hints=["distributed layouts (register, lane, warp) are drawn by render_distributed"],
        )
    for name, value in (("elem_bytes", elem_bytes), ("target_banks", target_banks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LayoutError(f"{name} must be a positive int, got {value!r}")
    layout, shape = _tile_shape(layout, "shared")
    names = layout.out_dims
    size = layout.in_dim_size(OFFSET)
    n_elements = math.prod(shape)
    offsets = np.arange(size, dtype=np.int64)
    element = _row_major(layout, shape)
    order, starts, counts = _group_by_element(element, offsets, n_elements)

    def bank(offset: int) -> int:
        return offset * elem_bytes // BANK_BYTES % target_banks

    def tile_cell(flat: int, row: int, col: int) -> Cell:
        where = "(" + ", ".join(str(int(c)) for c in np.unravel_index(flat, shape)) + ")"
        if counts[flat] == 0:
            return Cell(row, col, ("-",), _EMPTY_FILL, f"{where}: not stored",
                        (("copies", 0),))
        stored = [int(o) for o in order[starts[flat]:starts[flat] + counts[flat]]]
        offset, b = stored[0], bank(stored[0])
        first = str(offset) + (f" x{len(stored)}" if len(stored) > 1 else "")
        tooltip = (f"{where}: offset {offset}, byte {offset * elem_bytes}, bank {b}"
                   + (f"; also at offsets {stored[1:_MAX_HOLDERS_LISTED]}" if stored[1:] else ""))
        facts = (("offset", offset), ("bank", b), ("copies", len(stored)))
        return Cell(row, col, (first, f"b{b}"), _bank_fill(b), tooltip, facts)

    panels, crop = _tile_panels(shape, view, tile_cell, names, keep_rows_whole=True)
    contiguous = _contiguous_dim(layout)
    outs = layout.apply_all()
    slots = max(1, ROW_BYTES // elem_bytes)
    memory_rows = -(-size // slots)
    region = _region(memory_rows, min(slots, size), view, keep_rows_whole=True)

    def slot_cell(offset: int, row: int, col: int) -> Cell:
        coords = [int(outs[n][offset]) for n in names]
        chunk = coords[contiguous] * elem_bytes // _CHUNK_BYTES
        where = "(" + ", ".join(map(str, coords)) + ")"
        tooltip = (f"offset {offset} (byte {offset * elem_bytes}, bank {bank(offset)}) holds "
                   f"{where}, chunk {chunk} of {names[contiguous]}")
        facts = (("offset", offset), ("bank", bank(offset)), ("chunk", chunk),
                 *((f"dim{k}", c) for k, c in enumerate(coords)))
        return Cell(row, col, (",".join(map(str, coords)),), PALETTE[chunk % len(PALETTE)],
                    tooltip, facts)

    row_range = range(region.first_row, region.first_row + region.rows)
    col_range = range(region.first_col, region.first_col + region.cols)
    memory = Panel(
        f"memory, {ROW_BYTES}-byte rows: the element ({','.join(names)}) at each slot",
        region.first_row, region.first_col,
        tuple(f"{r * slots * elem_bytes}B" for r in row_range),
        tuple(f"b{bank(c)}" for c in col_range),
        tuple(slot_cell(r * slots + c, r, c) for r in row_range for c in col_range
              if r * slots + c < size),
    )
    tile_title = "tile: offset and bank of each element"
    panels = tuple(Panel(f"{tile_title}{', ' + p.title if p.title else ''}", p.first_row,
                         p.first_col, p.row_labels, p.col_labels, p.cells) for p in panels)
    notes = (
        _axes_note(names, shape) + f"; {elem_bytes}-byte elements, {size * elem_bytes} bytes",
        f"tile: label offset / b<bank>; colour: bank = byte address / {BANK_BYTES} mod "
        f"{target_banks} (a hue per {_CHUNK_BYTES}-byte bank group, lighter for its higher banks)",
        f"memory: colour = the element's {_CHUNK_BYTES}-byte chunk along {names[contiguous]} "
        "(stripes: no swizzle; colours permuted from row to row: a swizzle)",
        *crop,
        *_crop_note(region, memory_rows, min(slots, size), "memory"),
    )
    groups = -(-target_banks * BANK_BYTES // _CHUNK_BYTES)
    legend = [Swatch(_bank_fill(4 * g), f"banks {4 * g}-{4 * g + 3}")
              for g in range(min(groups, len(PALETTE)))]
    chunks = -(-shape[contiguous] * elem_bytes // _CHUNK_BYTES)
    legend += [Swatch(PALETTE[k], f"chunk {k}") for k in range(min(chunks, len(PALETTE)))]
    shape_text = "x".join(map(str, shape))
    return Picture(title or f"shared layout, tile {shape_text}", notes, (*panels, memory),
                   tuple(legend))


# -------------------------------------------------------------------------------------- CuTe


def _mode_labels(shape: IntTuple, count: int) -> tuple[str, ...]:
    if not is_tuple(shape):
        return tuple(str(i) for i in range(count))
    return tuple(format_int_tuple(idx2crd(i, shape)) for i in range(count))


def cute_picture(
    layout: Layout | ComposedLayout, view: View = View(), title: str | None = None
) -> Picture:
    """The offset of every coordinate of a shape:stride (or swizzled) layout.

    Rows are mode 0 and columns mode 1 (labelled with natural coordinates when
    a mode is nested); modes 2, 3, ... become panels, first mode fastest.
    """
    if not isinstance(layout, (Layout, ComposedLayout)):
        raise LayoutError(f"cute_picture draws a CuTe Layout or ComposedLayout, got {layout!r}")
    if layout.size > _MAX_POINTS:
        raise LayoutError(f"the layout has {layout.size} coordinates; pictures stop at "
                          f"{_MAX_POINTS}")
    table = np.asarray(layout.to_table())
    modes: tuple[IntTuple, ...] = layout.shape if is_tuple(layout.shape) else (layout.shape,)
    if table.ndim == 1:
        table = table.reshape(1, -1)
        mode_of_axis: tuple[IntTuple | None, ...] = (None, modes[0])
    else:
        mode_of_axis = tuple(modes[:2])
    rows, cols = table.shape[0], table.shape[1]
    outer = table.shape[2:]
    # Panels are numbered colexicographically (CuTe's order); move them to one leading axis.
    panels_table = table.reshape(rows, cols, -1, order="F")
    count = panels_table.shape[2]
    low, high = int(table.min()), int(table.max())
    values, multiplicity = np.unique(table, return_counts=True)
    copies = dict(zip(values.tolist(), multiplicity.tolist(), strict=True))
    region = _region(rows, cols, view)
    shown = count if view.max_panels is None else min(count, view.max_panels)

    def make_cell(p: int, row: int, col: int) -> Cell:
        value = int(panels_table[row, col, p])
        n = copies[value]
        lines = (str(value), f"x{n}") if n > 1 else (str(value),)
        t = 0.5 if high == low else (value - low) / (high - low)
        where = f"({row_text[row]}, {col_text[col]}" + (f", panel {p})" if count > 1 else ")")
        tooltip = f"{where} -> offset {value}" + (f" (reached by {n} coordinates)" if n > 1 else "")
        return Cell(row, col, lines, _viridis(t), tooltip, (("offset", value), ("copies", n)))

    row_text = _mode_labels(mode_of_axis[0], rows) if mode_of_axis[0] is not None else ("",)
    col_text = _mode_labels(mode_of_axis[1], cols)
    panels = []
    for p in range(shown):
        index = np.unravel_index(p, outer, order="F") if outer else ()
        panel_title = ", ".join(f"mode {k + 2} = {int(i)}" for k, i in enumerate(index))
        row_range = range(region.first_row, region.first_row + region.rows)
        col_range = range(region.first_col, region.first_col + region.cols)
        panels.append(Panel(
            panel_title, region.first_row, region.first_col,
            tuple(row_text[r] for r in row_range), tuple(col_text[c] for c in col_range),
            tuple(make_cell(p, r, c) for r in row_range for c in col_range),
        ))
    if mode_of_axis[0] is None:
        axes = f"one row: mode 0 {format_int_tuple(modes[0])}"
    else:
        axes = (f"rows: mode 0 {format_int_tuple(modes[0])}, columns: mode 1 "
                f"{format_int_tuple(modes[1])}")
    if outer:
        axes += "; one panel per index of modes 2.. (first fastest)"
    notes = [axes, "label: offset (xN: N coordinates share it); colour: offset, dark = "
             f"{low} to yellow = {high}", *_crop_note(region, rows, cols, "table")]
    if shown < count:
        notes.append(f"showing {shown} of {count} panels (max_panels to change)")
    steps = sorted({low + round(k * (high - low) / 4) for k in range(5)})
    legend = tuple(Swatch(_viridis(0.5 if high == low else (v - low) / (high - low)), str(v))
                   for v in steps)
    return Picture(title or f"CuTe layout {layout}", tuple(notes), tuple(panels), legend)


def save_picture(
    picture: Picture, path: str | os.PathLike[str] | None, view: View = View()
) -> str:
    """The picture's SVG text, also written to ``path`` if given: ``.svg``, or ``.png`` rendered."""
    svg = picture.to_svg(view)
    if path is None:
        return svg
    suffix = Path(path).suffix.lower()
    if suffix == ".svg":
        Path(path).write_text(svg, encoding="utf-8")
    elif suffix == ".png":
        svg_to_png(svg, path)
    else:
        raise PictureError(f"cannot write {os.fspath(path)!r}: pictures are .svg or .png files")
    return svg


# ---------------------------------------------------------------------------------- rendering


def render_distributed(
    layout: LinearLayout,
    path: str | os.PathLike[str] | None = None,
    *,
    view: View = View(),
    title: str | None = None,
) -> str:
    """SVG text of :func:`distributed_picture`, also written to ``path`` (.svg or .png) if given."""
    return save_picture(distributed_picture(layout, view, title), path, view)


def render_shared(
    layout: LinearLayout,
    elem_bytes: int,
    target_banks: int = 32,
    path: str | os.PathLike[str] | None = None,
    *,
    view: View = View(),
    title: str | None = None,
) -> str:
    """SVG text of :func:`shared_picture`, also written to ``path`` (.svg or .png) if given."""
    return save_picture(shared_picture(layout, elem_bytes, target_banks, view, title), path, view)


def render_cute(
    layout: Layout | ComposedLayout,
    path: str | os.PathLike[str] | None = None,
    *,
    view: View = View(),
    title: str | None = None,
) -> str:
    """SVG text of :func:`cute_picture`, also written to ``path`` (.svg or .png) if given."""
    return save_picture(cute_picture(layout, view, title), path, view)


def render(
    layout: LinearLayout | Layout | ComposedLayout,
    path: str | os.PathLike[str] | None = None,
    *,
    elem_bytes: int | None = None,
    target_banks: int = 32,
    view: View = View(),
    title: str | None = None,
) -> str:
    """Any layout: CuTe ones as offset tables, ``offset`` ones as shared, others as distributed."""
    if isinstance(layout, (Layout, ComposedLayout)):
        return render_cute(layout, path, view=view, title=title)
    if not isinstance(layout, LinearLayout):
        raise LayoutError(
            f"cannot draw a {type(layout).__name__}: render takes a LinearLayout or a CuTe "
            "Layout / ComposedLayout"
        )
    if layout.in_dims == (OFFSET,):
        if elem_bytes is None:
            raise LayoutError(
                "a shared layout's picture needs elem_bytes: banks depend on the byte address",
                hints=["render(layout, path, elem_bytes=2) for 16-bit elements"],
            )
        return render_shared(layout, elem_bytes, target_banks, path, view=view, title=title)
    return render_distributed(layout, path, view=view, title=title)
