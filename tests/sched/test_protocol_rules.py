"""Each rule of the protocol state machine (``tilekit.ir.async_protocol``): a test that
breaks it and a near miss that does not.

The state machine is driven directly, as the async ops' references drive it: one role
``cta`` for a uniform schedule, ``producer``/``consumer`` under ``enter_roles``. The rules
about whole programs (a CTA barrier in a warp role) go through the checker on IR.
"""

from __future__ import annotations

import pytest

from tilekit.errors import ScheduleError
from tilekit.ir import Builder
from tilekit.ir.async_protocol import ProtocolRule, ProtocolState, ProtocolViolation, WouldBlock
from tilekit.sched.protocol import check_protocol

from . import test_protocol as schedules

B = 32  # bytes of one tile
R = ProtocolRule
RULE_TESTED: set[ProtocolRule] = set()


def breaks(rule: ProtocolRule, match: str = ""):  # type: ignore[no-untyped-def]
    RULE_TESTED.add(rule)
    return _Breaks(rule, match)


class _Breaks:
    def __init__(self, rule: ProtocolRule, match: str) -> None:
        self.rule, self.match = rule, match

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:  # type: ignore[no-untyped-def]
        assert isinstance(exc, ProtocolViolation), f"expected {self.rule.name}, got {exc!r}"
        assert exc.rule is self.rule, f"expected {self.rule.name}, got {exc.rule.name}: {exc}"
        assert self.match in str(exc), str(exc)
        return True


def ready(stages: int = 2, arrivals: int = 1, fence: bool = True, sync: bool = True):
    """A ring, `full` and `empty` barrier rings, initialized (and fenced, synchronized)."""
    st = ProtocolState()
    ring = st.alloc_ring("buf", stages)
    full = st.alloc_barrier("full", stages, arrivals, "cta")
    empty = st.alloc_barrier("empty", stages, 1, "cta")
    if fence:
        st.fence_mbarrier_init("cta")
    if sync:
        st.cta_barrier(["cta"])
    return st, ring, full, empty


def fill(st, ring, full, slot: int, expect: int = B, nbytes: int = B, role: str = "cta"):
    st.expect_tx(full, slot, expect, role)
    st.copy_g2s(ring, slot, full, slot, "tma", nbytes, role, f"tile@{slot}")


def consume(st, ring, full, empty, slot: int, parity: int, role: str = "cta"):
    st.wait(full, slot, parity, role)
    data = st.read(ring, slot, role)
    st.fence_proxy_async(role)
    st.arrive(empty, slot, role)
    return data


def lap(st, ring, full, empty, rounds: int, stages: int = 2) -> None:
    """The uniform schedule, round by round, as produce/consume in one role."""
    for j in range(rounds):
        s, r = j % stages, j // stages
        st.wait(empty, s, (r & 1) ^ 1, "cta")
        fill(st, ring, full, s)
        assert consume(st, ring, full, empty, s, r & 1) == f"tile@{s}"



def close(st: ProtocolState, full, empty) -> None:
    """The end of a correct pipeline: everyone meets, the barriers go, nothing is left."""
    st.cta_barrier(["cta"])
    st.inval_barrier(full, "cta")
    st.inval_barrier(empty, "cta")
    st.finish()


def test_a_correct_protocol_runs_and_finishes() -> None:
    st, ring, full, empty = ready()
    lap(st, ring, full, empty, 7)
    close(st, full, empty)


# --- READ_BEFORE_COMPLETE -----------------------------------------------------------------------

def test_read_before_wait() -> None:
    st, ring, full, _ = ready()
    fill(st, ring, full, 0)  # complete already, but not waited for
    with breaks(R.READ_BEFORE_COMPLETE, "before it waited for the copy"):
        st.read(ring, 0, "cta")


def test_read_of_a_stage_never_written() -> None:
    st, ring, _, _ = ready()
    with breaks(R.READ_BEFORE_COMPLETE, "before anything was copied"):
        st.read(ring, 1, "cta")


def test_read_of_plain_stores_needs_the_wait_even_in_the_same_role() -> None:
    st, ring, full, _ = ready()
    st.copy_g2s(ring, 0, full, 0, "plain", B, "cta", "x")
    st.arrive(full, 0, "cta")  # the phase completes: the stores are done, not known to all
    with breaks(R.READ_BEFORE_COMPLETE, "before it waited"):
        st.read(ring, 0, "cta")


def test_near_miss_read_after_wait() -> None:
    st, ring, full, _ = ready()
    st.copy_g2s(ring, 0, full, 0, "plain", B, "cta", "x")
    st.arrive(full, 0, "cta")
    st.wait(full, 0, 0, "cta")
    assert st.read(ring, 0, "cta") == "x"


# --- OVERWRITE_BEFORE_RELEASE -------------------------------------------------------------------

def test_refill_before_the_readers_released() -> None:
    st, ring, full, empty = ready()
    fill(st, ring, full, 0)
    st.wait(full, 0, 0, "cta")
    st.read(ring, 0, "cta")
    st.fence_proxy_async("cta")
    with breaks(R.OVERWRITE_BEFORE_RELEASE, "before role `cta` released its contents"):
        fill(st, ring, full, 0)  # no arrive on empty[0], no wait for it


def test_refill_while_a_copy_is_in_flight() -> None:
    st, ring, full, _ = ready()
    st.copy_g2s(ring, 0, full, 0, "cp_async", B, "cta", "x")
    with breaks(R.OVERWRITE_BEFORE_RELEASE, "still in flight"):
        st.copy_g2s(ring, 0, full, 0, "cp_async", B, "cta", "y")


def test_write_while_a_bulk_store_reads() -> None:
    st = ProtocolState()
    out = st.alloc_ring("out", 1)
    st.write(out, 0, "cta", "v")
    st.fence_proxy_async("cta")
    st.cta_barrier(["cta"])
    store, data = st.bulk_store(out, 0, "cta")
    assert data == "v"
    with breaks(R.OVERWRITE_BEFORE_RELEASE, "while a bulk store still reads it"):
        st.write(out, 0, "cta", "w")


def test_near_miss_write_after_store_wait_and_sync() -> None:
    st = ProtocolState()
    out = st.alloc_ring("out", 1)
    st.write(out, 0, "cta", "v")
    st.fence_proxy_async("cta")
    st.cta_barrier(["cta"])
    store, _ = st.bulk_store(out, 0, "cta")
    st.store_wait(store)
    st.cta_barrier(["cta"])
    st.write(out, 0, "cta", "w")


def test_near_miss_refill_after_release() -> None:
    st, ring, full, empty = ready()
    lap(st, ring, full, empty, 2)
    st.wait(empty, 0, 0, "cta")
    fill(st, ring, full, 0)


# --- ARRIVAL_OVERFLOW ---------------------------------------------------------------------------

def test_arrival_on_a_phase_that_has_them_all() -> None:
    st, ring, full, _ = ready()
    st.expect_tx(full, 0, B, "cta")  # the one arrival; the phase waits for bytes
    with breaks(R.ARRIVAL_OVERFLOW, "already has them all"):
        st.arrive(full, 0, "cta")


def test_arrival_that_may_land_in_the_previous_phase() -> None:
    st, _, _, empty = ready()
    st.arrive(empty, 0, "cta")  # phase 0 completes
    with breaks(R.ARRIVAL_OVERFLOW, "does not know that phase 0 completed"):
        st.arrive(empty, 0, "cta")


def test_near_miss_two_arrivals_expected() -> None:
    st, ring, full, _ = ready(arrivals=2)
    st.expect_tx(full, 0, B, "cta")
    st.copy_g2s(ring, 0, full, 0, "tma", B, "cta", "a")
    st.arrive(full, 0, "cta")
    st.wait(full, 0, 0, "cta")
    st.arrive(full, 0, "cta")  # phase 1, after the wait showed phase 0 complete


# --- TX_MISMATCH ---------------------------------------------------------------------------------

def test_copies_deliver_more_bytes_than_expected() -> None:
    st, ring, full, _ = ready()
    with breaks(R.TX_MISMATCH, f"deliver {B // 2} bytes more"):
        fill(st, ring, full, 0, expect=B // 2)


def test_copies_deliver_fewer_bytes_than_expected() -> None:
    st, ring, full, _ = ready()
    fill(st, ring, full, 0, expect=2 * B)
    with pytest.raises(WouldBlock) as info:
        st.wait(full, 0, 0, "cta")
    with breaks(R.TX_MISMATCH, f"expects {B} transaction bytes more"):
        raise st.deadlock([("cta", info.value)])


def test_bytes_that_may_land_in_the_previous_phase() -> None:
    st, ring, full, _ = ready()
    fill(st, ring, full, 0)  # phase 0 completes; nobody waited
    with breaks(R.TX_MISMATCH, "may count toward phase 0"):
        st.copy_g2s(ring, 1, full, 0, "tma", B, "cta", "x")


def test_near_miss_bytes_before_their_expect_tx() -> None:
    st, ring, full, _ = ready()
    st.copy_g2s(ring, 0, full, 0, "tma", B, "cta", "x")  # tx goes negative for a while
    st.expect_tx(full, 0, B, "cta")
    st.wait(full, 0, 0, "cta")
    assert st.read(ring, 0, "cta") == "x"


# --- PARITY --------------------------------------------------------------------------------------

def test_wait_returning_on_a_phase_already_waited_for() -> None:
    st, ring, full, _ = ready()
    fill(st, ring, full, 0)
    st.wait(full, 0, 0, "cta")
    with breaks(R.PARITY, "one it already waited for"):
        st.wait(full, 0, 0, "cta")


def test_parity_is_a_bit() -> None:
    st, _, full, _ = ready()
    with breaks(R.PARITY, "parity 2 is not 0 or 1"):
        st.wait(full, 0, 2, "cta")


def test_near_miss_parity_flips_each_round() -> None:
    st, ring, full, empty = ready(stages=1)
    lap(st, ring, full, empty, 4, stages=1)


# --- DEADLOCK ------------------------------------------------------------------------------------

def test_wait_for_a_phase_nobody_completes() -> None:
    st, _, full, _ = ready()
    with pytest.raises(WouldBlock) as info:
        st.wait(full, 1, 0, "cta")
    with breaks(R.DEADLOCK, "role `cta` waits on barrier `full`[1] phase 0 (0 of 1 arrivals)"):
        raise st.deadlock([("cta", info.value)])


def test_near_miss_fresh_barrier_passes_parity_one() -> None:
    st, _, _, empty = ready()
    st.wait(empty, 1, 1, "cta")


def test_deadlock_between_warp_roles_is_found_not_hung_on() -> None:
    module = schedules.build_schedule((schedules.Stream("tma"),), roles=True)
    arrive = next(op for op in module.walk() if op.name == "mbarrier_arrive")  # on empty
    arrive.parent.ops.remove(arrive)
    RULE_TESTED.add(R.DEADLOCK)
    with pytest.raises(ScheduleError, match="DEADLOCK .* role `producer` waits on barrier "
                                            "`empty`"):
        check_protocol(module)


# --- MISSING_FENCE -------------------------------------------------------------------------------

def test_tma_on_a_barrier_whose_init_was_not_fenced() -> None:
    st, ring, full, _ = ready(fence=False)
    st.expect_tx(full, 0, B, "cta")
    with breaks(R.MISSING_FENCE, "no fence.mbarrier_init"):
        st.copy_g2s(ring, 0, full, 0, "tma", B, "cta", "x")


def test_fence_after_the_cta_barrier_is_not_ordered_before_the_copy() -> None:
    st, ring, full, _ = ready(fence=False)
    st.fence_mbarrier_init("cta")  # after the CTA barrier: other threads may not see it
    st.expect_tx(full, 0, B, "cta")
    with breaks(R.MISSING_FENCE, "a CTA barrier must follow the fence"):
        st.copy_g2s(ring, 0, full, 0, "tma", B, "cta", "x")


def test_bulk_store_of_unfenced_stores() -> None:
    st = ProtocolState()
    out = st.alloc_ring("out", 1)
    st.write(out, 0, "cta", "v")
    st.cta_barrier(["cta"])
    with breaks(R.MISSING_FENCE, "no fence.proxy.async"):
        st.bulk_store(out, 0, "cta")


def test_tma_refill_after_unfenced_reads() -> None:
    st, ring, full, empty = ready()
    fill(st, ring, full, 0)
    st.wait(full, 0, 0, "cta")
    st.read(ring, 0, "cta")
    st.arrive(empty, 0, "cta")  # released, but the reads were not fenced
    st.wait(empty, 0, 0, "cta")
    with breaks(R.MISSING_FENCE, "between their reads and their release"):
        fill(st, ring, full, 0)


def test_near_miss_cp_async_refill_needs_no_fence_after_reads() -> None:
    st, ring, full, empty = ready()
    st.copy_g2s(ring, 0, full, 0, "cp_async", B, "cta", "x")
    st.arrive(full, 0, "cta")
    st.wait(full, 0, 0, "cta")
    st.read(ring, 0, "cta")
    st.arrive(empty, 0, "cta")
    st.wait(empty, 0, 0, "cta")
    st.copy_g2s(ring, 0, full, 0, "cp_async", B, "cta", "y")


def test_a_fence_of_the_whole_program_covers_the_warp_roles() -> None:
    """Reads by the consumer role, then (after the roles end) one fence by every thread,
    then a TMA copy into the same bytes: fenced."""
    st, ring, full, empty = ready()
    st.enter_roles("cta", ["producer", "consumer"])
    fill(st, ring, full, 0, role="producer")
    st.wait(full, 0, 0, "consumer")
    st.read(ring, 0, "consumer")
    st.arrive(empty, 0, "consumer")
    st.leave_roles("cta", ["producer", "consumer"])
    st.fence_proxy_async("cta")
    st.cta_barrier(["cta"])
    st.wait(empty, 0, 0, "cta")
    fill(st, ring, full, 0)


def test_tma_into_reused_bytes_after_unfenced_generic_writes() -> None:
    st = ProtocolState()
    first = st.alloc_ring("first", 2, (0, 256))
    bar = st.alloc_barrier("bar", 2, 1, "cta")
    st.fence_mbarrier_init("cta")
    st.cta_barrier(["cta"])
    st.copy_g2s(first, 1, bar, 1, "plain", B, "cta", "x")
    st.arrive(bar, 1, "cta")
    st.wait(bar, 1, 0, "cta")
    st.cta_barrier(["cta"])
    second = st.alloc_ring("second", 2, (128, 384))  # on stage 1 of `first`
    st.expect_tx(bar, 0, B, "cta")
    with breaks(R.MISSING_FENCE, "overwrites stage 1 of `first`"):
        st.copy_g2s(second, 0, bar, 0, "tma", B, "cta", "y")


def test_near_miss_reused_bytes_fenced() -> None:
    st = ProtocolState()
    first = st.alloc_ring("first", 2, (0, 256))
    bar = st.alloc_barrier("bar", 2, 1, "cta")
    st.fence_mbarrier_init("cta")
    st.cta_barrier(["cta"])
    st.copy_g2s(first, 1, bar, 1, "plain", B, "cta", "x")
    st.arrive(bar, 1, "cta")
    st.wait(bar, 1, 0, "cta")
    st.read(first, 1, "cta")
    st.fence_proxy_async("cta")
    st.cta_barrier(["cta"])
    second = st.alloc_ring("second", 2, (128, 384))
    disjoint = st.alloc_ring("elsewhere", 2, (512, 768))
    assert second.aliases == [first] and disjoint.aliases == []
    st.expect_tx(bar, 0, B, "cta")
    st.copy_g2s(second, 0, bar, 0, "tma", B, "cta", "y")


# --- INIT_NOT_VISIBLE ----------------------------------------------------------------------------

def test_barrier_used_before_the_cta_barrier() -> None:
    st, _, full, _ = ready(sync=False)
    with breaks(R.INIT_NOT_VISIBLE, "before its initialization is visible"):
        st.arrive(full, 0, "cta")


def test_barrier_invalidated_while_in_use() -> None:
    st, ring, full, empty = ready()
    lap(st, ring, full, empty, 1)
    with breaks(R.INIT_NOT_VISIBLE, "may still use it"):
        st.inval_barrier(full, "cta")


def test_barrier_used_after_invalidation() -> None:
    st, _, full, _ = ready()
    st.inval_barrier(full, "cta")
    with breaks(R.INIT_NOT_VISIBLE, "after it was invalidated"):
        st.wait(full, 0, 1, "cta")


def test_warp_roles_see_barriers_initialized_before_them() -> None:
    """Regression: the roles started knowing nothing, so every warp-specialized pipeline
    broke INIT_NOT_VISIBLE at its first wait."""
    st, ring, full, empty = ready()
    st.enter_roles("cta", ["producer", "consumer"])
    st.wait(empty, 0, 1, "producer")
    fill(st, ring, full, 0, role="producer")
    assert consume(st, ring, full, empty, 0, 0, role="consumer") == "tile@0"


def test_near_miss_invalidate_after_the_closing_cta_barrier() -> None:
    st, ring, full, empty = ready()
    lap(st, ring, full, empty, 3)
    close(st, full, empty)


# --- SLOT_RANGE ----------------------------------------------------------------------------------

def test_stage_outside_the_ring() -> None:
    st, ring, _, _ = ready()
    with breaks(R.SLOT_RANGE, "stage 2 of `buf`, which has 2 stages"):
        st.read(ring, 2, "cta")


def test_barrier_outside_the_ring() -> None:
    st, _, full, _ = ready()
    with breaks(R.SLOT_RANGE, "barrier 2 of `full`, which has 2 barriers"):
        st.wait(full, 2, 1, "cta")


def test_near_miss_last_stage() -> None:
    st, ring, full, empty = ready()
    st.wait(empty, 1, 1, "cta")
    fill(st, ring, full, 1)
    consume(st, ring, full, empty, 1, 0)


# --- INFLIGHT_AT_EXIT ----------------------------------------------------------------------------

def test_copy_that_never_arrives() -> None:
    st, ring, full, _ = ready()
    st.copy_g2s(ring, 0, full, 0, "cp_async", B, "cta", "x")
    with breaks(R.INFLIGHT_AT_EXIT, "never arrived on barrier `full`[0]"):
        st.finish()


def test_copy_nobody_waited_for() -> None:
    st, ring, full, _ = ready()
    st.site = "the copy op"
    fill(st, ring, full, 0)
    with pytest.raises(ProtocolViolation) as info:
        st.finish()
    assert info.value.rule is R.INFLIGHT_AT_EXIT and info.value.site == "the copy op"
    assert "before any role waited for phase 0" in str(info.value)
    RULE_TESTED.add(R.INFLIGHT_AT_EXIT)


def test_bulk_store_never_waited_for() -> None:
    st = ProtocolState()
    out = st.alloc_ring("out", 1)
    st.write(out, 0, "cta", "v")
    st.fence_proxy_async("cta")
    st.cta_barrier(["cta"])
    st.bulk_store(out, 0, "cta")
    with breaks(R.INFLIGHT_AT_EXIT, "before waiting for a bulk store"):
        st.finish()


def test_phase_left_half_done() -> None:
    st, _, full, _ = ready(arrivals=2)
    st.arrive(full, 0, "cta")
    with breaks(R.INFLIGHT_AT_EXIT, "in the middle of phase 0 (1 of 2 arrivals)"):
        st.finish()


def test_near_miss_everything_waited_for() -> None:
    st, ring, full, empty = ready()
    lap(st, ring, full, empty, 2)
    st.finish()


# --- BARRIER_IN_ROLE -----------------------------------------------------------------------------

def _roles_schedule(barrier_in_producer: bool):  # type: ignore[no-untyped-def]
    module = schedules.build_schedule((schedules.Stream("tma"),), roles=True)
    if barrier_in_producer:
        roles = next(op for op in module.walk() if op.name == "warp_roles")
        producer = roles.regions[0].block
        barrier = Builder(producer).create("cta_barrier", loc=schedules.LOC, insert=False)
        producer.insert(0, barrier)
    return module


def test_cta_barrier_inside_a_warp_role() -> None:
    RULE_TESTED.add(R.BARRIER_IN_ROLE)
    with pytest.raises(ScheduleError, match="BARRIER_IN_ROLE .* role `producer` executes a "
                                            "CTA barrier") as info:
        check_protocol(_roles_schedule(True))
    assert info.value.loc == schedules.LOC
    assert "trip count 0" in info.value.message  # the role runs even with no iteration


def test_near_miss_cta_barriers_around_the_warp_roles() -> None:
    check_protocol(_roles_schedule(False))


# --- roles and knowledge -------------------------------------------------------------------------

def test_leaving_roles_keeps_only_what_every_role_knows() -> None:
    st, ring, full, empty = ready()
    st.enter_roles("cta", ["producer", "consumer"])
    fill(st, ring, full, 0, role="producer")
    st.wait(full, 0, 0, "consumer")  # the consumer knows the write; the producer does not
    st.leave_roles("cta", ["producer", "consumer"])
    with breaks(R.READ_BEFORE_COMPLETE, "role `cta` before it waited"):
        st.read(ring, 0, "cta")
    st.cta_barrier(["cta"])
    assert st.read(ring, 0, "cta") == "tile@0"


def test_every_rule_has_a_test() -> None:
    """Every rule is broken by some test of this file (read from its source, so that the
    check does not depend on which tests ran)."""
    source = open(__file__).read()
    tested = {r for r in ProtocolRule
              if f"breaks(R.{r.name}" in source or f"RULE_TESTED.add(R.{r.name})" in source}
    assert tested == set(ProtocolRule), set(ProtocolRule) - tested
