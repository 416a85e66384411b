"""Layout pictures: the SVG says what the layout says, cell by cell; the CLI writes the files.

Every expectation is computed here by brute force from the layout's raw
bases (``reference_apply`` over every input, from ``strategies``) or from
CuTe's definition (``reference_values``), never by the code under test.
Colours are checked as properties (a warp's cells share its palette hue and
get lighter with the lane; equal banks share a fill and different banks
differ), not by repeating the formulas.
"""

from __future__ import annotations

import colorsys
import itertools
import math
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.layout import cute_strategies
from tests.layout.strategies import (
    all_inputs,
    dim_bits,
    invertible_matrices,
    layout_from_columns,
    reference_apply,
)
from tilekit.cli import main
from tilekit.errors import LayoutError
from tilekit.layout import pictures
from tilekit.layout.cute import ComposedLayout, Layout, Swizzle
from tilekit.layout.distributed import blocked, mma_m16n8k16_acc, wgmma_acc
from tilekit.layout.linear import LinearLayout
from tilekit.layout.pictures import (
    Labels,
    PictureError,
    View,
    render,
    render_cute,
    render_distributed,
    render_shared,
)
from tilekit.layout.shared import SwizzleMode, nvidia_swizzle, unswizzled

SVG = "{http://www.w3.org/2000/svg}"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "layouts"
# Okabe-Ito, written out independently of the module (its black is grey there).
OKABE_ITO = ("#e69f00", "#56b4e9", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7",
             "#999999")
EVERYTHING = View(max_cells=None, max_panels=None, labels=Labels.ALWAYS)


# ----------------------------------------------------------------------------------- helpers


def parse_cells(svg: str) -> list[dict]:
    """Every cell of the picture: its panel, data-* facts, fill and text lines."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    cells = []
    for panel in root.iter(f"{SVG}g"):
        if panel.get("class") != "panel":
            continue
        for g in panel.iter(f"{SVG}g"):
            if g.get("class") != "cell":
                continue
            facts = {k[5:]: int(v) for k, v in g.attrib.items() if k.startswith("data-")}
            rect = g.find(f"{SVG}rect")
            texts = [t.text or "" for t in g.findall(f"{SVG}text")]
            cells.append({"panel": int(panel.get("data-panel")), **facts,
                          "fill": rect.get("fill"), "lines": texts,
                          "tooltip": g.find(f"{SVG}title").text})
    return cells


def by_position(cells: list[dict]) -> dict[tuple[int, int, int], dict]:
    table = {(c["panel"], c["row"], c["col"]): c for c in cells}
    assert len(table) == len(cells), "two cells at one position"
    return table


def hls(colour: str) -> tuple[float, float, float]:
    value = int(colour.lstrip("#"), 16)
    return colorsys.rgb_to_hls((value >> 16) / 255, (value >> 8 & 255) / 255, (value & 255) / 255)


def same_hue(a: str, b: str) -> bool:
    (ha, _, sa), (hb, _, sb) = hls(a), hls(b)
    if sa < 0.02 or sb < 0.02:
        return sa < 0.02 and sb < 0.02
    return min(abs(ha - hb), 1 - abs(ha - hb)) < 0.02


def grid_position(coords: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(panel, row, col) of a tile element: rows dim[-2], cols dim[-1], panels row-major outer."""
    if len(shape) == 1:
        return 0, 0, coords[0]
    panel = 0
    for c, n in zip(coords[:-2], shape[:-2], strict=True):
        panel = panel * n + c
    return panel, coords[-2], coords[-1]


def reference_holders(layout: LinearLayout) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
    """Element -> its holders as (block, warp, lane, register), lowest first, by brute force."""
    holders = defaultdict(list)
    for point in all_inputs(layout):
        out = reference_apply(layout, point)
        key = tuple(point.get(n, 0) for n in ("block", "warp", "lane", "register"))
        holders[tuple(out[f"dim{k}"] for k in range(len(out)))].append(key)
    return {element: sorted(found) for element, found in holders.items()}


@st.composite
def distributed_layouts(draw: st.DrawFn, max_in_bits: int = 7, max_out_bits: int = 6):
    """Random F2 maps from hardware dims to dim0..dim{r-1}, zero bases (broadcasts) included."""
    rank = draw(st.integers(1, 3))
    total = draw(st.integers(0, max_out_bits))
    outs = draw(dim_bits(tuple(f"dim{k}" for k in range(rank)), total, min_dims=rank))
    outs = [(f"dim{k}", dict(outs).get(f"dim{k}", 0)) for k in range(rank)]
    ins = draw(dim_bits(("register", "lane", "warp", "block"), draw(st.integers(0, max_in_bits))))
    n_in = sum(b for _, b in ins)
    column = st.one_of(st.just(0), st.integers(0, 2**total - 1))
    return layout_from_columns(ins, outs, draw(st.lists(column, min_size=n_in, max_size=n_in)))


@st.composite
def shared_layouts(draw: st.DrawFn, max_bits: int = 7):
    """offset -> (dim0, dim1): bijective (every swizzle is) or arbitrary (copies, holes)."""
    n = draw(st.integers(0, max_bits))
    if draw(st.booleans()):
        columns = draw(invertible_matrices(n))
        out_bits = n
    else:
        out_bits = draw(st.integers(0, max_bits))
        columns = draw(st.lists(st.integers(0, 2**out_bits - 1), min_size=n, max_size=n))
    rows = draw(st.integers(0, out_bits))
    return layout_from_columns([("offset", n)], [("dim0", rows), ("dim1", out_bits - rows)],
                               columns)


# ----------------------------------------------------------------------------- distributed


@given(distributed_layouts())
def test_distributed_cells_name_the_lowest_holder(layout: LinearLayout) -> None:
    cells = by_position(parse_cells(render_distributed(layout, view=EVERYTHING)))
    shape = tuple(layout.out_dim_size(f"dim{k}") for k in range(len(layout.out_dims)))
    assert len(cells) == math.prod(shape)
    sizes = {n: layout.in_dim_size(n) if layout.has_in_dim(n) else 1
             for n in ("block", "warp", "lane", "register")}
    holders = reference_holders(layout)
    for coords in itertools.product(*(range(n) for n in shape)):
        cell = cells[grid_position(coords, shape)]
        found = holders.get(coords)
        if found is None:
            assert cell["lines"] == ["-"] and cell["holders"] == 0
            continue
        block, warp, lane, register = found[0]
        threads = len({h[:3] for h in found})
        second = ([f"B{block}"] if sizes["block"] > 1 else []) + (
            [f"W{warp}"] if sizes["warp"] > 1 else []) + ([f"x{threads}"] if threads > 1 else [])
        assert cell["lines"] == [f"T{lane}:R{register}"] + ([" ".join(second)] if second else [])
        assert (cell["block"], cell["warp"], cell["lane"], cell["register"]) == found[0]
        assert cell["holders"] == threads


@given(distributed_layouts(max_in_bits=8))
@settings(max_examples=60)
def test_distributed_colours_follow_warps_and_lanes(layout: LinearLayout) -> None:
    cells = [c for c in parse_cells(render_distributed(layout, view=EVERYTHING))
             if c["holders"] > 0]
    warps = layout.in_dim_size("warp") if layout.has_in_dim("warp") else 1
    for cell in cells:
        base = OKABE_ITO[(cell["block"] * warps + cell["warp"]) % len(OKABE_ITO)]
        assert same_hue(cell["fill"], base), (cell, base)
        if cell["lane"] == 0:
            assert cell["fill"] == base
    by_warp = defaultdict(list)
    for cell in cells:
        by_warp[(cell["block"], cell["warp"])].append((cell["lane"], hls(cell["fill"])[1]))
    for shades in by_warp.values():
        shades.sort()
        assert all(a[1] <= b[1] + 1e-9 for a, b in zip(shades, shades[1:], strict=False))


def test_mma_accumulator_picture_matches_ptx_fragment() -> None:
    """PTX ISA m16n8k16 C/D: lane 4g+t holds rows g, g+8, columns 2t, 2t+1 (written by hand)."""
    cells = by_position(parse_cells(render_distributed(mma_m16n8k16_acc(), view=EVERYTHING)))
    for lane in range(32):
        g, t = divmod(lane, 4)
        for i, (row, col) in enumerate([(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t),
                                        (g + 8, 2 * t + 1)]):
            assert cells[(0, row, col)]["lines"] == [f"T{lane}:R{i}"]


def test_broadcast_lists_every_holder_in_the_tooltip() -> None:
    layout = blocked([8], [1], [32], [2], [0])  # 32 lanes x 2 warps over 8 elements
    cells = by_position(parse_cells(render_distributed(layout, view=EVERYTHING)))
    assert cells[(0, 0, 3)]["lines"] == ["T3:R0", "W0 x8"]
    assert cells[(0, 0, 3)]["holders"] == 8
    listed = cells[(0, 0, 3)]["tooltip"].removeprefix("(3): ").split("; ")
    assert listed == [f"warp {w} lane {lane} register 0" for w in (0, 1)
                      for lane in (3, 11, 19, 27)]


def test_rank_three_draws_one_panel_per_outer_index() -> None:
    layout = blocked([4, 2, 8], [1, 1, 2], [2, 2, 4], [1, 1, 1], [2, 1, 0])
    svg = render_distributed(layout, view=EVERYTHING)
    cells = parse_cells(svg)
    assert sorted({c["panel"] for c in cells}) == [0, 1, 2, 3]
    assert len(cells) == 64
    root = ET.fromstring(svg)
    titles = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "panel-title"]
    assert titles == ["dim0=0", "dim0=1", "dim0=2", "dim0=3"]


def test_large_tile_shows_a_corner_by_default_and_shrinks_without_labels() -> None:
    layout = wgmma_acc([128, 128], warps_per_cta=[4, 1])
    corner = parse_cells(render_distributed(layout))
    assert len(corner) == View().max_cells
    assert {(c["row"], c["col"]) for c in corner} == {(r, c) for r in range(32) for c in range(32)}
    assert all(c["lines"] for c in corner)  # 32 columns still fit their labels
    svg = render_distributed(layout, view=View(max_cells=None))
    full = parse_cells(svg)
    assert len(full) == 128 * 128
    assert all(c["lines"] == [] for c in full)
    assert float(ET.fromstring(svg).get("width")) <= View().max_width_px
    assert "showing rows 0-31 and columns 0-31 of 128 x 128" in render_distributed(layout)


def test_window_draws_exactly_that_region() -> None:
    layout = wgmma_acc([128, 128], warps_per_cta=[4, 1])
    cells = parse_cells(render_distributed(layout, view=View(window=(8, 16, 4, 3))))
    assert sorted((c["row"], c["col"]) for c in cells) == [
        (r, c) for r in range(8, 12) for c in range(16, 19)]
    with pytest.raises(PictureError, match="outside the 128 x 128 grid"):
        render_distributed(layout, view=View(window=(128, 0, 1, 1)))


def test_text_table_has_the_same_labels() -> None:
    layout = mma_m16n8k16_acc()
    text = pictures.distributed_picture(layout).to_text()
    rows = [line for line in text.splitlines() if "|" in line][1:]
    assert len(rows) == 16
    for row_index, line in enumerate(rows):
        label, cells = line.split("|")
        assert int(label) == row_index
        g = row_index % 8
        expected = [f"T{4 * g + col // 2}:R{2 * (row_index // 8) + col % 2}" for col in range(8)]
        assert cells.split() == expected


# ------------------------------------------------------------------------------------ shared


@given(shared_layouts(), st.sampled_from([1, 2, 4, 8]), st.sampled_from([32, 64]))
def test_shared_tile_cells_show_offset_and_bank(layout, elem_bytes, banks) -> None:
    cells = parse_cells(render_shared(layout, elem_bytes, banks, view=EVERYTHING))
    shape = (layout.out_dim_size("dim0"), layout.out_dim_size("dim1"))
    offsets = defaultdict(list)
    for point in all_inputs(layout):
        out = reference_apply(layout, point)
        offsets[(out["dim0"], out["dim1"])].append(point["offset"])
    tile = by_position([c for c in cells if c["panel"] == 0])
    assert len(tile) == shape[0] * shape[1]
    fill_of_bank: dict[int, str] = {}
    for (_, row, col), cell in tile.items():
        stored = sorted(offsets.get((row, col), []))
        if not stored:
            assert cell["lines"] == ["-"]
            continue
        bank = stored[0] * elem_bytes // 4 % banks
        copies = f" x{len(stored)}" if len(stored) > 1 else ""
        assert cell["lines"] == [f"{stored[0]}{copies}", f"b{bank}"]
        assert (cell["offset"], cell["bank"]) == (stored[0], bank)
        assert fill_of_bank.setdefault(bank, cell["fill"]) == cell["fill"]
    if banks == 32:  # 8 hues x 4 shades: every bank its own colour
        assert len(set(fill_of_bank.values())) == len(fill_of_bank)


@given(shared_layouts(), st.sampled_from([1, 2, 4, 16]))
def test_shared_memory_rows_show_the_element_at_each_slot(layout, elem_bytes) -> None:
    cells = by_position([c for c in parse_cells(render_shared(layout, elem_bytes, view=EVERYTHING))
                         if c["panel"] == 1])
    size = layout.in_dim_size("offset")
    slots = max(1, 128 // elem_bytes)
    assert len(cells) == size
    for offset in range(size):
        out = reference_apply(layout, {"offset": offset})
        cell = cells[(1, offset // slots, offset % slots)]
        assert cell["lines"] == [f"{out['dim0']},{out['dim1']}"]
        assert (cell["dim0"], cell["dim1"], cell["offset"]) == (out["dim0"], out["dim1"], offset)


def test_128b_swizzle_memory_rows_follow_the_hardware_xor() -> None:
    """bf16 64x64 under SWIZZLE_128B: (r, c) sits at byte r*128 + ((2c) XOR ((r % 8) << 4))."""
    layout = nvidia_swizzle(SwizzleMode.B128, [64, 64], 2)
    cells = parse_cells(render_shared(layout, 2, view=View(max_cells=None)))
    memory = by_position([c for c in cells if c["panel"] == 1])
    for r in range(64):
        for c in range(64):
            byte = r * 128 + ((2 * c) ^ ((r % 8) << 4))
            slot = memory[(1, byte // 128, byte % 128 // 2)]
            assert (slot["dim0"], slot["dim1"]) == (r, c)
    # The swizzle is visible: the first slot of rows 0..7 holds chunks 0..7, all different colours.
    firsts = [memory[(1, r, 0)] for r in range(8)]
    assert [s["chunk"] for s in firsts] == list(range(8))
    assert len({s["fill"] for s in firsts}) == 8
    plain = parse_cells(render_shared(unswizzled([64, 64]), 2, view=View(max_cells=None)))
    assert len({c["fill"] for c in plain if c["panel"] == 1 and c["col"] == 0}) == 1


def test_shared_picture_crops_whole_memory_rows() -> None:
    layout = nvidia_swizzle(SwizzleMode.B128, [64, 64], 2)
    cells = parse_cells(render_shared(layout, 2))
    for panel in (0, 1):
        drawn = {(c["row"], c["col"]) for c in cells if c["panel"] == panel}
        assert drawn == {(r, c) for r in range(16) for c in range(64)}


# -------------------------------------------------------------------------------------- CuTe


@given(cute_strategies.layouts(max_leaves=5, max_size=96, negative=True))
def test_cute_cells_show_the_offset_of_each_coordinate(layout: Layout) -> None:
    cells = by_position(parse_cells(render_cute(layout, view=EVERYTHING)))
    values = cute_strategies.reference_values(layout)
    modes = layout.shape if isinstance(layout.shape, tuple) else (layout.shape,)
    sizes = [math.prod(cute_strategies.reference_flatten(m)) for m in modes]
    assert len(cells) == len(values)
    counts = {v: values.count(v) for v in values}
    for (panel, row, col), cell in cells.items():
        index = col if len(sizes) == 1 else row + sizes[0] * (col + sizes[1] * panel)
        value = values[index]
        assert cell["lines"] == [str(value)] + ([f"x{counts[value]}"] if counts[value] > 1 else [])
        assert cell["offset"] == value


def test_cute_nested_columns_are_labelled_by_natural_coordinates() -> None:
    svg = render_cute(Layout.parse("(4,(2,3)):(1,(4,8))"))
    root = ET.fromstring(svg)
    axis = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "axis"]
    assert axis[:6] == ["(0,0)", "(1,0)", "(0,1)", "(1,1)", "(0,2)", "(1,2)"]
    cells = by_position(parse_cells(svg))
    assert cells[(0, 3, 5)]["lines"] == [str(3 * 1 + 1 * 4 + 2 * 8)]


def test_cute_panels_run_over_further_modes_first_fastest() -> None:
    """Compact (2,2,3,2): panel p = k + 3 l holds offsets 4p .. 4p+3 (CuTe's colex order)."""
    cells = parse_cells(render_cute(Layout((2, 2, 3, 2), (1, 2, 4, 12)), view=EVERYTHING))
    for cell in cells:
        assert cell["offset"] == 4 * cell["panel"] + cell["row"] + 2 * cell["col"]
    assert len(cells) == 24


def test_swizzled_cute_layout_is_drawn_through_its_swizzle() -> None:
    layout = ComposedLayout(Swizzle(1, 0, 2), 0, Layout((4, 2), (1, 4)))
    cells = by_position(parse_cells(render(layout, view=EVERYTHING)))
    for i in range(4):
        for j in range(2):
            plain = i + 4 * j
            assert cells[(0, i, j)]["offset"] == plain ^ ((plain >> 2) & 1)


# ------------------------------------------------------------------------------ dispatch, errors


def test_render_dispatches_by_kind(tmp_path: Path) -> None:
    shared = unswizzled([8, 8])
    assert "tile: offset and bank" in render(shared, elem_bytes=4)
    assert "T0:R0" in render(mma_m16n8k16_acc())
    assert "CuTe layout" in render(Layout((2, 3)))
    with pytest.raises(LayoutError, match="needs elem_bytes"):
        render(shared)
    with pytest.raises(LayoutError, match="cannot draw a dict"):
        render({"dim0": 4})  # type: ignore[arg-type]
    with pytest.raises(LayoutError, match="render_shared"):
        render_distributed(shared)
    with pytest.raises(LayoutError, match="render_distributed"):
        render_shared(mma_m16n8k16_acc(), 2)
    odd = LinearLayout({"lane": [(1,), (2,)]}, [("row", 4)])
    with pytest.raises(LayoutError, match="tensor dims named dim0"):
        render(odd)
    with pytest.raises(PictureError, match=r"\.svg or \.png"):
        render(odd.rename_outs({"row": "dim0"}), tmp_path / "x.jpg")


def test_png_without_a_renderer_says_what_to_install(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "cairosvg", None)
    monkeypatch.setattr(pictures.shutil, "which", lambda name: None)
    assert pictures.find_png_renderer() is None
    with pytest.raises(PictureError) as caught:
        render_distributed(mma_m16n8k16_acc(), tmp_path / "mma.png")
    assert "PNG output needs an SVG renderer" in caught.value.message
    assert any("cairosvg" in h for h in caught.value.hints)
    assert any("rsvg-convert" in h for h in caught.value.hints)
    assert not (tmp_path / "mma.png").exists()


@pytest.mark.skipif(pictures.find_png_renderer() is None, reason="no SVG renderer installed")
def test_png_is_written_when_a_renderer_exists(tmp_path: Path) -> None:
    render_distributed(mma_m16n8k16_acc(), tmp_path / "mma.png")
    assert (tmp_path / "mma.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------- CLI


def test_cli_blocked_writes_the_svg(tmp_path: Path, capsys) -> None:
    out = tmp_path / "blocked.svg"
    code = main(["layout", "blocked", "--shape", "16", "16", "--size-per-thread", "2", "2",
                 "--threads-per-warp", "4", "8", "--warps", "2", "1", "--order", "1", "0",
                 "-o", str(out)])
    assert code == 0
    cells = by_position(parse_cells(out.read_text()))
    assert len(cells) == 256
    # Triton blocked model: lane = 8 * (row // 2 % 4) + col // 2, warp = row // 8.
    assert cells[(0, 9, 5)]["lines"] == ["T2:R3", "W1"]
    assert f"wrote {out}" in capsys.readouterr().out


def test_cli_kinds_write_their_pictures(tmp_path: Path) -> None:
    commands = {
        "mma.svg": ["mma-acc", "--shape", "32", "32", "--warps", "2", "2"],
        "a.svg": ["mma-a", "--shape", "32", "32"],
        "b.svg": ["mma-b"],
        "wg.svg": ["wgmma-acc", "--shape", "64", "32"],
        "wga.svg": ["wgmma-a"],
        "ld.svg": ["ldmatrix", "--count", "x2", "--trans"],
        "swz.svg": ["swizzle", "--mode", "128b", "--shape", "64", "64", "--dtype", "bf16"],
        "classic.svg": ["swizzle", "--shape", "16", "64", "--vec", "8", "--per-phase", "1",
                        "--max-phase", "8"],
        "cute.svg": ["cute", "(4,(2,3)):(1,(4,8))", "--swizzle", "1", "0", "2"],
    }
    expected_cells = {"mma.svg": 1024, "a.svg": 1024, "b.svg": 128, "wg.svg": 1024,
                      "wga.svg": 1024, "ld.svg": 128, "swz.svg": 2048, "classic.svg": 2048,
                      "cute.svg": 24}
    for name, argv in commands.items():
        assert main(["layout", *argv, "-o", str(tmp_path / name)]) == 0, name
        assert len(parse_cells((tmp_path / name).read_text())) == expected_cells[name], name


def test_cli_text_prints_the_table(capsys) -> None:
    assert main(["layout", "mma-acc", "--text"]) == 0
    out = capsys.readouterr().out
    assert "mma_m16n8k16_acc(shape=[16, 8]" in out
    assert out.splitlines()[-1].split("|")[1].split()[:2] == ["T28:R2", "T28:R3"]


def test_cli_examples_write_the_three_documented_pictures(tmp_path: Path) -> None:
    assert main(["layout", "examples", "-o", str(tmp_path / "pics")]) == 0
    written = sorted(p.name for p in (tmp_path / "pics").iterdir())
    assert written == ["blocked.svg", "mma_acc.svg", "swizzle_128b.svg"]
    for name in written:
        fresh = (tmp_path / "pics" / name).read_text()
        assert parse_cells(fresh)
        committed = DOCS / name
        assert committed.read_text() == fresh, (
            f"docs/layouts/{name} is stale: run `tilekit layout examples -o docs/layouts`")


def test_cli_errors_are_clear(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["layout", "hexagonal", "-o", str(tmp_path / "x.svg")])
    assert caught.value.code == 2
    assert "invalid choice: 'hexagonal'" in capsys.readouterr().err
    assert main(["layout", "blocked", "--shape", "12", "16", "-o", str(tmp_path / "x.svg")]) == 1
    err = capsys.readouterr().err
    assert "must be a positive power of two, got 12" in err and "hint:" in err
    assert not (tmp_path / "x.svg").exists()
    assert main(["layout", "mma-acc"]) == 2
    assert "give -o FILE.svg (or .png) or --text" in capsys.readouterr().err
    assert main(["layout", "swizzle", "--shape", "8", "64", "--mode", "64B", "--vec", "4",
                 "--text"]) == 1
    assert "give one or the other" in capsys.readouterr().err
    assert main(["layout", "cute", "(4,2):(1,2):(3)", "--text"]) == 1
    assert "more than one ':'" in capsys.readouterr().err


def test_cli_help_documents_the_examples(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["layout", "--help"])
    text = capsys.readouterr().out
    for command in ("tilekit layout blocked --shape 16 16", "tilekit layout mma-acc",
                    "tilekit layout swizzle --mode 128B", 'tilekit layout cute "(4,(2,3))',
                    "tilekit layout examples -o"):
        assert command in text
