"""The scheduled form of pipelines, tested against the plain loop it replaces.

Differential: each kernel runs on the interpreter twice, unscheduled (the ``pipeline`` op's
reference is the plain loop) and scheduled (rings, mbarriers and copies, every protocol rule
checked by ``tilekit.ir.async_protocol`` as it runs), and both are compared with numpy.
The facts come from the real arrays, and each case asserts which engine it exercises.
"""

from __future__ import annotations

import sys
import types

import ml_dtypes
import numpy as np
import pytest

from tilekit.errors import ExecutionError, ScheduleError
from tilekit.ir import DType
from tilekit.sched import Engine, RoleMode, schedule_pipelines
from tilekit.sched.engines import EngineRule

from .builders import facts_of, mixed, mixed_ref, row_sum, row_sum_ref, run, sequential

BLOCK = 8
STAGES = 3
ROWS = 2
TRIPS = (0, 1, STAGES - 1, STAGES, STAGES + 1, 1000)


def _x(case: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """X for a trip count: its last tile ragged, with the facts the case needs."""
    if case == "tma":  # 16-byte aligned rows: (8n - 4) float32
        return rng.standard_normal((ROWS, max(BLOCK * n - 4, 4))).astype(np.float32)
    if case in ("cp_async", "sm_80"):
        cols = max(BLOCK * n - 3, 5) if case == "cp_async" else max(BLOCK * n - 4, 4)
        return rng.standard_normal((ROWS, cols)).astype(np.float32)
    # plain: bfloat16 whose base is 2 bytes past a 16-byte boundary
    cols = max(BLOCK * n - 3, 5)
    big = rng.standard_normal((ROWS, cols + 1)).astype(ml_dtypes.bfloat16)
    return big[:, 1:]


CASES = {  # case: (target, dtype, expected engine, expected cp.async chunk)
    "tma": ("sm_90a", DType.FLOAT32, Engine.TMA, None),
    "cp_async": ("sm_90a", DType.FLOAT32, Engine.CP_ASYNC, 4),
    "plain": ("sm_90a", DType.BFLOAT16, Engine.PLAIN, None),
    "sm_80": ("sm_80", DType.FLOAT32, Engine.CP_ASYNC, 16),
}


@pytest.mark.parametrize("roles", [None, "specialized"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("n", TRIPS)
def test_row_sum_scheduled_equals_plain_loop(case: str, roles: str | None, n: int) -> None:
    target, dtype, engine, chunk = CASES[case]
    rng = np.random.default_rng(n)
    x = _x(case, n, rng)
    kernel = facts_of(row_sum(BLOCK, dtype, STAGES, roles=roles), X=x)
    scheduled = schedule_pipelines(kernel.module, target)
    (report,) = scheduled.kernel.schedule_reports
    assert report.engines == (engine,)
    assert report.streams[0].decision.vector_bytes == chunk
    specialized = roles == "specialized" and target == "sm_90a"
    assert report.roles.mode is (RoleMode.SPECIALIZED if specialized else RoleMode.UNIFORM)
    names = [op.name for op in scheduled.walk()]
    assert "pipeline" not in names and ("warp_roles" in names) == specialized

    plain = np.full((ROWS, BLOCK), np.nan, np.float32)
    sched = plain.copy()
    run(kernel.module, (ROWS,), X=x, Y=plain, n=n)
    run(scheduled, (ROWS,), X=x, Y=sched, n=n)
    np.testing.assert_array_equal(sched, plain)
    np.testing.assert_allclose(sched, row_sum_ref(x, n, BLOCK), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("stages", [1, 2, 4])
@pytest.mark.parametrize("roles", [None, "specialized"])
def test_two_streams_tma_and_plain_share_a_barrier(stages: int, roles: str | None) -> None:
    """A TMA stream and a plain stream: a `full` phase expects two arrivals (expect_tx
    and the role's arrival that completes the plain copies)."""
    rng = np.random.default_rng(stages)
    for n in (0, 1, stages, stages + 1, 11):
        k = max(BLOCK * n - 4, 4)
        a = rng.standard_normal((3, k)).astype(np.float32)
        b = rng.standard_normal((k + 1, 3)).astype(np.float16)  # 6-byte rows
        kernel = facts_of(mixed(BLOCK, stages, roles), A=a, B=b)
        scheduled = schedule_pipelines(kernel.module, "sm_90a")
        (report,) = scheduled.kernel.schedule_reports
        assert report.engines == (Engine.TMA, Engine.PLAIN)
        assert report.arrivals == 2
        assert "TMA_BOX_INNER_BYTES" in report.streams[1].tma_rules
        want = np.full((3, 3 * BLOCK), np.nan, np.float32)
        got = want.copy()
        run(kernel.module, (3, 3), A=a, B=b, Y=want, n=n)
        run(scheduled, (3, 3), A=a, B=b, Y=got, n=n)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, mixed_ref(a, b, n, BLOCK), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nested", [False, True])
def test_sequential_and_nested_pipelines(nested: bool) -> None:
    rng = np.random.default_rng(7)
    kernel = sequential(BLOCK, (2, 3), nested)
    scheduled = schedule_pipelines(kernel.module, "sm_90a")
    first, second = scheduled.kernel.schedule_reports
    if nested:  # live together: disjoint
        assert second.base >= first.base + first.bytes
    else:  # one after the other: the same bytes
        assert first.base == second.base == 0
    assert scheduled.kernel.pipeline_smem_bytes == max(r.base + r.bytes for r in
                                                       (first, second))
    for n in (0, 1, 2, 3, 5):
        x = rng.standard_normal((ROWS, max(BLOCK * n - 1, 3))).astype(np.float32)
        want = np.full((ROWS, BLOCK), np.nan, np.float32)
        got = want.copy()
        run(kernel.module, (ROWS,), X=x, Y=want, n=n)
        run(scheduled, (ROWS,), X=x, Y=got, n=n)
        np.testing.assert_array_equal(got, want)
        padded = np.zeros((ROWS, max(BLOCK * n, x.shape[1])))
        padded[:, :x.shape[1]] = x
        total = padded[:, :BLOCK * n].reshape(ROWS, n, BLOCK).sum(axis=1)
        ref = total * (1 + 2 * n) if nested else 3 * total
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


def test_padding_other_than_zero_uses_plain_loads() -> None:
    x = np.random.default_rng(0).standard_normal((ROWS, 20)).astype(np.float32)
    kernel = facts_of(row_sum(BLOCK, padding=1.5), X=x)
    scheduled = schedule_pipelines(kernel.module, "sm_90a")
    (report,) = scheduled.kernel.schedule_reports
    assert report.engines == (Engine.PLAIN,)
    assert EngineRule.NONZERO_PADDING.name in report.streams[0].tma_rules
    got = np.zeros((ROWS, BLOCK), np.float32)
    run(scheduled, (ROWS,), X=x, Y=got, n=4)
    np.testing.assert_allclose(got, row_sum_ref(x, 4, BLOCK, 1.5), rtol=1e-5)


# --- the shape of the schedule ---------------------------------------------------------------

def _top(module) -> list[str]:
    """The function's top-level ops, integer arithmetic left out."""
    return [op.name for op in module.kernel.entry.ops
            if op.name not in ("constant", "lt", "add", "program_id")]


def test_uniform_schedule_has_the_documented_shape() -> None:
    kernel = row_sum(BLOCK, stages=4)
    kernel.fn.aligned16 = kernel.fn.unit_inner = kernel.fn.strides16 = frozenset({"X"})
    ops = _top(schedule_pipelines(kernel.module, "sm_90a"))
    start = ops.index("trip_count")
    assert ops[start:start + 6] == ["trip_count", "smem_alloc", "mbarrier_alloc",
                                    "mbarrier_alloc", "fence_mbarrier_init", "cta_barrier"]
    assert ops.count("when") == 3  # the prologue: stages - 1 produce steps
    tail = ops[ops.index("for"):]
    assert tail[:4] == ["for", "cta_barrier", "mbarrier_inval", "mbarrier_inval"]


def _waits(module) -> list:
    return [op for op in module.walk() if op.name == "mbarrier_wait"]


@pytest.mark.parametrize("roles", [None, "specialized"])
def test_tma_producers_wait_for_a_free_stage_in_the_elected_thread(roles) -> None:
    """Only the thread that issues a TMA copy needs the stage free: the producer's wait on
    `empty` is the elected thread's (the other threads of a uniform schedule no longer meet
    the slowest warp's release at every step); the consumers' waits on `full` are every
    thread's."""
    kernel = row_sum(BLOCK, stages=4, roles=roles)
    kernel.fn.aligned16 = kernel.fn.unit_inner = kernel.fn.strides16 = frozenset({"X"})
    scheduled = schedule_pipelines(kernel.module, "sm_90a")
    assert scheduled.kernel.schedule_reports[0].engines == (Engine.TMA,)
    waits = _waits(scheduled)
    empty = [w for w in waits if w.operand("bar").owner.attrs["name"].endswith("empty")]
    full = [w for w in waits if w.operand("bar").owner.attrs["name"].endswith("full")]
    assert empty and full
    assert all(w.attrs.get("elected") for w in empty)
    assert not any(w.attrs.get("elected") for w in full)


def test_producers_with_other_copies_wait_in_every_thread() -> None:
    """cp.async and plain copies are every thread's: so is the wait before them (and a
    pipeline mixing TMA with them waits in every thread too)."""
    cp = row_sum(BLOCK, facts=((), (), ()))  # 4-byte cp.async
    a, b = np.zeros((2, 40), np.float32), np.zeros((40, 3), np.float16)
    for kernel in (cp, facts_of(mixed(BLOCK, 2), A=a, B=b)):
        scheduled = schedule_pipelines(kernel.module, "sm_90a")
        assert any(e is not Engine.TMA for e in scheduled.kernel.schedule_reports[0].engines)
        assert not any(w.attrs.get("elected") for w in _waits(scheduled))


@pytest.mark.parametrize("stages,masks", [(1, True), (2, True), (3, False), (4, True),
                                          (5, False), (8, True)])
def test_power_of_two_stages_take_masks_not_divisions(stages: int, masks: bool) -> None:
    """Slot and lap parity of a step ``j >= 0``: ``j & (S-1)`` and ``(j >> log2 S) & 1``
    when S is a power of two (no sign-corrected division in the loop), else ``mod`` and
    ``floordiv``; both run the same on the interpreter."""
    kernel = row_sum(BLOCK, stages=stages)
    x = np.random.default_rng(stages).standard_normal((ROWS, 8 * BLOCK * stages + 4))
    x = x.astype(np.float32)
    kernel = facts_of(kernel, X=x)
    scheduled = schedule_pipelines(kernel.module, "sm_90a")
    names = {op.name for op in scheduled.walk()}
    assert ("mod" in names or "floordiv" in names) is not masks
    n = 8 * stages + 1  # past many laps of the ring, the last tile ragged
    plain = np.full((ROWS, BLOCK), np.nan, np.float32)
    sched = plain.copy()
    run(kernel.module, (ROWS,), X=x, Y=plain, n=n)
    run(scheduled, (ROWS,), X=x, Y=sched, n=n)
    np.testing.assert_array_equal(sched, plain)


def test_no_barrier_init_fence_without_tma() -> None:
    kernel = row_sum(BLOCK, facts=((), (), ()))  # no facts: 4-byte cp.async
    scheduled = schedule_pipelines(kernel.module, "sm_90a")
    assert scheduled.kernel.schedule_reports[0].engines == (Engine.CP_ASYNC,)
    assert "fence_mbarrier_init" not in _top(scheduled)


def test_specialized_roles_attributes_and_regions() -> None:
    kernel = row_sum(BLOCK, roles="specialized")
    scheduled = schedule_pipelines(kernel.module, "sm_90a", num_warps=8)
    (roles,) = [op for op in scheduled.walk() if op.name == "warp_roles"]
    assert {k: roles.attrs[k] for k in ("producer_warps", "consumer_warps", "producer_regs",
                                         "consumer_regs")} == \
        {"producer_warps": 1, "consumer_warps": 8, "producer_regs": None,
         "consumer_regs": None}  # no dot in the body: no setmaxnreg (and no padding warps)
    producer, consumer = (r.block for r in roles.regions)
    assert [op.name for op in producer.ops] == ["for", "yield"]
    assert len(consumer.args) == 2 and [op.name for op in consumer.ops] == ["for", "yield"]
    producer_ops = {op.name for op in producer.ops[0].walk()}
    assert "copy_g2s" in producer_ops and "smem_read" not in producer_ops
    consumer_ops = {op.name for op in consumer.ops[0].walk()}
    assert "smem_read" in consumer_ops and "copy_g2s" not in consumer_ops


def test_specialized_falls_back_to_uniform_off_sm90a() -> None:
    scheduled = schedule_pipelines(row_sum(BLOCK, roles="specialized").module, "sm_80")
    (report,) = scheduled.kernel.schedule_reports
    assert report.roles.mode is RoleMode.UNIFORM and "sm_90a" in report.roles.note
    assert "warp_roles" not in [op.name for op in scheduled.walk()]


def test_every_generated_op_keeps_the_pipeline_line() -> None:
    kernel = row_sum(BLOCK, roles="specialized")
    scheduled = schedule_pipelines(kernel.module, "sm_90a")
    body_names = {"cast", "broadcast", "mul"}  # the user's body keeps its own (None) loc
    for op in scheduled.walk():
        if op.name in ("trip_count", "smem_alloc", "mbarrier_alloc", "copy_g2s", "smem_read",
                       "mbarrier_wait", "mbarrier_arrive", "warp_roles", "mod", "xor"):
            assert op.loc is not None and op.loc.line == kernel.pipeline_line, op
        if op.name in body_names:
            assert op.loc is None


def test_the_input_module_is_not_changed() -> None:
    kernel = row_sum(BLOCK)
    before = str(kernel.module)
    schedule_pipelines(kernel.module, "sm_90a")
    assert str(kernel.module) == before
    assert "pipeline" in [op.name for op in kernel.module.walk()]


def test_facts_are_carried_to_the_scheduled_function() -> None:
    kernel = row_sum(BLOCK)
    kernel.fn.aligned16 = frozenset({"X", "Y"})
    scheduled = schedule_pipelines(kernel.module, "sm_90a")
    assert scheduled.kernel.aligned16 == frozenset({"X", "Y"})
    assert scheduled.kernel.pipeline_smem_bytes > 0


def test_divisible_facts_drop_the_edge_guard() -> None:
    kernel = row_sum(BLOCK)
    guarded = schedule_pipelines(kernel.module, "sm_90a")
    exact = schedule_pipelines(kernel.module, "sm_90a", divisible=frozenset({("X", 1, BLOCK)}))
    assert guarded.kernel.schedule_reports[0].streams[0].guarded
    assert not exact.kernel.schedule_reports[0].streams[0].guarded
    copies = [op for op in exact.walk() if op.name == "copy_g2s"]
    assert copies and all(op.attrs["guarded"] is False for op in copies)


# --- errors ---------------------------------------------------------------------------------

def test_forced_tma_that_is_not_admissible_names_the_line_and_rules() -> None:
    x = np.zeros((ROWS, 37), np.float32)  # 148-byte rows
    kernel = facts_of(row_sum(BLOCK, engine="tma"), X=x)
    with pytest.raises(ScheduleError) as info:
        schedule_pipelines(kernel.module, "sm_90a")
    err = info.value
    assert err.loc is not None and err.loc.line == kernel.pipeline_line
    assert f"builders.py:{kernel.pipeline_line}" in str(err)
    assert "TMA_GLOBAL_STRIDE_ALIGN" in str(err)
    assert any("cp_async here" in h for h in err.hints)


def test_forced_cp_async_on_unaligned_bf16_is_an_error() -> None:
    x = np.zeros((ROWS, 38), ml_dtypes.bfloat16)[:, 1:]
    kernel = facts_of(row_sum(BLOCK, DType.BFLOAT16, engine="cp_async"), X=x)
    with pytest.raises(ScheduleError, match="CP_ASYNC_CHUNK") as info:
        schedule_pipelines(kernel.module, "sm_90a")
    assert info.value.loc.line == kernel.pipeline_line
    assert "plain here" in " ".join(info.value.hints)


def test_forced_engines_that_are_admissible_are_used() -> None:
    x = np.zeros((ROWS, 40), np.float32)
    for engine in Engine:
        kernel = facts_of(row_sum(BLOCK, engine=engine.value), X=x)
        report = schedule_pipelines(kernel.module, "sm_90a").kernel.schedule_reports[0]
        assert report.engines == (engine,) and report.streams[0].decision.forced


def test_forced_tma_on_sm80_is_an_error() -> None:
    x = np.zeros((ROWS, 40), np.float32)
    kernel = facts_of(row_sum(BLOCK, engine="tma"), X=x)
    with pytest.raises(ScheduleError, match="TMA_ARCH"):
        schedule_pipelines(kernel.module, "sm_80")


def test_unknown_roles_is_an_error_at_the_line() -> None:
    kernel = row_sum(BLOCK)  # the op refuses unknown roles; the schedule checks again
    next(op for op in kernel.module.walk() if op.name == "pipeline").attrs["roles"] = "both"
    with pytest.raises(ScheduleError, match="unknown warp roles") as info:
        schedule_pipelines(kernel.module, "sm_90a")
    assert info.value.loc.line == kernel.pipeline_line


def test_too_much_shared_memory_names_the_line_bytes_and_limit() -> None:
    kernel = row_sum(8192, stages=8)  # 8 stages of 32 KiB
    with pytest.raises(ScheduleError) as info:
        schedule_pipelines(kernel.module, "sm_90a")
    err = info.value
    assert err.loc.line == kernel.pipeline_line
    assert "262272 bytes" in err.message and str(227 * 1024) in err.message
    assert any("stages=7 fits" in h for h in err.hints)
    assert any("smaller tiles" in h for h in err.hints)
    # sm_80 has less
    with pytest.raises(ScheduleError, match=str(163 * 1024)):
        schedule_pipelines(row_sum(8192, stages=6).module, "sm_80")


# --- the schedule is checked: a broken one fails -----------------------------------------------

def _mutated(kernel, edit) -> object:
    scheduled = schedule_pipelines(kernel.module, "sm_90a")
    edit(scheduled)
    return scheduled


def test_a_missing_release_wait_is_caught_by_the_interpreter() -> None:
    """Drop the producer's wait on `empty`: a stage is overwritten while it is in use."""
    x = np.ones((ROWS, 64), np.float32)
    kernel = facts_of(row_sum(BLOCK, stages=2), X=x)

    def drop_empty_waits(module) -> None:
        for op in list(module.walk()):
            if op.name == "mbarrier_wait" and op.operands[0].owner.attrs["name"].endswith(
                    "empty"):
                op.parent.ops.remove(op)

    broken = _mutated(kernel, drop_empty_waits)
    with pytest.raises(ExecutionError, match="OVERWRITE_BEFORE_RELEASE|PARITY|DEADLOCK"):
        run(broken, (ROWS,), X=x, Y=np.zeros((ROWS, BLOCK), np.float32), n=5)


def test_a_wrong_parity_is_caught_by_the_interpreter() -> None:
    """Wait on `full` with parity 1 every time: the second lap waits for a phase that
    already passed (or never comes)."""
    x = np.ones((ROWS, 64), np.float32)
    kernel = facts_of(row_sum(BLOCK, stages=2), X=x)

    def flip(module) -> None:
        one = next(op for op in module.kernel.entry.ops
                   if op.name == "constant" and op.attrs["value"] == 1)
        for op in module.walk():
            if op.name == "mbarrier_wait" and op.operands[0].owner.attrs["name"].endswith(
                    "full"):
                op.operands[2] = one.result

    broken = _mutated(kernel, flip)
    with pytest.raises(ExecutionError, match="PARITY|DEADLOCK|deadlock"):
        run(broken, (ROWS,), X=x, Y=np.zeros((ROWS, BLOCK), np.float32), n=5)


def test_protocol_checker_is_called(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    fake = types.ModuleType("tilekit.sched.protocol")

    def check_protocol(module) -> None:
        calls.append(module)
        raise ScheduleError("refuted", None)

    fake.check_protocol = check_protocol  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tilekit.sched.protocol", fake)
    with pytest.raises(ScheduleError, match="refuted"):
        schedule_pipelines(row_sum(BLOCK).module, "sm_90a")
    assert len(calls) == 1 and "pipeline" not in [op.name for op in calls[0].walk()]


def test_a_tma_pipeline_reusing_bytes_fences_the_proxies_first() -> None:
    kernel = sequential(BLOCK, (2, 3))
    kernel.fn.aligned16 = kernel.fn.unit_inner = kernel.fn.strides16 = frozenset({"X"})
    scheduled = schedule_pipelines(kernel.module, "sm_90a")
    first, second = scheduled.kernel.schedule_reports
    assert first.engines == second.engines == (Engine.TMA,)
    assert first.reuses == () and second.reuses == (0,)
    ops = _top(scheduled)
    assert ops.count("fence_proxy_async") == 1 and ops.count("fence_mbarrier_init") == 1
    at = ops.index("fence_proxy_async")  # it also covers the second pipeline's barrier init
    assert ops[at - 2:at + 2] == ["mbarrier_alloc", "mbarrier_alloc", "fence_proxy_async",
                                  "cta_barrier"]
    assert ops.index("fence_proxy_async") > ops.index("mbarrier_inval")  # the second one's
    x = np.random.default_rng(1).standard_normal((ROWS, 36)).astype(np.float32)
    want, got = (np.full((ROWS, BLOCK), np.nan, np.float32) for _ in range(2))
    run(kernel.module, (ROWS,), X=x, Y=want, n=5)
    run(scheduled, (ROWS,), X=x, Y=got, n=5)
    np.testing.assert_array_equal(got, want)


def test_a_pipeline_inside_a_specialized_one_is_an_error() -> None:
    kernel = sequential(BLOCK, (2, 2), nested=True)
    outer = next(op for op in kernel.module.walk() if op.name == "pipeline")
    outer.attrs["roles"] = "specialized"
    with pytest.raises(ScheduleError, match="inside the body of a warp-specialized") as info:
        schedule_pipelines(kernel.module, "sm_90a")
    assert info.value.loc.file == outer.loc.file  # the inner pipeline's line
    assert "warp_roles=False" in " ".join(info.value.hints)


def test_warp_roles_need_a_warp_to_spare() -> None:
    kernel = row_sum(BLOCK, roles="specialized")
    with pytest.raises(ScheduleError, match="33 warps") as info:
        schedule_pipelines(kernel.module, "sm_90a", num_warps=32)
    assert info.value.loc.line == kernel.pipeline_line
    assert "num_warps <= 31" in info.value.hints[0]


def test_pipeline_streams_name_size_facts_and_unguard_their_copies() -> None:
    """A stream's tiles are candidate size facts; when they hold for every dim, the
    schedule marks the stream's copies unguarded (no tail tiles)."""
    import tilekit as tk
    from tilekit.codegen.size_facts import candidate_size_facts

    @tk.kernel
    def rows(X, Y, BN: tk.constexpr):
        r = tk.program_id(0)
        for i, x in tk.pipeline(X.tiles((2, BN), row=r), stages=2):
            Y.tile((2, BN), (r, i)).store(x)

    x = np.zeros((6, 40), np.float32)
    module = rows.trace(x, x.copy(), BN=8)
    assert ("X", 0, 2) in candidate_size_facts(module)
    assert ("X", 1, 8) in candidate_size_facts(module)
    for facts, guarded in ((frozenset(), True), (frozenset({("X", 0, 2), ("X", 1, 8)}), False)):
        scheduled = schedule_pipelines(module, "sm_80", divisible=facts)
        copies = [op for op in scheduled.walk() if op.name == "copy_g2s"]
        assert copies and all(op.attrs["guarded"] is guarded for op in copies)
