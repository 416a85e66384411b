"""TileLayout: the layout function of tiles of any shape, checked by its defining
properties. Power-of-two tiles against ``LinearLayout`` point by point (``to_linear``);
tiles of any shape against a reference written from the encodings' definition: each
element owned exactly once, replicas holding ``coordinate mod extent``, the register
count, ``permuted`` and ``may_wrap``."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilekit.errors import LayoutError
from tilekit.layout.linear import LANE, REGISTER, WARP
from tilekit.layout.tile_layouts import (
    BlockedEncoding,
    ScalarEncoding,
    SliceEncoding,
    TileLayout,
    default_blocked,
)

RAGGED = (1, 2, 3, 5, 7, 31, 37, 97, 100, 129, 4097)


# --- strategies -----------------------------------------------------------------------------


def _split_bits(draw, total: int, rank: int) -> tuple[int, ...]:
    """Powers of two, one per dim, whose product is ``2**total``."""
    bits = [0] * rank
    for _ in range(total):
        bits[draw(st.integers(0, rank - 1))] += 1
    return tuple(1 << b for b in bits)


@st.composite
def blocked_encodings(draw, rank: int, warp_size: int | None = None,
                      num_warps: int | None = None) -> BlockedEncoding:
    warp_size = warp_size or draw(st.sampled_from([32, 64]))
    num_warps = num_warps or draw(st.sampled_from([1, 2, 4, 8]))
    spt = tuple(1 << draw(st.integers(0, 3)) for _ in range(rank))
    tpw = _split_bits(draw, warp_size.bit_length() - 1, rank)
    wpc = _split_bits(draw, num_warps.bit_length() - 1, rank)
    order = tuple(draw(st.permutations(range(rank))))
    return BlockedEncoding(spt, tpw, wpc, order)


pow2_shapes = st.lists(st.integers(0, 6).map(lambda b: 1 << b), min_size=1,
                       max_size=3).filter(lambda s: math.prod(s) <= 4096).map(tuple)
any_extents = st.one_of(st.sampled_from(RAGGED), st.integers(1, 300))
any_shapes = st.one_of(
    st.lists(any_extents, min_size=1, max_size=3).filter(lambda s: math.prod(s) <= 20_000),
    st.tuples(st.just(1), st.sampled_from([4097, 1001, 37])),
).map(tuple)


@st.composite
def layouts(draw, shapes=any_shapes) -> TileLayout:
    """A shape with a default (anchor) encoding or a random blocked one."""
    shape = draw(shapes)
    if draw(st.booleans()):
        return default_blocked(shape, draw(st.sampled_from([1, 2, 4, 8])),
                               draw(st.sampled_from([32, 64])),
                               draw(st.sampled_from([1, 2, 4, 8])))
    return TileLayout(shape, draw(blocked_encodings(len(shape))))


@st.composite
def sliced_layouts(draw, shapes=any_shapes) -> TileLayout:
    """A slice of a parent layout along one of its dims (rank >= 1 left)."""
    parent = draw(layouts(shapes.filter(lambda s: len(s) >= 2)))
    dim = draw(st.integers(0, parent.rank - 1))
    shape = parent.shape[:dim] + parent.shape[dim + 1:]
    return TileLayout(shape, SliceEncoding(parent.encoding, dim))


# --- references -----------------------------------------------------------------------------


def _digits(index: np.ndarray, radices: list[int]) -> list[np.ndarray]:
    out = []
    for r in radices:
        out.append(index % r)
        index = index // r
    return out


def reference_blocked(shape: tuple[int, ...], enc: BlockedEncoding) -> np.ndarray:
    """Unwrapped coordinates ``[warp, lane, reg, dim]`` from the definition: a thread holds
    a ``size_per_thread`` block (capped at the extent rounded up to a power of two); lanes,
    then warps, step over the dims in ``order``; the CTA footprint repeats in registers
    ``cdiv(extent, footprint)`` times; register numbering is vector digits in ``order``,
    then repeat digits in ``order``."""
    rank = len(shape)
    spt = [min(enc.size_per_thread[d], 1 << max(0, (shape[d] - 1).bit_length()))
           for d in range(rank)]
    tpw, wpc, order = enc.threads_per_warp, enc.warps_per_cta, enc.order
    foot = [spt[d] * tpw[d] * wpc[d] for d in range(rank)]
    reps = [-(-shape[d] // foot[d]) for d in range(rank)]
    nregs = math.prod(spt) * math.prod(reps)
    w = np.arange(enc.num_warps).reshape(-1, 1, 1)
    l = np.arange(enc.warp_size).reshape(1, -1, 1)
    r = np.arange(nregs).reshape(1, 1, -1)
    lane_d = dict(zip(order, _digits(l, [tpw[d] for d in order])))
    warp_d = dict(zip(order, _digits(w, [wpc[d] for d in order])))
    reg_d = _digits(r, [spt[d] for d in order] + [reps[d] for d in order])
    vec_d = dict(zip(order, reg_d[:rank]))
    rep_d = dict(zip(order, reg_d[rank:]))
    out = np.zeros((enc.num_warps, enc.warp_size, nregs, rank), np.int64)
    for d in range(rank):
        out[..., d] = (rep_d[d] * foot[d] + warp_d[d] * spt[d] * tpw[d] + lane_d[d] * spt[d]
                       + vec_d[d])
    return out


def unwrapped(layout: TileLayout) -> np.ndarray:
    """``[warp, lane, reg, dim]`` coordinates from the layout's affine form (before wrap)."""
    w = np.arange(layout.num_warps).reshape(-1, 1, 1)
    l = np.arange(layout.warp_size).reshape(1, -1, 1)
    out = np.zeros((layout.num_warps, layout.warp_size, layout.num_regs, layout.rank),
                   np.int64)
    for k, d in enumerate(layout.dims):
        out[..., k] = np.asarray(d.offsets).reshape(1, 1, -1) + d.lane.value(l) \
            + d.warp.value(w)
    return out


def linear_table(layout: TileLayout) -> np.ndarray:
    """``to_linear()`` evaluated on every (warp, lane, register): ``[warp, lane, reg, dim]``."""
    lin = layout.to_linear()
    sizes = {d: lin.in_dim_size(d) if lin.has_in_dim(d) else 1 for d in (WARP, LANE, REGISTER)}
    assert (sizes[WARP], sizes[LANE]) == (layout.num_warps, layout.warp_size)
    ww, ll, rr = np.meshgrid(*(np.arange(sizes[d]) for d in (WARP, LANE, REGISTER)),
                             indexing="ij")
    inputs = {d: v for d, v in ((WARP, ww), (LANE, ll), (REGISTER, rr)) if lin.has_in_dim(d)}
    out = lin.apply_array(inputs)
    return np.stack([out[f"dim{k}"] for k in range(layout.rank)], axis=-1)


def owners_per_element(layout: TileLayout) -> np.ndarray:
    coords, owned = layout.table()
    count = np.zeros(layout.shape, np.int64)
    np.add.at(count, tuple(coords[owned].T), 1)
    return count


# --- power-of-two tiles: the same function as the LinearLayout -------------------------------


@given(layouts(pow2_shapes))
def test_pow2_blocked_table_is_the_linear_layout(layout: TileLayout):
    coords, _ = layout.table()
    assert np.array_equal(coords, linear_table(layout)), str(layout)


@given(sliced_layouts(pow2_shapes))
def test_pow2_slice_table_is_the_sliced_linear_layout(layout: TileLayout):
    coords, _ = layout.table()
    assert np.array_equal(coords, linear_table(layout)), str(layout)


def test_non_pow2_shapes_have_no_linear_form():
    with pytest.raises(LayoutError, match="power of two"):
        default_blocked((1, 4097)).to_linear()


# --- any shape: owners, replicas, registers --------------------------------------------------


@given(layouts())
def test_blocked_matches_the_reference_and_wraps_replicas(layout: TileLayout):
    enc = layout.encoding
    assert isinstance(enc, BlockedEncoding)
    raw = reference_blocked(layout.shape, enc)
    assert np.array_equal(unwrapped(layout), raw)
    coords, owned = layout.table()
    extent = np.asarray(layout.shape)
    assert np.array_equal(coords, raw % extent), "a replica holds coordinate mod extent"
    assert np.array_equal(owned, (raw < extent).all(axis=-1))


@given(st.one_of(layouts(), sliced_layouts()))
def test_every_element_is_owned_exactly_once(layout: TileLayout):
    assert (owners_per_element(layout) == 1).all(), str(layout)


@given(layouts())
def test_register_count_is_vector_times_repeats(layout: TileLayout):
    enc = layout.encoding
    want = 1
    for d, extent in enumerate(layout.shape):
        spt = min(enc.size_per_thread[d], 1 << max(0, (extent - 1).bit_length()))
        foot = spt * enc.threads_per_warp[d] * enc.warps_per_cta[d]
        want *= spt * -(-extent // foot)
    assert layout.num_regs == want


def test_a_4097_row_takes_9_repeats_of_4_not_64_registers():
    row = default_blocked((1, 4097), num_warps=4, warp_size=32, elem_bytes=4)
    assert row.encoding.size_per_thread == (1, 4)
    assert row.num_regs == 36  # 9 repeats of 4-element vectors: 4608 slots, not 8192
    assert (owners_per_element(row) == 1).all()
    assert row.has_replicas


@given(sliced_layouts())
def test_slice_holds_the_parents_elements_without_the_dim(layout: TileLayout):
    """Every (thread, register) of a slice holds what the parent, of extent 1 along the
    sliced dim, holds there; ownership also needs the thread's sliced digits to be 0."""
    enc = layout.encoding
    assert isinstance(enc, SliceEncoding)
    parent = TileLayout(layout.shape[:enc.dim] + (1,) + layout.shape[enc.dim:], enc.parent)
    p_coords, p_owned = parent.table()
    coords, owned = layout.table()
    # the slice keeps the parent's registers whose offset along the dim is 0
    keep = [r for r in range(parent.num_regs) if parent.dims[enc.dim].offsets[r] == 0]
    assert layout.num_regs == len(keep)
    kept = np.delete(p_coords[:, :, keep], enc.dim, axis=-1)
    assert np.array_equal(coords, kept)
    assert not (owned & ~p_owned[:, :, keep]).any()


@given(layouts(), st.data())
def test_permuted_encoding_gives_the_permuted_table(layout: TileLayout, data):
    perm = tuple(data.draw(st.permutations(range(layout.rank))))
    moved = TileLayout(tuple(layout.shape[p] for p in perm), layout.encoding.permuted(perm))
    coords, owned = layout.table()
    p_coords, p_owned = moved.table()
    assert np.array_equal(p_coords, coords[..., list(perm)])
    assert np.array_equal(p_owned, owned)


@given(st.one_of(layouts(), sliced_layouts()))
def test_may_wrap_is_false_exactly_when_no_thread_passes_the_extent(layout: TileLayout):
    raw = unwrapped(layout)
    for reg, dim in itertools.product(range(layout.num_regs), range(layout.rank)):
        passes = bool((raw[:, :, reg, dim] >= layout.shape[dim]).any())
        assert layout.may_wrap(reg, dim) == passes, (reg, dim, str(layout))


@given(layouts())
def test_has_replicas_iff_some_slot_is_not_an_owner(layout: TileLayout):
    _, owned = layout.table()
    assert layout.has_replicas == (not owned.all())


# --- defaults and edge cases --------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1,), (3,), (128,), (4097,), (7, 31), (1, 4097), (64, 16),
                                   (2, 3, 5), (8, 8, 8)])
@pytest.mark.parametrize("elem_bytes", [1, 2, 4, 8])
def test_default_is_vectorized_along_the_unit_stride_dim(shape, elem_bytes):
    layout = default_blocked(shape, 4, 32, elem_bytes)
    enc = layout.encoding
    assert enc.order[0] == len(shape) - 1 and enc.num_warps == 4 and enc.warp_size == 32
    vec = enc.size_per_thread[-1]
    assert vec * elem_bytes <= 16 and vec <= max(1, shape[-1])
    assert all(s == 1 for s in enc.size_per_thread[:-1])
    assert (owners_per_element(layout) == 1).all()


def test_scalar_layout_is_owned_by_thread_zero():
    layout = TileLayout((), ScalarEncoding(32, 4))
    coords, owned = layout.table()
    assert coords.shape == (4, 32, 1, 0) and layout.num_regs == 1
    assert owned.sum() == 1 and owned[0, 0, 0]
    assert default_blocked(()) == TileLayout((), ScalarEncoding(32, 4))
    assert str(layout) == "#scalar"


def test_malformed_encodings_and_shapes_are_layout_errors():
    with pytest.raises(LayoutError, match="powers of two"):
        BlockedEncoding((3,), (32,), (4,), (0,))
    with pytest.raises(LayoutError, match="malformed"):
        BlockedEncoding((1, 1), (32,), (4,), (0,))
    with pytest.raises(LayoutError, match="positive"):
        TileLayout((0,), BlockedEncoding((1,), (32,), (4,), (0,)))
    with pytest.raises(LayoutError, match="rank"):
        TileLayout((4, 4), BlockedEncoding((1,), (32,), (4,), (0,)))


def test_printed_forms():
    enc = BlockedEncoding((1, 4), (2, 16), (4, 1), (1, 0))
    assert str(enc) == "#blocked<spt=[1,4] tpw=[2,16] wpc=[4,1] order=[1,0]>"
    assert str(SliceEncoding(enc, 1)) == f"#slice<dim=1, {enc}>"
    assert str(TileLayout((8, 64), enc)) == str(enc)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 150), min_size=1, max_size=2),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([4, 8, 16]))
def test_wraps_whole_is_sound(shape, warps, itemsize, vector_bytes):
    """Wherever ``wraps_whole`` says a run along the minor dim wraps whole, every thread's
    wrapped coordinates of the run are consecutive and the run is owned all or nothing
    (what ``codegen.tile_access`` drops its checks on), on random shapes, warps and
    element sizes."""
    lay = default_blocked(tuple(shape), warps, 32, itemsize, vector_bytes=vector_bytes)
    minor = lay.rank - 1
    coords, owned = lay.table()
    run = min(lay.encoding.size_per_thread[minor], lay.shape[minor])
    for first in range(0, lay.num_regs, run):
        regs = list(range(first, min(first + run, lay.num_regs)))
        if len(regs) < 2 or not lay.wraps_whole(regs, minor):
            continue
        cols = coords[:, :, regs, minor].reshape(-1, len(regs))
        assert (np.diff(cols, axis=1) == 1).all(), (shape, warps, itemsize, regs)
        for k in range(lay.rank - 1):  # one row of the tile per run
            other = coords[:, :, regs, k].reshape(-1, len(regs))
            assert (other == other[:, :1]).all()
        mine = owned[:, :, regs].reshape(-1, len(regs))
        assert (mine.all(axis=1) | ~mine.any(axis=1)).all()
