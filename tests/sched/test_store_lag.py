"""Bulk stores left in flight for one step (``schedule._Pipeline.store_lag``).

A pipeline whose body only stores its tiles unchanged sends them out as TMA bulk stores
straight from the stage. With three stages or more, each step waits only for the previous
step's stores to have read their stage (``store_wait`` pending 1), releases that stage,
copies ``stages - 2`` steps ahead, and drains the last stores at the loop's exit
(``store_drain``). What is checked: the schedule has that shape; the protocol checker
accepts it at every trip count and refutes its mutants (no drain, too deep a wait, the
stage released at once); the interpreter's result equals the input; the PTX waits with
depth 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.codegen.test_lower_async import pipelined_copy, run_interpreter
from tilekit import knobs
from tilekit.codegen.driver import compile_module
from tilekit.ir.core import Operation
from tilekit.sched import schedule_pipelines
from tilekit.sched.protocol import check_function

f32 = np.float32


@pytest.fixture(autouse=True)
def _interpreted():
    with knobs.override(interpret=True):
        yield


def traced(stages: int, shape=(300, 1000), roles=None, tile=(8, 128)):
    x = np.zeros(shape, f32)
    return pipelined_copy.trace(x, np.zeros_like(x), BM=tile[0], BN=tile[1], STAGES=stages,
                                ENGINE="tma", ROLES=roles)


def scheduled(stages: int, **kw):
    return schedule_pipelines(traced(stages, **kw), "sm_90a", num_warps=4)


def ops(module, name: str) -> list[Operation]:
    return [o for o in module.kernel.walk() if o.name == name]


@pytest.mark.parametrize("stages, lag", [(2, 0), (3, 1), (4, 1), (8, 1)])
@pytest.mark.parametrize("roles", [None, True])
def test_the_stores_wait_one_step_behind_from_three_stages(stages: int, lag: int, roles):
    module = scheduled(stages, roles=roles)
    (wait,) = ops(module, "store_wait")
    assert wait.attrs.get("pending", 0) == lag
    assert len(ops(module, "store_drain")) == lag
    assert check_function(module.kernel) == []
    if roles is None:  # the prologue fills S - 1 - lag stages, unrolled
        copies = ops(module, "copy_g2s")
        assert len(copies) == stages - 1 - lag + 1


@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("cols", [8, 100, 128, 300, 1000, 128 * 9])
def test_the_lagged_copy_equals_its_input_on_the_interpreter(stages: int, cols: int):
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((20, cols)).astype(f32)
    module = schedule_pipelines(pipelined_copy.trace(
        x, np.zeros_like(x), BM=8, BN=128, STAGES=stages, ENGINE="tma", ROLES=None),
        "sm_90a", num_warps=4)
    y = np.full_like(x, np.nan)
    run_interpreter(module, 3, X=x, Y=y)
    np.testing.assert_array_equal(y, x)


def _drop(module, name: str) -> None:
    for o in ops(module, name):
        o.parent.ops.remove(o)


def test_the_checker_refutes_a_missing_drain():
    module = scheduled(3)
    _drop(module, "store_drain")
    assert check_function(module.kernel) != []


def test_the_checker_refutes_a_wait_two_steps_behind():
    module = scheduled(3)
    (wait,) = ops(module, "store_wait")
    wait.attrs["pending"] = 2
    assert check_function(module.kernel) != []


def test_the_checker_refutes_a_lagged_wait_with_an_immediate_release():
    """Two stages: the stage is released right after the wait; a wait that lets the
    step's own store run on releases a stage the store still reads."""
    module = scheduled(2)
    (wait,) = ops(module, "store_wait")
    wait.attrs["pending"] = 1
    assert check_function(module.kernel) != []


def test_ptx_waits_with_depth_one_and_drains():
    ptx = compile_module(traced(4), "sm_90a", 4).binary.decode()
    assert "cp.async.bulk.wait_group.read \t1" in ptx
    assert "cp.async.bulk.wait_group.read \t0" in ptx
