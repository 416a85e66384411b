"""Shared-memory layouts against independent address formulas (integer arithmetic on offsets
and byte addresses, written from the swizzle definitions, not from the code's bases)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilekit.errors import LayoutError
from tilekit.layout.distributed import MatrixCount, ldmatrix_row_addresses
from tilekit.layout.linear import LinearLayout
from tilekit.layout.shared import (
    Major,
    Operand,
    SwizzleMode,
    byte_address_layout,
    nvidia_swizzle,
    swizzled_shared,
    unswizzled,
)


def pow2(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high).map(lambda e: 2**e)


def _all_offsets(layout: LinearLayout) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    offsets = np.arange(layout.in_dim_size("offset"))
    return offsets, layout.apply_array({"offset": offsets})


def hardware_unswizzle(address: np.ndarray, mode_bits: int) -> np.ndarray:
    """Byte-address swizzle as the PTX / CUTLASS Swizzle<B, 4, 3> text defines it: the 16-byte
    chunk index (bits 4..4+B) is XORed with the 128-byte row index mod 2^B (bits 7..7+B)."""
    mask = (1 << mode_bits) - 1
    return address ^ (((address >> 7) & mask) << 4)


# ----------------------------------------------------------------------------- unswizzled


def test_unswizzled_is_strided_storage():
    _, row_major = _all_offsets(unswizzled((4, 8)))
    offsets = np.arange(32)
    assert np.array_equal(row_major["dim0"], offsets // 8)
    assert np.array_equal(row_major["dim1"], offsets % 8)
    _, col_major = _all_offsets(unswizzled((4, 8), order=(0, 1)))
    assert np.array_equal(col_major["dim0"], offsets % 4)
    assert np.array_equal(col_major["dim1"], offsets // 4)
    _, three = _all_offsets(unswizzled((2, 4, 8), order=(1, 2, 0)))
    assert np.array_equal(three["dim1"], np.arange(64) % 4)
    assert np.array_equal(three["dim2"], (np.arange(64) // 4) % 8)
    assert np.array_equal(three["dim0"], np.arange(64) // 32)


# ----------------------------------------------------------------------------- classic swizzle


@st.composite
def swizzle_params(draw):
    rows, cols = draw(pow2(0, 6)), draw(pow2(0, 7))
    vec = draw(pow2(0, 3))
    per_phase = draw(pow2(0, 3))
    max_phase = draw(pow2(0, 3))
    order = draw(st.sampled_from([(1, 0), (0, 1)]))
    return (rows, cols), vec, per_phase, max_phase, order


@given(swizzle_params())
def test_classic_swizzle_matches_the_xor_formula(params):
    shape, vec, per_phase, max_phase, order = params
    layout = swizzled_shared(shape, 2, vec, per_phase, max_phase, order)
    assert layout.is_bijective()
    cols = shape[order[0]]
    offsets, got = _all_offsets(layout)
    row, stored_col = offsets // cols, offsets % cols
    col = stored_col ^ ((((row // per_phase) % max_phase) * vec) % cols)
    assert np.array_equal(got[f"dim{order[1]}"], row)
    assert np.array_equal(got[f"dim{order[0]}"], col)


def test_classic_swizzle_defaults_and_outer_dims():
    # bf16 rows of 64 elements (128 bytes): 8-element vectors, one phase per row, 8 phases.
    layout = swizzled_shared((64, 64), 2)
    assert layout == swizzled_shared((64, 64), 2, vec=8, per_phase=1, max_phase=8)
    # 32 bf16 per row: two rows share a 128-byte line, so 4 phases of 2 rows.
    assert swizzled_shared((64, 32), 2) == swizzled_shared((64, 32), 2, 8, 2, 4)
    stacked = swizzled_shared((2, 8, 8), 4, 2, 1, 4, order=(2, 1, 0))
    offsets, got = _all_offsets(stacked)
    assert np.array_equal(got["dim0"], offsets // 64)
    assert stacked.is_bijective()


@pytest.mark.parametrize("name", ["vec", "per_phase", "max_phase"])
def test_non_power_of_two_periods_are_not_f2(name):
    with pytest.raises(LayoutError) as info:
        swizzled_shared((64, 64), 2, **{name: 3})
    assert f"{name}=3: a swizzle period that is not a power of two is not F2-linear" in str(
        info.value
    )


# ----------------------------------------------------------------------------- hardware swizzles


def test_128_byte_swizzle_on_a_bf16_64x64_tile():
    layout = nvidia_swizzle(SwizzleMode.B128, (64, 64), 2)
    offsets, got = _all_offsets(layout)
    logical = hardware_unswizzle(offsets * 2, 3)
    assert np.array_equal(got["dim0"], logical // 128)
    assert np.array_equal(got["dim1"], (logical % 128) // 2)
    # Row 1's first 16-byte chunk is stored in chunk 1, row 7's in chunk 7.
    address = byte_address_layout(layout, 2)
    assert address.apply({"dim0": 1, "dim1": 0}) == {"byte": 128 + 16}
    assert address.apply({"dim0": 7, "dim1": 8}) == {"byte": 7 * 128 + (1 ^ 7) * 16}
    assert address.apply({"dim0": 8, "dim1": 8}) == {"byte": 8 * 128 + 16}


@st.composite
def operand_tiles(draw):
    mode = draw(st.sampled_from([SwizzleMode.B32, SwizzleMode.B64, SwizzleMode.B128]))
    dtype_bytes = draw(st.sampled_from([1, 2, 4]))
    span = mode.value // dtype_bytes
    contiguous = draw(pow2((16 // dtype_bytes).bit_length() - 1, 8))  # rows of >= 16 bytes
    strided = draw(pow2(0, 7))
    major = draw(st.sampled_from(list(Major)))
    operand = draw(st.sampled_from(list(Operand)))
    return mode, dtype_bytes, span, contiguous, strided, major, operand


@given(operand_tiles())
def test_hardware_swizzles_match_the_address_bit_formula(params):
    mode, dtype_bytes, span, contiguous, strided, major, operand = params
    # Which tensor dim is contiguous: A is (M, K), B is (K, N); K-major means K contiguous.
    k_dim = 1 if operand is Operand.A else 0
    contiguous_dim = k_dim if major is Major.K else 1 - k_dim
    shape = [0, 0]
    shape[contiguous_dim], shape[1 - contiguous_dim] = contiguous, strided
    layout = nvidia_swizzle(mode, shape, dtype_bytes, major, operand)
    assert layout.is_bijective()
    row_elems = min(span, contiguous)
    row_bytes = row_elems * dtype_bytes
    offsets, got = _all_offsets(layout)
    logical = hardware_unswizzle(offsets * dtype_bytes, mode.xor_bits)
    row = logical // row_bytes
    in_row = (logical % row_bytes) // dtype_bytes
    assert np.array_equal(got[f"dim{1 - contiguous_dim}"], row % strided)
    assert np.array_equal(got[f"dim{contiguous_dim}"], in_row + row_elems * (row // strided))


def test_no_swizzle_is_plain_row_storage():
    assert nvidia_swizzle(SwizzleMode.NONE, (16, 64), 2) == unswizzled((16, 64))
    assert nvidia_swizzle(SwizzleMode.NONE, (16, 64), 2, Major.MN) == unswizzled((16, 64), (0, 1))


def test_swizzle_mode_facts():
    assert [m.xor_bits for m in SwizzleMode] == [0, 1, 2, 3]
    assert [m.repeat_bytes for m in SwizzleMode][1:] == [256, 512, 1024]


def test_hardware_swizzle_errors():
    with pytest.raises(LayoutError, match="holds only 8 bytes"):
        nvidia_swizzle(SwizzleMode.B128, (64, 4), 2)
    with pytest.raises(LayoutError, match="2-D operand tile"):
        nvidia_swizzle(SwizzleMode.B128, (2, 64, 64), 2)
    with pytest.raises(LayoutError, match="dtype_bytes must be a positive power of two, got 3"):
        nvidia_swizzle(SwizzleMode.B64, (64, 64), 3)


# ----------------------------------------------------------------------------- byte addresses


@given(operand_tiles())
def test_byte_address_inverts_the_shared_layout(params):
    mode, dtype_bytes, _, contiguous, strided, major, operand = params
    shape = (strided, contiguous) if (operand is Operand.A) == (major is Major.K) else (
        contiguous, strided)
    layout = nvidia_swizzle(mode, shape, dtype_bytes, major, operand)
    address = byte_address_layout(layout, dtype_bytes)
    assert address.in_dims == layout.out_dims and address.out_dims == ("byte",)
    offsets, elements = _all_offsets(layout)
    got = address.apply_array(elements)["byte"]
    assert np.array_equal(got, offsets * dtype_bytes)


def test_ldmatrix_rows_under_the_128_byte_swizzle_hit_distinct_bank_groups():
    # The reason for the swizzle: an ldmatrix phase (8 lanes, 8 rows, 16 bytes each) of a
    # bf16 64-wide tile reads 8 different 16-byte bank groups; unswizzled, all 8 collide.
    rows = ldmatrix_row_addresses(MatrixCount.X4).resize_out_dim("dim0", 64).resize_out_dim(
        "dim1", 64)
    for storage, groups in (
        (nvidia_swizzle(SwizzleMode.B128, (64, 64), 2), 8),
        (unswizzled((64, 64)), 1),
    ):
        address = rows.compose(byte_address_layout(storage, 2))
        bytes_ = address.apply_array({"lane": np.arange(8)})["byte"]
        assert len(set(((bytes_ // 16) % 8).tolist())) == groups


def test_byte_address_needs_a_bijective_offset_layout():
    with pytest.raises(LayoutError, match="no address function: cannot invert"):
        byte_address_layout(LinearLayout({"offset": [[0]]}, {"dim0": 2}), 2)
    with pytest.raises(LayoutError, match="single in dim 'offset'"):
        byte_address_layout(LinearLayout.identity_1d(4, "lane", "dim0"), 2)
