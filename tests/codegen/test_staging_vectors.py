"""A layout conversion through shared memory moves each thread's registers in the widest
runs its staging map allows (``tile_convert.StagingMap.accesses``, which code generation
emits as they are): the map's swizzle was chosen for those vectors, and one access per
element puts more wavefronts on the banks."""

from __future__ import annotations

import collections

import ml_dtypes
import numpy as np
import pytest

from bench.memory_bound import tk_transpose
from tilekit.codegen.driver import compile_module
from tilekit.codegen.size_facts import size_facts_holding
from tilekit.layout.tile_convert import StagingMap
from tilekit.rt import link
from tilekit.rt.arrays import HostArray
from tilekit.rt.launcher import specialize_arguments

from .sass_checks import needs_cuobjdump, opcodes

bf16 = np.dtype(ml_dtypes.bfloat16)


def _map(reg, lane_cols=(), warp_cols=()):
    return StagingMap(tuple(reg), tuple(lane_cols), tuple(warp_cols))


def _addresses(smap, count):
    return [[smap.offset(r, lane, warp) for r in range(count)]
            for lane in range(32) for warp in range(4)]


@pytest.mark.parametrize("size, width", [(2, 8), (4, 4), (8, 2), (1, 16)])
def test_consecutive_aligned_registers_move_as_one_access(size, width):
    smap = _map([base + i for base in (0, 520 * width, 64 * width) for i in range(width)],
                lane_cols=(width, 2 * width, 1024), warp_cols=(4096,))
    count = 3 * width
    runs = smap.accesses(count, size)
    assert runs == tuple(tuple(range(k * width, (k + 1) * width)) for k in range(3))
    for addrs in _addresses(smap, count):  # what the runs assume, for every thread
        for run in runs:
            first = addrs[run[0]]
            assert first % len(run) == 0
            assert [addrs[r] for r in run] == list(range(first, first + len(run)))


def test_a_lane_column_inside_a_run_splits_it():
    """A lane column of 2 XORs into the run's low bits: runs of 2 at most."""
    smap = _map(range(8), lane_cols=(2, 8, 16))
    assert smap.accesses(8, 2) == ((0, 1), (2, 3), (4, 5), (6, 7))


def test_strided_or_misaligned_registers_stay_elements():
    assert _map([0, 64, 128, 192]).accesses(4, 2) == ((0,), (1,), (2,), (3,))
    assert _map([1, 2, 3, 4]).accesses(4, 2) == ((0,), (1,), (2,), (3,))


def _transpose_sass(shape, tile):
    x = np.zeros(shape, bf16)
    y = np.zeros(shape[::-1], bf16)
    bound = tk_transpose.bind((x, y), {"BM": tile[0], "BN": tile[1]}, None)
    spec, runtime = specialize_arguments(tk_transpose, bound, None)
    module = tk_transpose.specialize(spec)
    divisible = size_facts_holding(tk_transpose.size_candidates(spec),
                                   {n: a.shape for n, a in runtime.items()
                                    if isinstance(a, HostArray)})
    kernel = compile_module(module, "sm_90a", divisible=divisible)
    return collections.Counter(opcodes(link.link_ptx(kernel.binary, "sm_90a")))


@needs_cuobjdump
@pytest.mark.parametrize("shape", [(8192, 8192), (8191, 8193)], ids=["aligned", "ragged"])
def test_a_256x32_transpose_reads_its_staging_in_16_byte_vectors(shape):
    """Each thread reads its 32 elements as four 16-byte vectors (the plan's), not 24
    2-byte and 2 8-byte reads."""
    ops = _transpose_sass(shape, (256, 32))
    shared_reads = {op: n for op, n in ops.items() if op.startswith("LDS")}
    assert shared_reads == {"LDS.128": 4}, shared_reads
