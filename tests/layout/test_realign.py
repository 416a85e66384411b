"""Rotated runs (``layout.realign``) against their definition.

A run of ``lanes`` lanes holds ``lanes * width`` consecutive elements of a row, lane ``i``
the group at columns ``[i * width, (i + 1) * width)``; the row's first element lies ``k``
elements past a ``width``-element boundary, so column ``c`` has address ``c + k`` (modulo
``width``). Simulated here lane by lane from the plan's data alone (source lane, chunk,
funnel byte, writes): every column of the run is written exactly once, with its own
value, by accesses aligned to their own size, and nothing outside the run is written.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilekit.layout.realign import RotatedRun, rotated_run
from tilekit.layout.tile_layouts import BlockedEncoding, TileLayout, default_blocked

widths = st.sampled_from([2, 4, 8, 16])
runs = st.builds(RotatedRun, widths, st.sampled_from([2, 4, 8, 16, 32]),
                 st.sampled_from([1, 2, 4]))


def chunk_columns(run: RotatedRun, index: int, k: int) -> list[int]:
    """The column each element of lane ``index``'s chunk holds, from ``chunk`` and
    ``source``."""
    src = run.source(index, k)
    return [(src if from_source else index) * run.width + element
            for from_source, element in run.chunk(k)]


@given(runs, st.data())
def test_a_rotated_run_writes_each_column_once_aligned_and_inside(run, data):
    k = data.draw(st.integers(0, run.width - 1))
    written: list[int] = []
    for index in range(run.lanes):
        columns = chunk_columns(run, index, k)
        start = index * run.width - k  # the lane's chunk start, as a column
        for address, first, count in run.writes(index, k):
            assert count & (count - 1) == 0 and 1 <= count <= run.width
            assert (start + address + k) % count == 0, "not aligned to its own size"
            for t in range(count):
                column = start + address + t
                assert columns[first + t] == column, "a value written to another column"
                written.append(column)
    assert sorted(written) == list(range(run.span))


@given(runs, st.data())
def test_only_the_first_lane_of_a_misaligned_run_writes_pieces(run, data):
    k = data.draw(st.integers(0, run.width - 1))
    for index in range(run.lanes):
        whole = run.writes(index, k) == [(0, 0, run.width)]
        assert whole == (index != 0 or k == 0)
    if k:  # the first lane's pieces: the head (from k) and the tail (up to k), no more
        pieces = run.writes(0, k)
        assert sum(c for a, _, c in pieces if a < run.span) == run.width - k
        assert sum(c for a, _, c in pieces if a >= run.span) == k
        assert len(pieces) <= 2 * (run.width.bit_length() - 1)


@given(widths, st.sampled_from([1, 2, 4, 8]), st.data())
def test_the_funnel_byte_cuts_the_chunk_out_of_source_and_own_groups(width, itemsize, data):
    """Bytes ``[byte, byte + width * itemsize)`` of (source group ++ own group) are the
    chunk's elements, as ``chunk`` says (code generation moves bytes, not elements)."""
    k = data.draw(st.integers(0, width - 1))
    run = RotatedRun(width, 4, 1)
    own = [64 + e for e in range(width)]  # element labels, one byte repeated per element
    source = own if run.source(1, k) == 1 else [1 + e for e in range(width)]
    pair = np.repeat(np.array(source + own, np.uint8), itemsize)
    byte = RotatedRun.funnel_byte(k, width, itemsize)
    got = pair[byte:byte + width * itemsize:itemsize].tolist()
    assert got == [(source if from_source else own)[e] for from_source, e in run.chunk(k)]


@given(widths)
def test_piece_positions_are_the_positions_the_rule_takes(width):
    run = RotatedRun(width, 2, 1)
    for piece in run.head + run.tail:
        taken = {piece.position(k) for k in range(width) if piece.present(k)}
        assert set(piece.positions(width)) == taken
        assert all(p % piece.size == 0 and p + piece.size <= width for p in taken)


@pytest.mark.parametrize("shape,itemsize,warps,rotates", [
    ((64, 64), 2, 4, True),      # 8 lanes along a row, 4 rows per warp: the transpose's tile
    ((128, 128), 2, 8, True),    # 16 lanes along a row
    ((256, 32), 2, 8, True),     # 4 lanes along a row
    ((1, 4096), 4, 4, True),     # one row per warp: also a run (codegen shuffles it its way)
    ((64, 8), 2, 4, False),      # one lane per row: no run
    ((64, 64), 1, 4, True),      # 16 bytes of int8
    ((64, 6), 4, 4, False),      # a run of 2 lanes x 4 floats is wider than the tile
])
def test_rotated_run_of_blocked_layouts(shape, itemsize, warps, rotates):
    lay = default_blocked(shape, warps, 32, itemsize)
    enc = lay.encoding
    assert isinstance(enc, BlockedEncoding)
    width = min(16 // itemsize, enc.size_per_thread[1])
    run = rotated_run(lay, width, itemsize)
    assert (run is not None) == rotates
    if run is not None:
        coords, _ = lay.table()
        # lanes i and i + 1 of a run hold neighbouring groups of one row
        for lane in range(32):
            nxt = lane + run.lane_div
            if (lane // run.lane_div) % run.lanes == run.lanes - 1 or nxt >= 32:
                continue
            assert coords[0, nxt, 0, 0] == coords[0, lane, 0, 0]
            assert coords[0, nxt, 0, 1] == coords[0, lane, 0, 1] + width


def test_slices_and_narrow_groups_do_not_rotate():
    lay = TileLayout((64, 64), BlockedEncoding((1, 8), (4, 8), (4, 1), (1, 0)))
    assert rotated_run(lay, 4, 2) is None  # groups of 4 on lanes 8 apart: not neighbours
    assert rotated_run(lay, 8, 2) == RotatedRun(8, 8, 1)
    assert rotated_run(lay, 8, 4) is None  # 32-byte chunks
    with pytest.raises(ValueError):
        RotatedRun(6, 4, 1)
