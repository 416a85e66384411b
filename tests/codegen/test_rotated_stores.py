"""Stores into rows whose start moves from row to row: rotated runs (``tile_access``).

A 8191 x 8192 bf16 matrix transposed is a 8192 x 8191 one: its rows are 16,382 bytes
apart, so row ``r`` starts ``r`` elements (mod 8) before a 16-byte boundary, and a warp
of the transpose's 64 x 64 store spans 4 such rows. Three levels of checks:

* the SASS (offline): each vector group is one ``STG.E.128`` in every shift, with the
  partial chunks as a few predicated pieces, and no switch on the shift;
* the generated code run on the host (``simt``, no GPU): every block writes exactly its
  tile, bit for bit, in every alignment class of the row pitch, for bf16, f32, int8 and
  f64, into views with offsets;
* on a GPU (marked ``gpu``): the interpreter, the device and numpy agree on ragged shapes
  (odd and prime sizes, one row, one column), pitches of every class, torch views.
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import collections

import ml_dtypes
import numpy as np
import pytest

import tilekit as tk
from tests.codegen.sass_checks import needs_cuobjdump, opcodes, resources
from tests.codegen.simt import device_buffer, emulate_each_block, sentinel_free_values
from tilekit import knobs
from tilekit.codegen.size_facts import candidate_size_facts, size_facts_holding
from tilekit.layout.realign import rotated_run
from tilekit.layout.tile_layouts import BlockedEncoding

bf16 = ml_dtypes.bfloat16
TILES = [(64, 64), (128, 64), (64, 128), (128, 128), (256, 32), (32, 256)]


@tk.kernel
def transpose(X, Y, BM: tk.constexpr, BN: tk.constexpr):
    i, j = tk.program_id(0), tk.program_id(1)
    Y.tile((BN, BM), (j, i)).store(X.tile((BM, BN), (i, j)).load().T)


@tk.kernel
def copy_tiles(X, Y, BM: tk.constexpr, BN: tk.constexpr):
    i, j = tk.program_id(0), tk.program_id(1)
    Y.tile((BM, BN), (i, j)).store(X.tile((BM, BN), (i, j)).load())


def _facts(module, arrays):
    return size_facts_holding(candidate_size_facts(module),
                              {name: a.shape for name, a in arrays.items()})


def _store_layout(module):
    from tilekit.codegen import occupancy
    from tilekit.codegen.target import get_target
    from tilekit.layout.propagate import LayoutOptions, assign_layouts

    tgt = get_target("sm_90a")
    laid = assign_layouts(module, LayoutOptions(occupancy.default_num_warps(module),
                                                tgt.warp_size, tgt.bank_target))
    (store,) = [op for op in laid.walk() if op.name == "tile_store"]
    return store.operand("value").type.layout


# --- the SASS ---------------------------------------------------------------------------------

@needs_cuobjdump
@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
def test_transpose_8191x8192_stores_each_group_as_one_128_bit_store(tile):
    """Before: each group was stored as 16-, 32- and 64-bit pieces on one arm of a
    switch on its row's shift (8 arms, 4 of them taken by a warp: 32 ``STG.E.64``, 32
    ``STG.E``, 60 ``STG.E.U16`` in the 64 x 64 kernel). Now one predicated
    ``STG.E.128`` per group on the vector path, the first lane of each run adding the
    run's two partial chunks as at most one 64-, one 32- and one 16-bit store each."""
    from tilekit.codegen import compile_module
    from tilekit.rt import link

    BM, BN = tile
    x = np.zeros((8191, 8192), bf16)
    y = np.zeros((8192, 8191), bf16)
    module = transpose.trace(x, y, BM=BM, BN=BN)
    assert "Y" not in module.kernel.strides16
    compiled = compile_module(module, "sm_90a", divisible=_facts(module, {"X": x, "Y": y}))
    ops = collections.Counter(opcodes(link.link_ptx(compiled.binary, "sm_90a")))
    lay = _store_layout(module)
    enc = lay.encoding
    assert isinstance(enc, BlockedEncoding)
    groups = lay.num_regs // 8
    if enc.threads_per_warp[0] == 1:  # one row per warp: the warp-uniform shuffles
        assert ops["STG.E.128"] >= groups
        return
    assert rotated_run(lay, 8, 2) is not None
    assert ops["STG.E.128"] == groups, ops  # the vector path has no per-shift copies
    assert ops["SHFL.IDX"] == 4 * groups
    assert ops["STG.E.64"] + ops["STG.E"] <= 4 * groups, ops
    assert ops["BRX"] == 0


@needs_cuobjdump
def test_edge_tiles_address_elements_from_their_group():
    """An edge tile's element path (core groups, unit inner stride): one address per
    group and immediate offsets, which kept the 64 x 64 transpose at 64 registers (94
    when each element had an address of its own: 5 blocks per SM instead of 8)."""
    from tilekit.codegen import compile_module
    from tilekit.rt import link

    x = np.zeros((8191, 8192), bf16)
    y = np.zeros((8192, 8191), bf16)
    module = transpose.trace(x, y, BM=64, BN=64)
    compiled = compile_module(module, "sm_90a", divisible=_facts(module, {"X": x, "Y": y}))
    assert resources(link.link_ptx(compiled.binary, "sm_90a"))["REG"] <= 72


# --- the generated code, run on the host -------------------------------------------------------

# (tile, Y's row pitch mod 8 elements, offset of Y's first element): every shift class for
# the 64 x 64 tile, an odd class for the others (a 4-byte one for 128 x 64), offset views.
EMULATED = ([((64, 64), c, 0) for c in range(8)] + [(t, 3, 0) for t in TILES[1:]]
            + [((128, 64), 6, 0), ((64, 64), 0, 5), ((32, 256), 2, 1)])


@pytest.mark.parametrize("tile,cls,offset", EMULATED,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_emulated_transpose_writes_exactly_its_tile(tile, cls, offset):
    BM, BN = tile
    _emulate_transpose(BM, BN, BM + 9, BN + 5, cls, offset)  # a full and a ragged tile


def _emulate_transpose(BM, BN, M, N, cls, offset):
    """The transpose of an M x N bf16 matrix into rows of pitch ``M`` rounded up to the
    class ``cls`` (mod 8 elements), ``offset`` elements into their buffer, run block by
    block on the host: each block writes exactly its tile."""
    pitch = M + (cls - M) % 8
    _, x = device_buffer(sentinel_free_values((M, N), bf16))
    y_buffer, y_rows = device_buffer(np.zeros((N, pitch), bf16), offset)
    y = y_rows[:, :M]
    emulate_each_block(transpose, x, y_buffer, y, dict(BM=BM, BN=BN),
                        (tk.cdiv(M, BM), tk.cdiv(N, BN)),
                        lambda i, j: np.s_[j * BN:(j + 1) * BN, i * BM:(i + 1) * BM], x.T)


@pytest.mark.parametrize("tile,cls,offset", [((256, 32), 3, 0), ((256, 64), 5, 1)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_emulated_transpose_edge_warps_store_their_whole_groups_as_pieces(tile, cls, offset):
    """Y's rows end 3 elements before its last tile column does (M = 2 BM - 3): in that
    column every warp (one row each) fails the shuffles' vote; its lanes with every group
    inside store them as pieces (a second switch on the shift), the last lane element by
    element. Each element of Y written once, nothing outside."""
    BM, BN = tile
    M, N = 2 * BM - 3, BN + 5
    module = transpose.trace(np.zeros((M, N), bf16), np.zeros((N, M), bf16), BM=BM, BN=BN)
    assert _store_layout(module).encoding.threads_per_warp[0] == 1  # one row per warp
    _emulate_transpose(BM, BN, M, N, cls, offset)


def test_only_a_ragged_minor_dim_adds_the_edge_pieces():
    """The pieces path costs code: a transpose whose Y rows are a multiple of the tile
    (8192 x 8193: no edge warp) has one switch per row of a warp, 8191 x 8193 two."""
    from tilekit.codegen import compile_module

    def switches(m: int, n: int) -> int:
        x, y = np.zeros((m, n), bf16), np.zeros((n, m), bf16)
        module = transpose.trace(x, y, BM=256, BN=64)
        compiled = compile_module(module, "sm_90a",
                                  divisible=_facts(module, {"X": x, "Y": y}))
        return compiled.llvm_ir.count("switch ")

    assert switches(8191, 8193) == 2 * switches(8192, 8193) > 0


@pytest.mark.parametrize("dtype,tile", [(bf16, (16, 64)), (np.float32, (16, 32)),
                                        (np.int8, (32, 64)), (np.float64, (32, 16))],
                         ids=["bf16", "f32", "i8", "f64"])
@pytest.mark.parametrize("offset", [0, 1])
def test_emulated_copy_into_misaligned_rows_of_every_width(dtype, tile, offset):
    """Groups of 16 bytes of 1-, 2-, 4- and 8-byte elements (pieces of 1 to 8 elements),
    rows of pitch ``N + 1`` (every row its own shift) in a view ``offset`` elements into
    its buffer."""
    BM, BN = tile
    M, N = 2 * BM + 1, 2 * BN + 3
    _, x = device_buffer(sentinel_free_values((M, N), dtype))
    y_buffer, y_rows = device_buffer(np.zeros((M, N + 1), dtype), offset)
    y = y_rows[:, :N]
    emulate_each_block(copy_tiles, x, y_buffer, y, dict(BM=BM, BN=BN),
                        (tk.cdiv(M, BM), tk.cdiv(N, BN)),
                        lambda i, j: np.s_[i * BM:(i + 1) * BM, j * BN:(j + 1) * BN], x)


def test_emulated_copy_into_a_strided_view_takes_the_element_path():
    """Every other column: no unit inner stride, so neither vectors nor group-relative
    addresses, each element on its own."""
    M, N, BM, BN = 37, 133, 16, 64
    _, x = device_buffer(sentinel_free_values((M, N), bf16))
    y_buffer, y_rows = device_buffer(np.zeros((M, 2 * N + 2), bf16), 1)
    y = y_rows[:, :2 * N:2]
    emulate_each_block(copy_tiles, x, y_buffer, y, dict(BM=BM, BN=BN),
                        (tk.cdiv(M, BM), tk.cdiv(N, BN)),
                        lambda i, j: np.s_[i * BM:(i + 1) * BM, j * BN:(j + 1) * BN], x)


# --- on a GPU ---------------------------------------------------------------------------------

# (M, N) of X; Y is N x M. Odd and prime sizes, one row, one column, every pitch class of Y
# (M mod 8), exact tiles, and a large one whose tiles are mostly inside.
GPU_SHAPES = [(8191, 8192), (1031, 1031), (257, 263), (131, 97), (1, 1031), (1031, 1),
              (64, 64), (200, 301), (67, 8), (8, 67)] + [(520 + c, 263) for c in range(8)]


@pytest.mark.gpu
@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_transpose_on_the_gpu_matches_the_interpreter(on_gpu, shape, tile):
    M, N = shape
    BM, BN = tile
    x = sentinel_free_values((M, N), bf16, seed=None)
    grid = (tk.cdiv(M, BM), tk.cdiv(N, BN))
    y = np.full((N, M), np.nan, bf16)
    transpose[grid](x, y, BM=BM, BN=BN)
    np.testing.assert_array_equal(y.view(np.uint16), x.T.view(np.uint16))
    if M * N <= 300_000:
        with knobs.override(interpret=True):
            yi = np.full((N, M), np.nan, bf16)
            transpose[grid](x, yi, BM=BM, BN=BN)
        np.testing.assert_array_equal(yi.view(np.uint16), y.view(np.uint16))


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [(64, 64), (128, 64), (32, 256)],
                         ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("offset", range(8))
@pytest.mark.parametrize("pad", [0, 1, 4])
def test_transpose_into_torch_views_with_offsets(on_gpu, tile, offset, pad):
    """Y a column slice of a wider device matrix, ``offset`` elements in (so its base is
    not 16-byte aligned unless ``offset % 8 == 0``), rows ``M + offset + pad`` apart; the
    columns around the view are left alone."""
    torch = _torch()
    M, N, (BM, BN) = 301, 263, tile
    x = torch.randn(M, N, device="cuda").to(torch.bfloat16)
    wide = torch.full((N, M + offset + pad), float("nan"), device="cuda",
                      dtype=torch.bfloat16)
    y = wide[:, offset:offset + M]
    transpose[tk.cdiv(M, BM), tk.cdiv(N, BN)](x, y, BM=BM, BN=BN)
    assert torch.equal(y, x.t())
    assert bool(wide[:, :offset].isnan().all()) and bool(wide[:, offset + M:].isnan().all())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "int8", "float64"])
@pytest.mark.parametrize("shape", [(97, 131), (1, 1031), (1031, 3), (256, 257)],
                         ids=lambda s: "x".join(map(str, s)))
def test_copies_into_misaligned_rows_match_the_interpreter(on_gpu, dtype, shape):
    M, N = shape
    dt = bf16 if dtype == "bfloat16" else np.dtype(dtype)
    x = sentinel_free_values((M, N), dt, seed=None)
    for pitch in (N + 1, N + 2, N + 4):
        y = np.zeros((M, pitch), dt)[:, :N]
        grid = (tk.cdiv(M, 16), tk.cdiv(N, 64))
        copy_tiles[grid](x, y, BM=16, BN=64)
        with knobs.override(interpret=True):
            yi = np.zeros((M, pitch), dt)[:, :N]
            copy_tiles[grid](x, yi, BM=16, BN=64)
        np.testing.assert_array_equal(y, x)
        np.testing.assert_array_equal(yi, y)
