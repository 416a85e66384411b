"""Tile-view accesses: core groups, tail groups, misaligned rows (``codegen.tile_access``).

The plan is checked in Python (pieces, the core/tail split of a ragged row's layout); the
machine code offline, in the SASS: the 4096 x 4097 softmax's core path (rows that are
not 16-byte aligned) moves its 4096 core elements with unpredicated 128-bit accesses.
"""

# ruff: noqa: N806  (tensor-like names)

from __future__ import annotations

import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.codegen.sass_checks import needs_cuobjdump
from tilekit.codegen import sass
from tilekit.codegen.size_facts import candidate_size_facts, size_facts_holding
from tilekit.layout.tile_layouts import default_blocked
from tilekit.rt import link

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))



@given(st.sampled_from([2, 4, 8, 16]), st.data())
def test_aligned_pieces_cover_the_run_with_naturally_aligned_accesses(width, data):
    from tilekit.codegen.tile_access import aligned_pieces

    shift = data.draw(st.integers(0, width - 1))
    pieces = aligned_pieces(shift, width)
    assert [p[0] for p in pieces] == list(np.cumsum([0] + [p[1] for p in pieces[:-1]]))
    assert sum(c for _, c in pieces) == width
    for first, count in pieces:
        assert count & (count - 1) == 0
        assert (shift + first) % count == 0, (shift, pieces)  # aligned to its own size
    if shift == 0:
        assert pieces == [(0, width)]
    # no two neighbours could have been one access
    for (f0, c0), (_, c1) in zip(pieces, pieces[1:]):
        assert not (c0 == c1 and (shift + f0) % (2 * c0) == 0)


@pytest.mark.parametrize("n,warps,itemsize", [(4097, 4, 4), (4097, 4, 2), (8192, 8, 2),
                                              (1000, 4, 4), (5, 4, 4), (96, 1, 2)])
def test_core_groups_are_exactly_the_never_wrapping_vectors(n, warps, itemsize):
    from tilekit.codegen.tile_access import split_groups

    lay = default_blocked((1, n), warps, 32, itemsize)
    width = min(16 // itemsize, lay.encoding.size_per_thread[1])
    groups = [list(range(g, g + width)) for g in range(0, lay.num_regs, width)]
    core, tail = split_groups(lay, groups)
    coords, owned = lay.table()
    seen = []
    for g in core:
        for w in range(warps):
            for lane in range(32):
                cols = [int(coords[w, lane, r, 1]) for r in g]
                assert cols == list(range(cols[0], cols[0] + width))  # consecutive
                assert all(owned[w, lane, r] for r in g)
                seen.extend(cols)
    footprint = width * 32 * warps
    assert sorted(seen) == list(range(n // footprint * footprint))  # each core element once
    assert sorted(r for g in core + tail for r in g) == list(range(lay.num_regs))


def _module(rows, cols, dtype):
    import softmax

    x = np.zeros((rows, cols), dtype)
    return softmax.softmax.trace(x, x.copy(), N=cols), {"X": x.shape, "Y": x.shape}


_UNPREDICATED = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+((?:LDG|STG)\.E\.128)\b", re.MULTILINE)


def _unpredicated_128(module, shapes) -> tuple[int, int]:
    from tilekit.codegen import compile_module

    divisible = size_facts_holding(candidate_size_facts(module), shapes)
    compiled = compile_module(module, "sm_90a", divisible=divisible)
    text = sass.disassemble(link.link_ptx(compiled.binary, "sm_90a"))
    found = _UNPREDICATED.findall(text)
    return found.count("LDG.E.128"), found.count("STG.E.128")


@needs_cuobjdump
@pytest.mark.parametrize("dtype,core", [(np.float32, 4), (ml_dtypes.bfloat16, 4)])
def test_softmax_4096x4097_core_path_has_unpredicated_128_bit_accesses(dtype, core):
    """Rows of 4097 elements: 16388 (or 8194) bytes, so most rows start off a 16-byte
    boundary, and the bucket has no 16-byte row fact. Still, each thread's core groups
    (4 float4 per row on 8 warps, 4 bf16x8 on 4 warps) load and store as unpredicated
    ``LDG.E.128``/``STG.E.128`` on the aligned rows' path."""
    module, shapes = _module(4096, 4097, dtype)
    assert "X" not in module.kernel.strides16
    loads, stores = _unpredicated_128(module, shapes)
    assert loads >= core and stores >= core, (loads, stores)


@needs_cuobjdump
def test_aligned_rows_fold_the_shift_away():
    """With 16-byte rows in the bucket the shift is a constant 0: only the aligned case is
    left (no 64-bit pieces)."""
    from tilekit.codegen import compile_module

    module, shapes = _module(64, 8192, np.float32)
    assert "X" in module.kernel.strides16
    compiled = compile_module(module, "sm_90a", divisible=size_facts_holding(
        candidate_size_facts(module), shapes))
    ops = [i.split()[0] for i in sass.instructions(sass.disassemble(
        link.link_ptx(compiled.binary, "sm_90a")))]
    assert "LDG.E.128" in ops and "LDG.E.64" not in ops and "STG.E.64" not in ops


def test_divisible_sizes_make_the_bounds_check_uniform():
    """The size fact (tensor, dim, tile) replaces a compare per register by one per tile."""
    from tilekit.codegen import compile_module

    module, shapes = _module(64, 4097, np.float32)
    facts = size_facts_holding(candidate_size_facts(module), shapes)
    assert facts == {("X", 1, 4097), ("Y", 1, 4097)}
    plain = compile_module(module, "sm_90a").binary.decode()
    known = compile_module(module, "sm_90a", divisible=facts).binary.decode()
    assert known.count("setp") < plain.count("setp")


@needs_cuobjdump
def test_misaligned_rows_spread_over_a_warp_load_without_pieces():
    """A 64 x 64 bf16 tile of a 8191 x 8193 matrix: a warp spans 4 rows, each with its own
    shift, so shuffles cannot realign it. Each group loads as two aligned 128-bit chunks
    (the second only when the shift is not 0) picked apart by selects and funnel shifts,
    not as 16-, 32- and 64-bit pieces behind a switch per shift; the stores keep the
    pieces."""
    from tilekit.codegen import compile_module

    module, shapes = _transpose_module(8191, 8193, 64, 64)
    compiled = compile_module(module, "sm_90a", divisible=size_facts_holding(
        candidate_size_facts(module), shapes))
    ops = [i.split()[0] for i in sass.instructions(sass.disassemble(
        link.link_ptx(compiled.binary, "sm_90a")))]
    loads = {op for op in ops if op.startswith("LDG")}
    assert loads == {"LDG.E.128", "LDG.E.U16"}, loads  # U16: the scalar path at the edges
    assert ops.count("LDG.E.128") == 2 * 64 * 64 // (8 * 128)  # 2 chunks per group
    assert {"STG.E.64", "STG.E.128"} <= set(ops)


def _transpose_module(rows, cols, bm, bn):
    import tilekit as tk

    @tk.kernel
    def transpose(X, Y, BM: tk.constexpr, BN: tk.constexpr):
        i, j = tk.program_id(0), tk.program_id(1)
        Y.tile((BN, BM), (j, i)).store(X.tile((BM, BN), (i, j)).load().T)

    x = np.zeros((rows, cols), ml_dtypes.bfloat16)
    y = np.zeros((cols, rows), ml_dtypes.bfloat16)
    return transpose.trace(x, y, BM=bm, BN=bn), {"X": x.shape, "Y": y.shape}


@needs_cuobjdump
@pytest.mark.parametrize("dtype,core", [(np.float32, 4), (ml_dtypes.bfloat16, 4)])
def test_misaligned_rows_load_through_one_window_for_every_shift(dtype, core):
    """A one-row tile whose rows start off a 16-byte boundary (4096 x 4097) loads each core
    group as the aligned chunk holding its first element and the next one, the same code
    for every shift: exactly two ``LDG.E.128`` per group. A switch on a warp-uniform shift
    (realigning through shuffles) compiled the loads once per shift, 1 + 2 * 3 chunks per
    group for float32: more code for LLVM and ptxas, and slower on the GPU."""
    module, shapes = _module(4096, 4097, dtype)
    from tilekit.codegen import compile_module

    compiled = compile_module(module, "sm_90a", divisible=size_facts_holding(
        candidate_size_facts(module), shapes))
    ops = [i.split()[0] for i in sass.instructions(sass.disassemble(
        link.link_ptx(compiled.binary, "sm_90a")))]
    assert ops.count("LDG.E.128") == 2 * core, ops.count("LDG.E.128")


# --- misaligned rows, run on the host --------------------------------------------------------

def _copy_rows():
    import tilekit as tk

    @tk.kernel
    def copy_rows(X, Y, N: tk.constexpr):
        row = tk.program_id(0)
        Y.tile((1, N), (row, 0)).store(X.tile((1, N), (row, 0)).load())

    return copy_rows


def _centre_rows():
    import tilekit as tk

    @tk.kernel
    def centre_rows(X, Y, N: tk.constexpr):
        row = tk.program_id(0)
        x = X.tile((1, N), (row, 0)).load().to(tk.float32)
        Y.tile((1, N), (row, 0)).store((x - tk.max(x, axis=1, keepdims=True)).to(Y.dtype))

    return centre_rows


def _rows_of_every_shift(dtype, cols, x_offset, y_offset, y_pad=0):
    """(rows, X, Y's buffer, Y): ``cols``-wide views whose row pitch is one element more
    than a multiple of 16 bytes, so row ``r`` starts ``r`` elements further along; one
    row per shift and the first shift again; X and Y ``x_offset``/``y_offset`` elements
    into their buffers, Y's pitch ``y_pad`` elements wider."""
    from tests.codegen.simt import device_buffer, sentinel_free_values

    width = 16 // np.dtype(dtype).itemsize
    rows = width + 1
    pitch = cols + (1 - cols) % width  # cols <= pitch, pitch = 1 (mod width)
    _, x_rows = device_buffer(sentinel_free_values((rows, pitch), dtype), x_offset)
    y_buffer, y_rows = device_buffer(np.zeros((rows, pitch + y_pad), dtype), y_offset)
    return rows, x_rows[:, :cols], y_buffer, y_rows[:, :cols]


@pytest.mark.parametrize("dtype,cols", [(np.float32, 521), (ml_dtypes.bfloat16, 1031),
                                        (np.int8, 2053), (np.int16, 1031), (np.float64, 263)],
                         ids=["f32", "bf16", "i8", "i16", "f64"])
@pytest.mark.parametrize("x_offset,y_offset", [(0, 0), (1, 3), (5, 0)])
def test_emulated_row_copies_through_windows_in_every_shift(dtype, cols, x_offset, y_offset):
    """One-row tiles of rows whose starts take every shift (the pitch is one element more
    than a multiple of 16 bytes, so row ``r`` starts ``r`` elements further along; ``X``
    and ``Y`` in views offset differently, so a row's load and store shifts differ): the
    generated code, run on the host, copies each row exactly and writes nothing else."""
    from tests.codegen.simt import emulate_each_block

    rows, x, y_buffer, y = _rows_of_every_shift(dtype, cols, x_offset, y_offset, y_pad=2)
    emulate_each_block(_copy_rows(), x, y_buffer, y, dict(N=cols), (rows,),
                       lambda r: np.s_[r:r + 1, :], x)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_emulated_row_reductions_read_windows_in_every_shift(dtype):
    """The windowed registers feed a reduction and an element-wise op, then a store through
    the shift's switch: ``x - max(x)`` per row, in every shift, matches numpy."""
    from tests.codegen.simt import emulate_each_block

    cols = 777
    rows, x, y_buffer, y = _rows_of_every_shift(dtype, cols, 1, 2)
    x32 = x.astype(np.float32)
    want = (x32 - x32.max(axis=1, keepdims=True)).astype(dtype)
    emulate_each_block(_centre_rows(), x, y_buffer, y, dict(N=cols), (rows,),
                       lambda r: np.s_[r:r + 1, :], want)


# --- tail groups that wrap whole -------------------------------------------------------------

ROW_TAILS = [(ml_dtypes.bfloat16, 1000), (np.float32, 1000), (np.float32, 24),
             (ml_dtypes.bfloat16, 40), (np.int8, 48),  # wrapping whole
             (ml_dtypes.bfloat16, 1001), (np.float32, 23)]  # straddling the extent


@pytest.mark.parametrize("n,warps,itemsize", [(1000, 1, 2), (1000, 4, 2), (1000, 2, 4),
                                              (24, 1, 4), (40, 4, 2), (48, 2, 1)])
def test_a_row_whose_length_the_group_divides_wraps_whole(n, warps, itemsize):
    """``TileLayout.wraps_whole`` against the layout's table: in every thread, a tail
    group that wraps whole has consecutive wrapped columns and is owned as a whole (all
    elements or all replicas); a row of 4097 has groups that do not."""
    from tilekit.codegen.tile_access import split_groups

    lay = default_blocked((1, n), warps, 32, itemsize)
    width = min(16 // itemsize, lay.encoding.size_per_thread[1])
    groups = [list(range(g, g + width)) for g in range(0, lay.num_regs, width)]
    _, tail = split_groups(lay, groups)
    assert tail and all(lay.wraps_whole(g, 1) for g in tail)
    coords, owned = lay.table()
    for g in tail:
        cols = coords[:, :, g, 1].reshape(-1, len(g))
        assert (np.diff(cols, axis=1) == 1).all()
        mine = owned[:, :, g].reshape(-1, len(g))
        assert (mine.all(axis=1) | ~mine.any(axis=1)).all()
    ragged = default_blocked((1, 4097), 4, 32, itemsize)
    _, tail = split_groups(ragged, [list(range(g, g + width))
                                    for g in range(0, ragged.num_regs, width)])
    assert not all(ragged.wraps_whole(g, 1) for g in tail)


@pytest.mark.parametrize("warps", [1, 2, 4])
@pytest.mark.parametrize("dtype,cols", ROW_TAILS, ids=lambda v: str(v))
@pytest.mark.parametrize("case", ["aligned", "misaligned", "wider"])
def test_emulated_row_tails(case, dtype, cols, warps):
    """Rows with tail groups (``tile_access._tail_plan``), run on the host: 16-byte rows
    with the size fact (a group that wraps whole is one vector, no element path), rows
    that start off a 16-byte boundary (the alignment checked per group), and a tensor
    wider than the tile (no size fact: the ends of each group checked). Every element past
    a row's ``cols`` holds a value larger than the row's, so an owned register that read
    one changes the row's max. (A replica that read one would not: replicas take no part
    in the result. That ``wraps_whole`` holds where it says so is checked against the
    layout's table, above and in tests/layout.) Each row's ``x - max(x)`` is exact and
    nothing else is written."""
    from tests.codegen.simt import device_buffer, emulate_each_block, sentinel_free_values

    width = 16 // np.dtype(dtype).itemsize
    rows = 3
    pitch = cols + {"aligned": 0, "misaligned": 1, "wider": width}[case]
    offset = 1 if case == "misaligned" else 0
    values = sentinel_free_values((rows, pitch), dtype)
    values[:, cols:] = 120  # larger than any value of the rows, in every dtype here
    _, x_rows = device_buffer(values, offset)
    y_buffer, y_rows = device_buffer(np.zeros((rows, pitch), dtype), offset)
    x, y = (x_rows, y_rows) if case == "wider" else (x_rows[:, :cols], y_rows[:, :cols])
    xs = x[:, :cols].astype(np.float32)
    want = np.zeros(y.shape, dtype)
    want[:, :cols] = (xs - xs.max(axis=1, keepdims=True)).astype(dtype)
    emulate_each_block(_centre_rows(), x, y_buffer, y, dict(N=cols), (rows,),
                       lambda r: np.s_[r:r + 1, :cols], want, num_warps=warps)


def test_a_row_of_1000_bf16_moves_only_vectors():
    """bench's softmax over rows of 1000 bf16 (2000 bytes, 16-byte rows): every group,
    the tail's too, is one 128-bit access; no element path is compiled (it was 8 16-bit
    loads and 8 stores behind a check per thread, and 47 registers where the rows of 1024
    take 32)."""
    from bench import memory_bound
    from tilekit.codegen import compile_module

    x = np.zeros((64, 1000), ml_dtypes.bfloat16)
    module = memory_bound.tk_softmax.trace(x, x.copy(), N=1000)
    facts = size_facts_holding(candidate_size_facts(module), {"X": x.shape, "Y": x.shape})
    for warps in (1, 2, 4):
        ptx = compile_module(module, "sm_90a", num_warps=warps, divisible=facts
                             ).binary.decode()
        accesses = re.findall(r"\b(?:ld|st)\.global(?:\.\w+)*", ptx)
        assert accesses and set(accesses) == {"ld.global.v4.b32", "st.global.v4.b32"}, \
            (warps, sorted(set(accesses)))
