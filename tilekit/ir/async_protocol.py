"""The asynchronous protocol as a state machine: shared-memory rings, mbarriers, copies,
proxy fences, and what each group of threads knows.

One machine serves two clients. The interpreter drives it with data (the async ops'
references call it), so every pipeline runs, and is checked, on the CPU. The protocol
checker (``tilekit.sched.protocol``) drives it over scheduled IR without data, for the trip
counts that expose off-by-one schedules. A rule broken raises ``ProtocolViolation``
naming the rule; the caller adds the user's line.

**Roles.** Threads come in roles: the whole program when a pipeline is not warp-specialized
(role ``"cta"``), a producer and a consumer when it is. The threads of a role run the same
code but not in lockstep, so what one thread did is known to the others only after they
synchronize: a CTA barrier, or an mbarrier phase they all arrived on and then waited for.

**Knowledge.** A fact is a key with a generation:

- ``("w", ring, slot)``: the g-th write into that slot has completed;
- ``("r", ring, slot, role)``: ``role`` has finished reading the slot's g-th contents;
- ``("init", bar)``: the barrier ring is initialized;
- ``("u", bar, role)``: ``role`` has finished its g-th use (arrive or wait) of the barrier.

Each role has ``known`` (facts all its threads have) and ``pending`` (facts some of its
threads made, not yet shared). An arrival adds the arriving role's facts to the barrier's
current phase; a wait that sees the phase complete adds them to the waiter's ``known``.
A read needs its slot's write known; a write into a slot needs every earlier read of it
known (to the writing role) and no copy into it still in flight.

**Proxies.** TMA reads and writes shared memory through the async proxy; ordinary loads and
stores (and mbarrier initialization) through the generic proxy. A generic write that an
async-proxy operation then touches needs a proxy fence in the writing role in between
(``fence.proxy.async``, or ``fence.mbarrier_init`` for barrier initialization).

**mbarrier phases** follow the PTX ISA: a phase completes when its pending arrival count and
its transaction count both reach zero; ``try_wait.parity(p)`` succeeds when the current
phase's parity is not ``p`` (a fresh barrier is in phase 0, so ``parity=1`` passes at once,
the producer's start convention). Transaction bytes may complete before they are expected
(the count goes negative for a while), as on the hardware.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Fact = tuple
Knowledge = dict[Fact, int]


class ProtocolRule(enum.Enum):
    """Each rule the protocol can break, with the sentence an error shows."""

    READ_BEFORE_COMPLETE = "a stage is read before the copy into it completed and was waited for"
    OVERWRITE_BEFORE_RELEASE = ("a stage is overwritten before every reader released it, "
                                "or while a copy into it is still in flight")
    ARRIVAL_OVERFLOW = "more arrivals in one phase than the barrier expects"
    TX_MISMATCH = "the copies completing on a phase deliver more bytes than it expects"
    PARITY = "a wait's parity does not match the phase it should wait for"
    DEADLOCK = "a wait can never be satisfied"
    MISSING_FENCE = ("a generic-proxy write of shared memory reaches an async-proxy operation "
                     "with no proxy fence in the writing threads")
    INIT_NOT_VISIBLE = "a barrier is used before its initialization is visible to the threads"
    SLOT_RANGE = "a stage index is outside the ring (the ring is smaller than the schedule needs)"
    INFLIGHT_AT_EXIT = "a copy or an arrival is still outstanding when the program ends"
    BARRIER_IN_ROLE = "a CTA-wide barrier inside one warp role (the other role never reaches it)"


class ProtocolViolation(Exception):
    """One broken rule. ``str()`` is the detailed message; ``rule`` names the rule."""

    def __init__(self, rule: ProtocolRule, message: str) -> None:
        super().__init__(message)
        self.rule = rule


class WouldBlock(Exception):
    """A wait whose phase has not completed: the caller runs another role, or reports a
    deadlock when no role can go on."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def merge(into: Knowledge, facts: Knowledge) -> None:
    for k, g in facts.items():
        if into.get(k, -1) < g:
            into[k] = g


@dataclass
class Slot:
    """One buffer of a ring: which write it holds, who read it, what is in flight."""

    gen: int = 0  # completed writes so far
    in_flight: int = 0  # generation of a copy issued but not completed (0: none)
    data: Any = None
    readers: dict[str, int] = field(default_factory=dict)  # role -> generation read
    generic_dirty: set[str] = field(default_factory=set)  # roles with unfenced writes
    async_readers: int = 0  # bulk stores reading the slot, not yet waited for


@dataclass
class Ring:
    name: str
    slots: list[Slot]


@dataclass
class Copy:
    """A copy into a slot: completes when its barrier phase does (TMA, cp.async) or when
    its role arrives (plain loads and stores)."""

    ring: Ring
    slot: int
    gen: int
    data: Any
    barrier: Barrier
    bslot: int
    role: str


@dataclass
class Phase:
    arrivals: int
    tx: int = 0
    knowledge: Knowledge = field(default_factory=dict)
    copies: list[Copy] = field(default_factory=list)


@dataclass
class BarrierSlot:
    phase: Phase
    completed: int = 0  # phases completed so far
    cumulative: Knowledge = field(default_factory=dict)  # facts of every completed phase


@dataclass
class Barrier:
    name: str
    arrivals: int
    slots: list[BarrierSlot]
    valid: bool = True
    init_dirty: set[str] = field(default_factory=set)  # roles that initialized, unfenced


@dataclass
class BulkStore:
    ring: Ring
    slot: int
    done: bool = False


class ProtocolState:
    """The protocol of one program instance (one CTA)."""

    def __init__(self) -> None:
        self.known: dict[str, Knowledge] = {}
        self.pending: dict[str, Knowledge] = {}
        self.outstanding: dict[str, list[Copy]] = {}  # cp.async / plain copies not arrived
        self.observed: dict[tuple[int, int, str], int] = {}  # (bar, slot, role) -> phase
        self.uses: dict[tuple[int, str], int] = {}  # (bar, role) -> arrives and waits so far
        self.rings: list[Ring] = []
        self.barriers: list[Barrier] = []
        self.stores: list[BulkStore] = []
        self.on_change: Callable[[], None] | None = None

    # --- roles -------------------------------------------------------------------------

    def _known(self, role: str) -> Knowledge:
        return self.known.setdefault(role, {})

    def _pending(self, role: str) -> Knowledge:
        return self.pending.setdefault(role, {})

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def cta_barrier(self, roles: list[str]) -> None:
        """Every thread of ``roles`` (the whole CTA) meets: they all learn everything."""
        everything: Knowledge = {}
        for r in set(roles) | set(self.known) | set(self.pending):
            merge(everything, self._known(r))
            merge(everything, self._pending(r))
        for r in set(roles) | set(self.known):
            self.known[r] = dict(everything)
            self.pending[r] = {}

    # --- allocation ----------------------------------------------------------------------

    def alloc_ring(self, name: str, stages: int) -> Ring:
        ring = Ring(name, [Slot() for _ in range(stages)])
        self.rings.append(ring)
        return ring

    def alloc_barrier(self, name: str, count: int, arrivals: int, role: str) -> Barrier:
        """Allocate and initialize (one thread of ``role``, a generic-proxy write)."""
        bar = Barrier(name, arrivals, [BarrierSlot(Phase(arrivals)) for _ in range(count)])
        bar.init_dirty.add(role)
        self.barriers.append(bar)
        self._pending(role)[("init", id(bar))] = 1
        return bar

    def _used(self, bar: Barrier, role: str) -> None:
        key = (id(bar), role)
        self.uses[key] = self.uses.get(key, 0) + 1
        self._pending(role)[("u", id(bar), role)] = self.uses[key]

    def inval_barrier(self, bar: Barrier, role: str) -> None:
        """Invalidate (one thread of ``role``): every use of the barrier by any thread must
        be known to have finished, and no phase be half done."""
        self._check_barrier(bar, 0, role)
        known = self._known(role)
        for (b, user), n in self.uses.items():
            if b == id(bar) and known.get(("u", b, user), 0) < n:
                raise ProtocolViolation(
                    ProtocolRule.INIT_NOT_VISIBLE,
                    f"barrier `{bar.name}` is invalidated while threads of role `{user}` may "
                    "still use it (a CTA barrier must come first)")
        for i, s in enumerate(bar.slots):
            if s.phase.arrivals != bar.arrivals or s.phase.tx or s.phase.copies:
                raise ProtocolViolation(
                    ProtocolRule.INFLIGHT_AT_EXIT,
                    f"barrier `{bar.name}`[{i}] is invalidated in the middle of phase "
                    f"{s.completed} ({self._phase_state(bar, i)})")
        bar.valid = False

    # --- fences --------------------------------------------------------------------------

    def fence_mbarrier_init(self, role: str) -> None:
        for bar in self.barriers:
            bar.init_dirty.discard(role)

    def fence_proxy_async(self, role: str) -> None:
        self.fence_mbarrier_init(role)
        for ring in self.rings:
            for s in ring.slots:
                s.generic_dirty.discard(role)

    # --- checks --------------------------------------------------------------------------

    def _slot(self, ring: Ring, slot: int) -> Slot:
        if not 0 <= slot < len(ring.slots):
            raise ProtocolViolation(
                ProtocolRule.SLOT_RANGE,
                f"stage {slot} of `{ring.name}`, which has {len(ring.slots)} stages")
        return ring.slots[slot]

    def _check_barrier(self, bar: Barrier, slot: int, role: str) -> BarrierSlot:
        if not 0 <= slot < len(bar.slots):
            raise ProtocolViolation(
                ProtocolRule.SLOT_RANGE,
                f"barrier {slot} of `{bar.name}`, which has {len(bar.slots)} barriers")
        if not bar.valid:
            raise ProtocolViolation(ProtocolRule.INIT_NOT_VISIBLE,
                                    f"barrier `{bar.name}` is used after it was invalidated")
        if self._known(role).get(("init", id(bar)), 0) < 1:
            raise ProtocolViolation(
                ProtocolRule.INIT_NOT_VISIBLE,
                f"barrier `{bar.name}` is used by role `{role}` before its initialization "
                "is visible to every thread of the role (a CTA barrier must follow the init)")
        return bar.slots[slot]

    def _check_async_barrier(self, bar: Barrier) -> None:
        if bar.init_dirty:
            raise ProtocolViolation(
                ProtocolRule.MISSING_FENCE,
                f"an async-proxy copy completes on barrier `{bar.name}`, initialized by the "
                "generic proxy with no fence.mbarrier_init (or fence.proxy.async) after it")

    def _check_writable(self, ring: Ring, slot: int, role: str, engine: str) -> Slot:
        s = self._slot(ring, slot)
        where = f"stage {slot} of `{ring.name}`"
        if s.in_flight:
            raise ProtocolViolation(ProtocolRule.OVERWRITE_BEFORE_RELEASE,
                                    f"{where} is written while an earlier copy into it is "
                                    "still in flight")
        if s.async_readers:
            raise ProtocolViolation(ProtocolRule.OVERWRITE_BEFORE_RELEASE,
                                    f"{where} is written while a bulk store still reads it")
        known = self._known(role)
        # A role's own reads count only once synchronized: its threads are not in lockstep.
        for reader, g in s.readers.items():
            if known.get(("r", id(ring), slot, reader), -1) < g:
                raise ProtocolViolation(
                    ProtocolRule.OVERWRITE_BEFORE_RELEASE,
                    f"{where} is overwritten (write {s.gen + 1}) before role `{reader}` "
                    f"released its contents (write {g}) to role `{role}`")
        if engine == "tma" and s.generic_dirty:
            raise ProtocolViolation(
                ProtocolRule.MISSING_FENCE,
                f"a TMA copy writes {where} after generic-proxy writes of it by "
                f"{sorted(s.generic_dirty)} with no fence.proxy.async between them")
        return s

    # --- copies into shared memory -----------------------------------------------------

    def copy_g2s(self, ring: Ring, slot: int, bar: Barrier, bslot: int, engine: str,
                 nbytes: int, role: str, data: Any) -> None:
        """A copy of one tile from global memory into ``ring[slot]``, completing on
        ``bar[bslot]``: TMA by transaction bytes (``nbytes``), cp.async and plain copies
        at their role's next arrival on that barrier."""
        s = self._check_writable(ring, slot, role, engine)
        b = self._check_barrier(bar, bslot, role)
        copy = Copy(ring, slot, s.gen + 1, data, bar, bslot, role)
        s.in_flight = copy.gen
        if engine == "tma":
            self._check_async_barrier(bar)
            b.phase.copies.append(copy)
            b.phase.tx -= nbytes
            self._maybe_complete(bar, bslot)
        else:
            if engine == "plain":
                s.generic_dirty.add(role)
            self.outstanding.setdefault(role, []).append(copy)
        self._changed()

    def expect_tx(self, bar: Barrier, bslot: int, nbytes: int, role: str) -> None:
        """``mbarrier.arrive.expect_tx`` by one thread of ``role``."""
        b = self._check_barrier(bar, bslot, role)
        b.phase.tx += nbytes
        self._used(bar, role)
        self._arrive(bar, bslot, role, dict(self._known(role)))

    def arrive(self, bar: Barrier, bslot: int, role: str) -> None:
        """Every thread of ``role`` arrives (one arrival of the role); the role's copies
        that complete on this barrier complete with it."""
        self._check_barrier(bar, bslot, role)
        self._used(bar, role)
        facts = dict(self._known(role))
        merge(facts, self._pending(role))
        mine = self.outstanding.get(role, [])
        b = bar.slots[bslot]
        b.phase.copies.extend(c for c in mine if c.barrier is bar and c.bslot == bslot)
        self.outstanding[role] = [c for c in mine if not (c.barrier is bar and c.bslot == bslot)]
        self._arrive(bar, bslot, role, facts)

    def _arrive(self, bar: Barrier, bslot: int, role: str, facts: Knowledge) -> None:
        b = bar.slots[bslot]
        if b.phase.arrivals == 0:
            raise ProtocolViolation(
                ProtocolRule.ARRIVAL_OVERFLOW,
                f"role `{role}` arrives on barrier `{bar.name}`[{bslot}] in phase {b.completed},"
                f" which expects {bar.arrivals} arrival(s) and already has them all")
        b.phase.arrivals -= 1
        merge(b.phase.knowledge, facts)
        self._maybe_complete(bar, bslot)
        self._changed()

    def _maybe_complete(self, bar: Barrier, bslot: int) -> None:
        b = bar.slots[bslot]
        p = b.phase
        if p.arrivals:
            return
        if p.tx < 0:
            raise ProtocolViolation(
                ProtocolRule.TX_MISMATCH,
                f"the copies completing on barrier `{bar.name}`[{bslot}] in phase {b.completed}"
                f" deliver {-p.tx} bytes more than its arrivals expect")
        if p.tx > 0:
            return  # waits for bytes; a deadlock or the exit check reports it
        for c in p.copies:
            s = c.ring.slots[c.slot]
            s.gen, s.in_flight, s.data = c.gen, 0, c.data
            s.readers = {}
            p.knowledge[("w", id(c.ring), c.slot)] = c.gen
        merge(b.cumulative, p.knowledge)
        b.completed += 1
        b.phase = Phase(bar.arrivals)

    def wait(self, bar: Barrier, bslot: int, parity: int, role: str) -> None:
        """``mbarrier.try_wait.parity`` by every thread of ``role``: returns when the phase
        of that parity completed, raises ``WouldBlock`` while it has not."""
        b = self._check_barrier(bar, bslot, role)
        if parity not in (0, 1):
            raise ProtocolViolation(ProtocolRule.PARITY, f"parity {parity} is not 0 or 1")
        if (b.completed & 1) == parity:
            raise WouldBlock(f"barrier `{bar.name}`[{bslot}] phase {b.completed} "
                             f"({self._phase_state(bar, bslot)})")
        seen = b.completed - 1  # -1: the phase before the first, complete by convention
        key = (id(bar), bslot, role)
        if self.observed.get(key, -2) >= seen:
            raise ProtocolViolation(
                ProtocolRule.PARITY,
                f"role `{role}` waits on barrier `{bar.name}`[{bslot}] with parity {parity}, "
                f"which returns on phase {seen}, one it already waited for")
        self.observed[key] = seen
        self._used(bar, role)
        merge(self._known(role), b.cumulative)
        self._changed()

    def _phase_state(self, bar: Barrier, bslot: int) -> str:
        p = bar.slots[bslot].phase
        got = bar.arrivals - p.arrivals
        text = f"{got} of {bar.arrivals} arrivals"
        if p.tx > 0:
            text += f", {p.tx} transaction bytes outstanding"
        return text

    # --- reads and generic writes of shared memory ---------------------------------------

    def read(self, ring: Ring, slot: int, role: str) -> Any:
        s = self._slot(ring, slot)
        where = f"stage {slot} of `{ring.name}`"
        if s.in_flight:
            raise ProtocolViolation(ProtocolRule.READ_BEFORE_COMPLETE,
                                    f"{where} is read while a copy into it is in flight")
        if s.gen == 0:
            raise ProtocolViolation(ProtocolRule.READ_BEFORE_COMPLETE,
                                    f"{where} is read before anything was copied into it")
        if self._known(role).get(("w", id(ring), slot), 0) < s.gen:
            raise ProtocolViolation(
                ProtocolRule.READ_BEFORE_COMPLETE,
                f"{where} is read by role `{role}` before it waited for the copy into it "
                f"(write {s.gen}) to complete")
        s.readers[role] = s.gen
        self._pending(role)[("r", id(ring), slot, role)] = s.gen
        return s.data

    def write(self, ring: Ring, slot: int, role: str, data: Any) -> None:
        """Ordinary stores of a tile into ``ring[slot]`` by ``role`` (generic proxy)."""
        s = self._check_writable(ring, slot, role, "generic")
        s.gen += 1
        s.data = data
        s.readers = {}
        s.generic_dirty.add(role)
        self._pending(role)[("w", id(ring), slot)] = s.gen
        self._changed()

    def bulk_store(self, ring: Ring, slot: int, role: str) -> tuple[BulkStore, Any]:
        """A TMA store reads ``ring[slot]`` through the async proxy; its token is waited
        for with ``store_wait``."""
        s = self._slot(ring, slot)
        if s.gen == 0 or self._known(role).get(("w", id(ring), slot), 0) < s.gen:
            raise ProtocolViolation(
                ProtocolRule.READ_BEFORE_COMPLETE,
                f"a bulk store reads stage {slot} of `{ring.name}` before its contents are "
                f"visible to role `{role}`")
        if s.generic_dirty:
            raise ProtocolViolation(
                ProtocolRule.MISSING_FENCE,
                f"a bulk store reads stage {slot} of `{ring.name}` after generic-proxy writes "
                f"by {sorted(s.generic_dirty)} with no fence.proxy.async between them")
        s.async_readers += 1
        store = BulkStore(ring, slot)
        self.stores.append(store)
        return store, s.data

    def store_wait(self, store: BulkStore) -> None:
        if not store.done:
            store.done = True
            store.ring.slots[store.slot].async_readers -= 1
        self._changed()

    # --- the end of the program ----------------------------------------------------------

    def finish(self) -> None:
        """What must hold when every role has returned."""
        for role, copies in self.outstanding.items():
            if copies:
                c = copies[0]
                raise ProtocolViolation(
                    ProtocolRule.INFLIGHT_AT_EXIT,
                    f"role `{role}` ends with a copy into stage {c.slot} of `{c.ring.name}` "
                    f"that never arrived on barrier `{c.barrier.name}`[{c.bslot}]")
        for ring in self.rings:
            for i, s in enumerate(ring.slots):
                if s.in_flight:
                    raise ProtocolViolation(
                        ProtocolRule.INFLIGHT_AT_EXIT,
                        f"the program ends with a copy into stage {i} of `{ring.name}` in flight")
        for store in self.stores:
            if not store.done:
                raise ProtocolViolation(
                    ProtocolRule.INFLIGHT_AT_EXIT,
                    f"the program ends before waiting for a bulk store from stage "
                    f"{store.slot} of `{store.ring.name}`")
        for bar in self.barriers:
            if not bar.valid:
                continue
            for i, b in enumerate(bar.slots):
                if b.phase.arrivals != bar.arrivals or b.phase.tx:
                    raise ProtocolViolation(
                        ProtocolRule.INFLIGHT_AT_EXIT,
                        f"the program ends in the middle of phase {b.completed} of barrier "
                        f"`{bar.name}`[{i}] ({self._phase_state(bar, i)})")
