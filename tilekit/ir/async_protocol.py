"""The asynchronous protocol as a state machine: shared-memory rings, mbarriers, copies,
proxy fences, and what each group of threads knows.

One machine serves two clients. The interpreter drives it with data (the async ops'
references call it), so every pipeline runs, and is checked, on the CPU. The protocol
checker (``tilekit.sched.protocol``) drives it over scheduled IR without data, for the trip
counts that expose off-by-one schedules. A rule broken raises ``ProtocolViolation``
naming the rule; the caller adds the user's line.

**Roles.** Threads come in roles: the whole program when a pipeline is not warp-specialized
(role ``"cta"``), a producer and a consumer when it is (``enter_roles`` / ``leave_roles``).
The threads of a role run the same code but not in lockstep, so what one thread did is
known to the others only after they synchronize: a CTA barrier, or an mbarrier phase they
all arrived on and then waited for. This holds for a role and itself: a role reads a stage
it filled with plain stores only after waiting for the phase its arrival completed.

**Knowledge.** A fact is a key with a generation:

- ``("w", ring, slot)``: the g-th write into that slot has completed;
- ``("wa", ring, slot)``: the writer of the slot's g-th contents (a generic-proxy write)
  fenced it for the async proxy;
- ``("r", ring, slot, role)``: ``role`` has finished reading the slot's g-th contents;
- ``("sw", ring, slot)``: the g-th bulk store from the slot has finished reading it;
- ``("init", bar)`` / ``("fi", bar)``: the barrier ring is initialized / its initialization
  was fenced for the async proxy;
- ``("u", bar, role)``: ``role`` has finished its g-th use (arrive or wait) of the barrier
  (made known by CTA barriers only: the one before invalidation);
- ``("ph", bar, slot)``: g phases of that barrier have completed.

Each role has ``known`` (facts all its threads have, beyond ``base``, what every thread of
the program has since the last CTA barrier) and ``pending`` (facts some of its threads
made, not yet shared). An arrival adds the arriving role's facts to the barrier's
current phase (one thread's arrival, ``expect_tx``, only the facts all threads have); a wait
that sees the phase complete adds them to the waiter's ``known``. A read needs its slot's
write known; a write into a slot needs every earlier read of it, and every bulk store from
it, known (to the writing role) and no copy into it still in flight. An arrival (and a TMA
copy's bytes) needs the previous phase of its barrier known to be complete, or it may land
in that phase.

**Proxies.** TMA reads and writes shared memory through the async proxy; ordinary loads and
stores, ``cp.async`` (non-bulk) and mbarrier initialization through the generic proxy. A
generic access that an async-proxy operation then touches needs a proxy fence by the
accessing threads (``fence.proxy.async``, or ``fence.mbarrier_init`` for barrier
initialization), made known to the threads issuing the async operation by a synchronization
after the fence: a generic write before a TMA copy or bulk store of the same bytes, and a
generic read before a TMA copy overwrites them (the consumers fence between their reads and
their release: an mbarrier orders the two only within the generic proxy). A fence by a role
covers what its threads did in any warp role they ran. Rings placed on the same bytes
(``span``) alias: writing one needs the earlier one's contents finished with, and fenced.

**mbarrier phases** follow the PTX ISA: a phase completes when its pending arrival count and
its transaction count both reach zero; ``try_wait.parity(p)`` succeeds when the current
phase's parity is not ``p`` (a fresh barrier is in phase 0, so ``parity=1`` passes at once,
the producer's start convention). Transaction bytes may complete before they are expected
(the count goes negative for a while), as on the hardware. Copies complete at once in this
model (a TMA copy when its phase's bytes and arrivals are in, a ``cp.async`` or plain copy
with its role's arrival), which no waiter can tell apart from a later completion; so a copy
whose phase nobody waited for is still in flight when the program ends.

Every object remembers ``site``, what the caller set ``ProtocolState.site`` to when it was
made (the checker sets it to the op it runs), so that a violation found at the end of the
program can name the op that caused it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Fact = tuple
Knowledge = dict[Fact, int]


class ProtocolRule(enum.Enum):
    """Each rule the protocol can break, with the sentence an error shows."""

    READ_BEFORE_COMPLETE = "a stage is read before the copy into it completed and was waited for"
    OVERWRITE_BEFORE_RELEASE = ("a stage is overwritten before every reader released it, "
                                "or while a copy into it or a bulk store from it is in flight")
    ARRIVAL_OVERFLOW = ("more arrivals in one phase than the barrier expects, or an arrival "
                        "that may land in the phase before the one it is meant for")
    TX_MISMATCH = ("the copies completing on a phase deliver a different number of bytes "
                   "than it expects")
    PARITY = "a wait's parity does not match the phase it should wait for"
    DEADLOCK = "a wait can never be satisfied"
    MISSING_FENCE = ("a generic-proxy access of shared memory (a write, a read, or a "
                     "barrier's initialization) is followed by an async-proxy operation on it "
                     "with no proxy fence by the accessing threads ordered between them")
    INIT_NOT_VISIBLE = ("a barrier is used before its initialization is visible to the "
                        "threads, or invalidated while they may still use it")
    SLOT_RANGE = "a stage index is outside the ring (the ring is smaller than the schedule needs)"
    INFLIGHT_AT_EXIT = ("a copy, a bulk store or a phase is still outstanding when the "
                        "program ends or invalidates the barrier")
    BARRIER_IN_ROLE = "a CTA-wide barrier inside one warp role (the other role never reaches it)"


class ProtocolViolation(Exception):
    """One broken rule. ``str()`` is the detailed message; ``rule`` names the rule; ``site``
    is the ``ProtocolState.site`` of the object at fault when the caller cannot know it
    (violations found at the end of the program), else None."""

    def __init__(self, rule: ProtocolRule, message: str, site: Any = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.site = site


class WouldBlock(Exception):
    """A wait whose phase has not completed: the caller runs another role, or reports a
    deadlock (``ProtocolState.deadlock``) when no role can go on."""

    def __init__(self, what: str, barrier: Barrier | None = None, slot: int = 0) -> None:
        super().__init__(what)
        self.what = what
        self.barrier = barrier
        self.slot = slot


def merge(into: Knowledge, facts: Knowledge) -> None:
    """``into`` learns ``facts`` (the later generation of each)."""
    get = into.get
    for k, g in facts.items():
        if get(k, -1) < g:
            into[k] = g


@dataclass
class Slot:
    """One buffer of a ring: which write it holds, who read it, what is in flight."""

    gen: int = 0  # completed writes so far
    in_flight: Copy | None = None  # a copy issued into it, not completed
    data: Any = None
    readers: dict[str, int] = field(default_factory=dict)  # role -> generation read
    generic: int = 0  # the latest generation written through the generic proxy
    writers: dict[str, int] = field(default_factory=dict)  # role -> its latest generic write
    stores: int = 0  # bulk stores issued from the slot


@dataclass
class Ring:
    name: str
    slots: list[Slot]
    site: Any = None
    span: tuple[int, int] | None = None  # its bytes of shared memory, when placed
    aliases: list[Ring] = field(default_factory=list)  # earlier rings on the same bytes
    alias_checked: set[str] = field(default_factory=set)  # roles whose writes passed


@dataclass
class Copy:
    """A copy into a slot: completes when its barrier phase does (TMA) or with its role's
    next arrival on that barrier (cp.async, plain loads and stores)."""

    ring: Ring
    slot: int
    gen: int
    data: Any
    barrier: Barrier
    bslot: int
    role: str
    engine: str
    site: Any = None


@dataclass
class Phase:
    arrivals: int  # still pending
    tx: int = 0  # transaction bytes still pending (negative: delivered before expected)
    knowledge: Knowledge = field(default_factory=dict)
    copies: list[Copy] = field(default_factory=list)


@dataclass
class BarrierSlot:
    phase: Phase
    completed: int = 0  # phases completed so far
    history: list[Knowledge] = field(default_factory=list)  # each completed phase's facts
    waited: int = 0  # phases some role waited for (the latest one seen, plus one)
    copy_phase: int = 0  # the latest completed phase that completed copies, plus one
    copies: list[Copy] = field(default_factory=list)  # that phase's copies


@dataclass
class Barrier:
    name: str
    arrivals: int
    slots: list[BarrierSlot]
    role: str  # the role one of whose threads initialized it
    valid: bool = True
    fenced: bool = False  # the initializing role ran a fence after the initialization
    visible: set[str] = field(default_factory=set)  # roles known to see the initialization
    site: Any = None


@dataclass
class BulkStore:
    ring: Ring
    slot: int
    role: str
    seq: int  # the slot's how-manieth bulk store
    order: int  # the program's how-manieth bulk store
    done: bool = False
    site: Any = None


class ProtocolState:
    """The protocol of one program instance (one CTA)."""

    def __init__(self) -> None:
        self.base: Knowledge = {}  # what every thread knows (since the last CTA barrier)
        self.known: dict[str, Knowledge] = {}  # per role, what it knows beyond ``base``
        self.pending: dict[str, Knowledge] = {}
        self.outstanding: dict[str, list[Copy]] = {}  # cp.async / plain copies not arrived
        self.observed: dict[tuple[int, int, str], int] = {}  # (bar, slot, role) -> phase
        self.merged: dict[tuple[int, int, str], int] = {}  # ... -> phases' facts merged
        self.uses: dict[int, dict[str, int]] = {}  # bar -> role -> arrives and waits so far
        self.rings: list[Ring] = []
        self.placed: list[Ring] = []  # rings with a span whose bytes no later ring took over
        self.barriers: list[Barrier] = []
        self.unfenced: list[Barrier] = []  # initialized, no fence by their role yet
        # Per role, the slots it wrote / read through the generic proxy since its last fence.
        self.unfenced_writes: dict[str, dict[tuple[int, int], tuple[Ring, int]]] = {}
        self.unfenced_reads: dict[str, dict[tuple[int, int], tuple[Ring, int]]] = {}
        self.parents: dict[str, str] = {}  # warp role -> the role its threads belong to
        self.stores: list[BulkStore] = []
        self.on_change: Callable[[], None] | None = None
        self.site: Any = None  # the caller's handle on the op running (recorded, not read)

    # --- roles -------------------------------------------------------------------------

    def _known(self, role: str) -> Knowledge:
        k = self.known.get(role)
        if k is None:
            k = self.known[role] = {}
        return k

    def _knows(self, role: str, fact: Fact) -> int:
        """The generation of ``fact`` every thread of ``role`` knows (0: none)."""
        known = self.known.get(role)
        k = known.get(fact, 0) if known is not None else 0
        b = self.base.get(fact, 0)
        return k if k > b else b

    def _pending(self, role: str) -> Knowledge:
        p = self.pending.get(role)
        if p is None:
            p = self.pending[role] = {}
        return p

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def cta_barrier(self, roles: list[str]) -> None:
        """Every thread of ``roles`` (the whole CTA) meets: they all learn everything."""
        names = set(roles) | set(self.known) | set(self.pending)
        for r in names:
            merge(self.base, self._known(r))
            merge(self.base, self._pending(r))
        for bar, users in self.uses.items():
            for user, n in users.items():
                self.base[("u", bar, user)] = n
        for r in names:
            self.known[r] = {}
            self.pending[r] = {}

    def enter_roles(self, parent: str, roles: Sequence[str]) -> None:
        """The threads of ``parent`` split into ``roles``: each starts knowing what all of
        ``parent``'s threads know (its pending facts stay with ``parent``: whose they are
        is not known), and what their threads knew when they last ran as these roles."""
        base = self._known(parent)
        for r in roles:
            merge(self._known(r), base)  # an earlier run of the role knew more: still true
            self.parents[r] = parent

    def leave_roles(self, parent: str, roles: Sequence[str]) -> None:
        """``roles`` end and their threads go on as ``parent``: it knows what every role
        knows; the rest is pending until the next synchronization."""
        knowns = [self._known(r) for r in roles]
        common = dict(knowns[0]) if knowns else {}
        for k in knowns[1:]:
            common = {f: min(g, k[f]) for f, g in common.items() if f in k}
        merge(common, self._known(parent))
        pending = self._pending(parent)
        for r in roles:
            merge(pending, self._known(r))
            merge(pending, self._pending(r))
        self.known[parent] = common

    # --- allocation ----------------------------------------------------------------------

    def alloc_ring(self, name: str, stages: int,
                   span: tuple[int, int] | None = None) -> Ring:
        """A ring of ``stages`` slots; ``span``: its bytes ``[start, end)`` of shared
        memory, when placed. Earlier rings on the same bytes are its aliases: what they
        held must be finished with (and fenced, for an async-proxy write) before it is
        written."""
        ring = Ring(name, [Slot() for _ in range(stages)], self.site, span)
        if span is not None:
            ring.aliases = [r for r in self.placed if r.span[0] < span[1]
                            and span[0] < r.span[1]]
            self.placed.append(ring)
        self.rings.append(ring)
        return ring

    def alloc_barrier(self, name: str, count: int, arrivals: int, role: str) -> Barrier:
        """Allocate and initialize (one thread of ``role``, a generic-proxy write)."""
        bar = Barrier(name, arrivals, [BarrierSlot(Phase(arrivals)) for _ in range(count)],
                      role, site=self.site)
        self.barriers.append(bar)
        self.unfenced.append(bar)
        self._pending(role)[("init", id(bar))] = 1
        return bar

    def _used(self, bar: Barrier, role: str) -> None:
        uses = self.uses.get(id(bar))
        if uses is None:
            uses = self.uses[id(bar)] = {}
        uses[role] = uses.get(role, 0) + 1

    def inval_barrier(self, bar: Barrier, role: str) -> None:
        """Invalidate (one thread of ``role``): every use of the barrier by any thread must
        be known to have finished, no phase be half done, no copy's phase be unwaited."""
        self._check_barrier(bar, 0, role)
        for user, n in self.uses.get(id(bar), {}).items():
            if self._knows(role, ("u", id(bar), user)) < n:
                raise ProtocolViolation(
                    ProtocolRule.INIT_NOT_VISIBLE,
                    f"barrier `{bar.name}` is invalidated while threads of role `{user}` may "
                    "still use it (a CTA barrier must come first)")
        self._check_barrier_done(bar, "is invalidated")
        bar.valid = False
        self.uses.pop(id(bar), None)

    # --- fences --------------------------------------------------------------------------

    def _covers(self, role: str, other: str) -> bool:
        """Whether every thread of ``other`` is a thread of ``role``."""
        while other != role:
            other = self.parents.get(other)
            if other is None:
                return False
        return True

    def fence_mbarrier_init(self, role: str) -> None:
        """The threads of ``role`` fence the barrier initializations they made (one of
        them did) for the async proxy; the other roles learn it at their next
        synchronization with ``role``."""
        pending = self._pending(role)
        for bar in self.unfenced:
            if self._covers(role, bar.role):
                bar.fenced = True
                pending[("fi", id(bar))] = 1
        self.unfenced = [bar for bar in self.unfenced if not bar.fenced]

    def fence_proxy_async(self, role: str) -> None:
        """As ``fence_mbarrier_init``, and for the generic writes and reads of every stage
        by the role's threads (in any warp role they ran): ``("wa", ...)`` and
        ``("ra", ...)`` facts, pending in ``role``."""
        self.fence_mbarrier_init(role)
        pending = self._pending(role)
        for who in [r for r in self.unfenced_writes if self._covers(role, r)]:
            for ring, i in self.unfenced_writes.pop(who).values():
                key = ("wa", id(ring), i)
                g = ring.slots[i].writers[who]
                if pending.get(key, 0) < g:
                    pending[key] = g
        for who in [r for r in self.unfenced_reads if self._covers(role, r)]:
            for ring, i in self.unfenced_reads.pop(who).values():
                g = ring.slots[i].readers.get(who)
                key = ("ra", id(ring), i, who)
                if g is not None and pending.get(key, 0) < g:
                    pending[key] = g

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
        if role not in bar.visible:  # knowledge only grows: once seen, always seen
            if self._knows(role, ("init", id(bar))) < 1:
                raise ProtocolViolation(
                    ProtocolRule.INIT_NOT_VISIBLE,
                    f"barrier `{bar.name}` is used by role `{role}` before its initialization "
                    "is visible to every thread of the role (a CTA barrier must follow the "
                    "init)")
            bar.visible.add(role)
        return bar.slots[slot]

    def _check_order(self, bar: Barrier, bslot: int, b: BarrierSlot, role: str,
                     rule: ProtocolRule, what: str) -> None:
        """``role`` acts on the current phase of ``bar[bslot]``: it must know the phase
        before it completed, or its action may count toward that one."""
        if b.completed and self._knows(role, ("ph", id(bar), bslot)) < b.completed:
            raise ProtocolViolation(
                rule,
                f"{what} barrier `{bar.name}`[{bslot}] for phase {b.completed} by role "
                f"`{role}`, which does not know that phase {b.completed - 1} completed: it "
                f"may count toward phase {b.completed - 1}")

    def _check_async_barrier(self, bar: Barrier, role: str) -> None:
        if self._knows(role, ("fi", id(bar))) < 1:
            if not bar.fenced:
                raise ProtocolViolation(
                    ProtocolRule.MISSING_FENCE,
                    f"a TMA copy completes on barrier `{bar.name}`, initialized by the generic "
                    "proxy with no fence.mbarrier_init (or fence.proxy.async) after it")
            raise ProtocolViolation(
                ProtocolRule.MISSING_FENCE,
                f"a TMA copy by role `{role}` completes on barrier `{bar.name}` before the "
                "fence after its initialization is known to the role (a CTA barrier must "
                "follow the fence)")

    def _check_async_access(self, ring: Ring, slot: int, s: Slot, role: str, what: str) -> None:
        """An async-proxy access of a slot whose contents the generic proxy wrote."""
        if not s.generic or s.generic != s.gen:
            return
        key = ("wa", id(ring), slot)
        if self._knows(role, key) >= s.gen:
            return
        where = f"stage {slot} of `{ring.name}`"
        fenced = [r for r in self.pending if max(self.pending[r].get(key, 0),
                                                 self._knows(r, key)) >= s.gen]
        if fenced:
            raise ProtocolViolation(
                ProtocolRule.MISSING_FENCE,
                f"{what} {where} (write {s.gen}, by the generic proxy) before the "
                f"fence.proxy.async of role `{fenced[0]}` is known to role `{role}` (a "
                "synchronization must follow the fence)")
        writers = sorted(r for r, g in s.writers.items() if g == s.gen)
        raise ProtocolViolation(
            ProtocolRule.MISSING_FENCE,
            f"{what} {where} after generic-proxy writes of it by {writers} with no "
            "fence.proxy.async between them")

    def _check_writable(self, ring: Ring, slot: int, role: str, engine: str) -> Slot:
        s = self._slot(ring, slot)
        self._check_done_with(ring, slot, s, role, engine == "tma",
                              f"stage {slot} of `{ring.name}` is overwritten (write {s.gen + 1})")
        if engine == "tma":
            self._check_async_access(ring, slot, s, role, "a TMA copy overwrites")
        if ring.aliases and role not in ring.alias_checked:
            for old in ring.aliases:
                for i, o in enumerate(old.slots):
                    self._check_done_with(
                        old, i, o, role, engine == "tma",
                        f"stage {slot} of `{ring.name}` is written over the bytes of stage {i} "
                        f"of `{old.name}` (write {o.gen})")
                    if engine == "tma":
                        self._check_async_access(old, i, o, role, f"a TMA copy into stage "
                                                 f"{slot} of `{ring.name}` overwrites")
            ring.alias_checked.add(role)
            # Earlier rings inside this one's bytes are over for every later ring.
            span = ring.span
            self.placed = [r for r in self.placed if r is ring or not (
                r in ring.aliases and span[0] <= r.span[0] and r.span[1] <= span[1])]
        return s

    def _check_done_with(self, ring: Ring, slot: int, s: Slot, role: str, async_write: bool,
                         what: str) -> None:
        """Before ``role`` writes the bytes of ``ring[slot]``: no copy into them in flight;
        every bulk store from them, and every read of their contents, known to ``role``
        to have finished; for an async-proxy write, every generic read fenced."""
        if s.in_flight is not None:
            raise ProtocolViolation(ProtocolRule.OVERWRITE_BEFORE_RELEASE,
                                    f"{what} while an earlier copy into it is still in flight")
        if s.stores and self._knows(role, ("sw", id(ring), slot)) < s.stores:
            busy = any(not st.done for st in self.stores if st.ring is ring and st.slot == slot)
            raise ProtocolViolation(
                ProtocolRule.OVERWRITE_BEFORE_RELEASE,
                f"{what} while a bulk store still reads it" if busy else
                f"{what} by role `{role}` before the wait for the bulk store from it is "
                "known to the role")
        # A role's own reads count only once synchronized: its threads are not in lockstep.
        for reader, g in s.readers.items():
            if self._knows(role, ("r", id(ring), slot, reader)) < g:
                raise ProtocolViolation(
                    ProtocolRule.OVERWRITE_BEFORE_RELEASE,
                    f"{what} before role `{reader}` released its contents (write {g}) to "
                    f"role `{role}`")
            if async_write and self._knows(role, ("ra", id(ring), slot, reader)) < g:
                raise ProtocolViolation(
                    ProtocolRule.MISSING_FENCE,
                    f"{what} by a TMA copy (the async proxy) after role `{reader}` read it "
                    f"(write {g}) through the generic proxy, with no fence.proxy.async by "
                    "the reading threads between their reads and their release")

    # --- copies into shared memory -----------------------------------------------------

    def copy_g2s(self, ring: Ring, slot: int, bar: Barrier, bslot: int, engine: str,
                 nbytes: int, role: str, data: Any) -> None:
        """A copy of one tile from global memory into ``ring[slot]``, completing on
        ``bar[bslot]``: TMA by transaction bytes (``nbytes``), cp.async and plain copies
        at their role's next arrival on that barrier."""
        s = self._check_writable(ring, slot, role, engine)
        b = self._check_barrier(bar, bslot, role)
        copy = Copy(ring, slot, s.gen + 1, data, bar, bslot, role, engine, self.site)
        if engine == "tma":
            self._check_async_barrier(bar, role)
            self._check_order(bar, bslot, b, role, ProtocolRule.TX_MISMATCH,
                              "a TMA copy's bytes complete on")
            s.in_flight = copy
            b.phase.copies.append(copy)
            b.phase.tx -= nbytes
            self._maybe_complete(bar, bslot, b)
        else:
            s.in_flight = copy
            self._generic_write(ring, slot, s, role, copy.gen)  # cp.async is generic too
            self.outstanding.setdefault(role, []).append(copy)
        self._changed()

    def expect_tx(self, bar: Barrier, bslot: int, nbytes: int, role: str) -> None:
        """``mbarrier.arrive.expect_tx`` by one thread of ``role``."""
        b = self._check_barrier(bar, bslot, role)
        self._check_full(bar, bslot, b, role)
        self._check_order(bar, bslot, b, role, ProtocolRule.ARRIVAL_OVERFLOW,
                          "an expect_tx arrives on")
        b.phase.tx += nbytes
        self._used(bar, role)
        self._carry(b.phase, self._known(role))
        self._arrive(bar, bslot, b)

    def arrive(self, bar: Barrier, bslot: int, role: str) -> None:
        """Every thread of ``role`` arrives (one arrival of the role); the role's copies
        that complete on this barrier complete with it."""
        b = self._check_barrier(bar, bslot, role)
        self._check_full(bar, bslot, b, role)
        self._check_order(bar, bslot, b, role, ProtocolRule.ARRIVAL_OVERFLOW, "an arrival on")
        self._used(bar, role)
        mine = self.outstanding.get(role)
        if mine:
            b.phase.copies.extend(c for c in mine if c.barrier is bar and c.bslot == bslot)
            self.outstanding[role] = [c for c in mine
                                      if not (c.barrier is bar and c.bslot == bslot)]
        self._carry(b.phase, self._known(role))
        merge(b.phase.knowledge, self._pending(role))
        self._arrive(bar, bslot, b)

    @staticmethod
    def _carry(phase: Phase, facts: Knowledge) -> None:
        if phase.knowledge:
            merge(phase.knowledge, facts)
        else:
            phase.knowledge = dict(facts)

    def _check_full(self, bar: Barrier, bslot: int, b: BarrierSlot, role: str) -> None:
        if b.phase.arrivals == 0:
            raise ProtocolViolation(
                ProtocolRule.ARRIVAL_OVERFLOW,
                f"role `{role}` arrives on barrier `{bar.name}`[{bslot}] in phase {b.completed},"
                f" which expects {bar.arrivals} arrival(s) and already has them all")

    def _arrive(self, bar: Barrier, bslot: int, b: BarrierSlot) -> None:
        b.phase.arrivals -= 1
        self._maybe_complete(bar, bslot, b)
        self._changed()

    def _maybe_complete(self, bar: Barrier, bslot: int, b: BarrierSlot) -> None:
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
            s.gen, s.in_flight, s.data = c.gen, None, c.data
            s.readers = {}
            if c.engine != "tma":
                s.generic = c.gen
            p.knowledge[("w", id(c.ring), c.slot)] = c.gen
        b.completed += 1
        p.knowledge[("ph", id(bar), bslot)] = b.completed
        if p.copies:
            b.copy_phase, b.copies = b.completed, p.copies
        b.history.append(p.knowledge)
        b.phase = Phase(bar.arrivals)

    def wait(self, bar: Barrier, bslot: int, parity: int, role: str) -> None:
        """``mbarrier.try_wait.parity`` by every thread of ``role``: returns when the phase
        of that parity completed, raises ``WouldBlock`` while it has not."""
        b = self._check_barrier(bar, bslot, role)
        if parity not in (0, 1):
            raise ProtocolViolation(ProtocolRule.PARITY, f"parity {parity} is not 0 or 1")
        if (b.completed & 1) == parity:
            raise WouldBlock(f"barrier `{bar.name}`[{bslot}] phase {b.completed} "
                             f"({self._phase_state(bar, bslot)})", bar, bslot)
        seen = b.completed - 1  # -1: the phase before the first, complete by convention
        key = (id(bar), bslot, role)
        if self.observed.get(key, -2) >= seen:
            raise ProtocolViolation(
                ProtocolRule.PARITY,
                f"role `{role}` waits on barrier `{bar.name}`[{bslot}] with parity {parity}, "
                f"which returns on phase {seen}, one it already waited for")
        self.observed[key] = seen
        if b.waited < b.completed:
            b.waited = b.completed
        self._used(bar, role)
        # Waiting on a phase shows every completed phase's facts; merge the ones not yet seen.
        known = self._known(role)
        start = self.merged.get(key, 0)
        for facts in b.history[start:]:
            merge(known, facts)
        self.merged[key] = len(b.history)
        self._changed()

    def _phase_state(self, bar: Barrier, bslot: int) -> str:
        p = bar.slots[bslot].phase
        got = bar.arrivals - p.arrivals
        text = f"{got} of {bar.arrivals} arrivals"
        if p.tx > 0:
            text += f", {p.tx} transaction bytes outstanding"
        elif p.tx < 0:
            text += f", {-p.tx} transaction bytes delivered before any expect_tx"
        return text

    # --- reads and generic writes of shared memory ---------------------------------------

    def read(self, ring: Ring, slot: int, role: str, proxy: str = "generic") -> Any:
        """``role`` reads ``ring[slot]``: through the generic proxy (loads, ldmatrix), which
        needs a fence before a TMA copy refills the slot, or the async proxy (wgmma)."""
        s = self._slot(ring, slot)
        where = f"stage {slot} of `{ring.name}`"
        if s.in_flight is not None:
            raise ProtocolViolation(ProtocolRule.READ_BEFORE_COMPLETE,
                                    f"{where} is read while a copy into it is in flight")
        if s.gen == 0:
            raise ProtocolViolation(ProtocolRule.READ_BEFORE_COMPLETE,
                                    f"{where} is read before anything was copied into it")
        if self._knows(role, ("w", id(ring), slot)) < s.gen:
            raise ProtocolViolation(
                ProtocolRule.READ_BEFORE_COMPLETE,
                f"{where} is read by role `{role}` before it waited for the copy into it "
                f"(write {s.gen}) to complete")
        s.readers[role] = s.gen
        self._pending(role)[("r", id(ring), slot, role)] = s.gen
        if proxy == "async":  # already the async proxy's: as if fenced (an "ra" fact)
            self._pending(role)[("ra", id(ring), slot, role)] = s.gen
            return s.data
        unfenced = self.unfenced_reads.get(role)
        if unfenced is None:
            unfenced = self.unfenced_reads[role] = {}
        unfenced[(id(ring), slot)] = (ring, slot)
        return s.data

    def write(self, ring: Ring, slot: int, role: str, data: Any) -> None:
        """Ordinary stores of a tile into ``ring[slot]`` by ``role`` (generic proxy)."""
        s = self._check_writable(ring, slot, role, "generic")
        s.gen += 1
        s.data = data
        s.readers = {}
        s.generic = s.gen
        self._generic_write(ring, slot, s, role, s.gen)
        self._pending(role)[("w", id(ring), slot)] = s.gen
        self._changed()

    def _generic_write(self, ring: Ring, slot: int, s: Slot, role: str, gen: int) -> None:
        s.writers[role] = gen
        self.unfenced_writes.setdefault(role, {})[(id(ring), slot)] = (ring, slot)

    def bulk_store(self, ring: Ring, slot: int, role: str) -> tuple[BulkStore, Any]:
        """A TMA store (issued by one thread of ``role``) reads ``ring[slot]`` through the
        async proxy; its token is waited for with ``store_wait``."""
        s = self._slot(ring, slot)
        if s.in_flight is not None or s.gen == 0 or \
                self._knows(role, ("w", id(ring), slot)) < s.gen:
            raise ProtocolViolation(
                ProtocolRule.READ_BEFORE_COMPLETE,
                f"a bulk store reads stage {slot} of `{ring.name}` before its contents are "
                f"visible to role `{role}`")
        self._check_async_access(ring, slot, s, role, "a bulk store reads")
        s.stores += 1
        store = BulkStore(ring, slot, role, s.stores, len(self.stores), site=self.site)
        self.stores.append(store)
        return store, s.data

    def store_wait(self, store: BulkStore, pending: int = 0) -> None:
        """``cp.async.bulk.wait_group.read pending`` by the thread that issued ``store``:
        it and the thread's earlier bulk stores have read their stages, but for the newest
        ``pending`` of them (``store`` first), which may still be reading (known to the
        other threads of its role after their next synchronization)."""
        issued = [st for st in self.stores if st.role == store.role and st.order <= store.order]
        self._stores_read(store.role, issued[:len(issued) - pending] if pending else issued)

    def store_drain(self, role: str) -> None:
        """``cp.async.bulk.wait_group.read 0`` in ``role``: every bulk store it issued has
        read its stage."""
        self._stores_read(role, [st for st in self.stores if st.role == role])

    def _stores_read(self, role: str, stores: Sequence[BulkStore]) -> None:
        pending = self._pending(role)
        for st in stores:
            if not st.done:
                st.done = True
                key = ("sw", id(st.ring), st.slot)
                if pending.get(key, 0) < st.seq:
                    pending[key] = st.seq
        self._changed()

    # --- deadlocks and the end of the program --------------------------------------------

    def deadlock(self, waits: Sequence[tuple[str, WouldBlock]]) -> ProtocolViolation:
        """The violation when the waits ``(role, what blocked it)`` can never return:
        TX_MISMATCH when a phase has all its arrivals and waits for bytes no copy delivers,
        DEADLOCK otherwise."""
        for role, exc in waits:
            bar = exc.barrier
            if bar is not None:
                b = bar.slots[exc.slot]
                if b.phase.arrivals == 0 and b.phase.tx > 0:
                    return ProtocolViolation(
                        ProtocolRule.TX_MISMATCH,
                        f"phase {b.completed} of barrier `{bar.name}`[{exc.slot}] has all its "
                        f"arrivals but expects {b.phase.tx} transaction bytes more than its "
                        f"copies deliver; role `{role}` waits for it forever")
        text = "; ".join(f"role `{role}` waits on {exc.what}" for role, exc in waits)
        return ProtocolViolation(ProtocolRule.DEADLOCK,
                                 f"{text}, and no role is left to complete it")

    def _check_barrier_done(self, bar: Barrier, what: str) -> None:
        for i, b in enumerate(bar.slots):
            p = b.phase
            if p.arrivals == 0 and p.tx > 0:
                raise ProtocolViolation(
                    ProtocolRule.TX_MISMATCH,
                    f"barrier `{bar.name}`[{i}] {what} while phase {b.completed} waits for "
                    f"{p.tx} transaction bytes that no copy delivers", bar.site)
            if p.arrivals != bar.arrivals or p.tx or p.copies:
                raise ProtocolViolation(
                    ProtocolRule.INFLIGHT_AT_EXIT,
                    f"barrier `{bar.name}`[{i}] {what} in the middle of phase {b.completed} "
                    f"({self._phase_state(bar, i)})", bar.site)
            if b.copy_phase > b.waited:
                c = b.copies[0]
                raise ProtocolViolation(
                    ProtocolRule.INFLIGHT_AT_EXIT,
                    f"barrier `{bar.name}`[{i}] {what} before any role waited for phase "
                    f"{b.copy_phase - 1}, which completes the copy into stage {c.slot} of "
                    f"`{c.ring.name}`: the copy may still be in flight", c.site)

    def finish(self) -> None:
        """What must hold when every role has returned."""
        for role, copies in self.outstanding.items():
            if copies:
                c = copies[0]
                raise ProtocolViolation(
                    ProtocolRule.INFLIGHT_AT_EXIT,
                    f"role `{role}` ends with a copy into stage {c.slot} of `{c.ring.name}` "
                    f"that never arrived on barrier `{c.barrier.name}`[{c.bslot}]", c.site)
        for ring in self.rings:
            for i, s in enumerate(ring.slots):
                if s.in_flight is not None:
                    raise ProtocolViolation(
                        ProtocolRule.INFLIGHT_AT_EXIT,
                        f"the program ends with a copy into stage {i} of `{ring.name}` in "
                        "flight", s.in_flight.site)
        for store in self.stores:
            if not store.done:
                raise ProtocolViolation(
                    ProtocolRule.INFLIGHT_AT_EXIT,
                    f"the program ends before waiting for a bulk store from stage "
                    f"{store.slot} of `{store.ring.name}`", store.site)
        for bar in self.barriers:
            if bar.valid:
                self._check_barrier_done(bar, "is left at the program's end")
