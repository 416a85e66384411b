"""The protocol checker: every scheduled pipeline's barrier protocol, run without data on
the trip counts that expose off-by-one schedules, before any code is emitted.

``check_protocol`` runs each function that holds asynchronous ops abstractly. Integer and
boolean scalars are computed through their ops' references when every operand is known
(a loop's index arithmetic for all its iterations at once); everything that is data (tiles,
loads, tensor sizes and strides, program ids, runtime arguments) is ``UNKNOWN``, and the
ops that only make data for the user's code are skipped. A ``for`` with known bounds
iterates; one with unknown bounds (a user's outer loop), or with more than 1001 iterations,
runs its body twice; a ``when`` with an unknown condition runs its body; ``trip_count``
answers the count under test; the asynchronous ops run through their references against a
fresh ``ProtocolState`` (tensors are data-free placeholders, which the references skip), and
warp roles run side by side (``tilekit.ir.roles``), so a wait that can never return is
found, not hung on.

The trip counts are 0, 1, S-1, S, S+1 and 1000 for a pipeline of S stages. The pipelines of
a function run the short counts side by side, then each runs 1000 times while the others
run their S+1 (nested pipelines would multiply long runs). What is checked is what
``ProtocolState`` checks, plus the end of the program (``finish``). Every violation becomes
one ``ScheduleError`` at the offending op's source line, which is the user's pipeline line:
the rule's name and sentence, the trip counts it shows up at, the detail, and a hint; all
are collected, then raised once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilekit.diagnostic import Diagnostic
from tilekit.errors import ScheduleError, SourceLoc
from tilekit.ir.async_protocol import ProtocolRule, ProtocolState, ProtocolViolation, WouldBlock
from tilekit.ir.core import Block, BlockArgument, Function, Module, Operation, OpResult, Value
from tilekit.ir.ops.elementwise import PER_ELEMENT
from tilekit.ir.roles import RoleDeadlock, RoleScheduler
from tilekit.ir.types import TensorType, TileType

#: The ops of the scheduled form (``docs/pipelines.md``); a function with any is checked.
ASYNC_OPS = frozenset({
    "smem_alloc", "mbarrier_alloc", "mbarrier_inval", "mbarrier_arrive", "mbarrier_expect_tx",
    "mbarrier_wait", "fence_mbarrier_init", "fence_proxy_async", "cta_barrier", "copy_g2s",
    "smem_read", "smem_write", "copy_s2g", "store_wait", "store_drain", "trip_count",
    "warp_roles",
})

#: Pure ops whose values are data all the same (where this program runs).
DATA_OPS = frozenset({"program_id", "num_programs"})


#: The long run: enough rounds of every ring for its parities to wrap many times.
LONG_RUN = 1000

HINTS = {
    ProtocolRule.READ_BEFORE_COMPLETE:
        "wait on the stage's `full` barrier with the round's parity, (i / S) & 1, before "
        "reading the stage",
    ProtocolRule.OVERWRITE_BEFORE_RELEASE:
        "refill a stage only after waiting on its `empty` barrier, which every role reading "
        "the stage arrives on after its last read",
    ProtocolRule.ARRIVAL_OVERFLOW:
        "a barrier's `arrivals` must count the arrive operations of one phase (one "
        "expect_tx for the TMA streams, one arrive for the others), and a role arrives for a "
        "phase only after a wait that shows it the phase before completed",
    ProtocolRule.TX_MISMATCH:
        "mbarrier_expect_tx must announce exactly the bytes of the TMA copies completing on "
        "that phase (the sum of their boxes)",
    ProtocolRule.PARITY:
        "round r = j / S of a ring of S stages waits with parity r & 1 for `full` and "
        "(r & 1) ^ 1 for `empty` (a fresh barrier passes parity 1 at once)",
    ProtocolRule.DEADLOCK:
        "every wait needs a phase that completes: check the arrivals each barrier expects, "
        "the parities, and that each produce has its expect_tx or arrive and each read its "
        "arrive on `empty`",
    ProtocolRule.MISSING_FENCE:
        "put fence_mbarrier_init after initializing barriers that TMA completes on, and "
        "fence_proxy_async after shared-memory stores that a TMA store or copy then touches, "
        "in the writing threads and before the synchronization (cta_barrier) that follows",
    ProtocolRule.INIT_NOT_VISIBLE:
        "initialize the barriers, fence, then cta_barrier before any role uses them; "
        "invalidate them only after a closing cta_barrier",
    ProtocolRule.SLOT_RANGE:
        "a pipeline of S stages needs rings of S stages and S barriers (stage j % S)",
    ProtocolRule.INFLIGHT_AT_EXIT:
        "every copy must be waited for, every bulk store waited with store_wait and every "
        "phase finished before the program ends or invalidates the barriers",
    ProtocolRule.BARRIER_IN_ROLE:
        "synchronize warp roles with mbarriers; keep cta_barrier outside `warp_roles`",
}

_GENERAL_HINT = ("the schedule comes from tilekit.sched; TILEKIT_DUMP=sched prints it, with "
                 "the op the error names")


def trip_counts(stages: int) -> tuple[int, ...]:
    """The counts a pipeline of ``stages`` stages is checked at, without duplicates."""
    out: list[int] = []
    for n in (0, 1, stages - 1, stages, stages + 1, LONG_RUN):
        if n >= 0 and n not in out:
            out.append(n)
    return tuple(out)


# --- abstract values -------------------------------------------------------------------------

class UnknownOperand(Exception):
    """An op needed the value of something that is data (the checker cannot follow it)."""


class _Unknown:
    """A value that depends on data. Using it as a number raises ``UnknownOperand``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __int__(self) -> int:
        raise UnknownOperand

    __index__ = __int__

    def __bool__(self) -> bool:
        raise UnknownOperand


UNKNOWN: Any = _Unknown()


class DataFreeTensor:
    """A tensor argument without data: no ``gather``/``scatter``, so the async ops'
    references move no data for it."""

    __slots__ = ("name",)

    def __init__(self, name: str | None) -> None:
        self.name = name


def _join(a: Any, b: Any) -> Any:
    """One value for two control paths: itself when both agree, else UNKNOWN."""
    if a is b or (type(a) is type(b) and type(a) in (int, bool) and a == b):
        return a
    return UNKNOWN


# --- what each op is, decided once per function ------------------------------------------------

_TERM, _SCALAR, _DATA, _ASYNC, _FOR, _WHEN, _LOOP, _CONST = range(8)


def _is_int_scalar(t: Any) -> bool:
    return isinstance(t, TileType) and t.is_scalar and (t.dtype.is_int or t.dtype.is_bool)


class _Plan:
    """A function's ops classified once (how the abstract run treats each), the memo of
    scalar results, and the trip counts to run."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.kind: dict[int, int] = {}
        self.has_async: dict[int, bool] = {}  # region ops: any async op inside
        self.memo: dict[tuple, list[Any]] = {}
        self.blocks: dict[int, tuple[list[int], list[tuple]]] = {}
        self.stages: dict[int, set[int]] = {}  # pipeline id -> its stage counts
        self.trip_ops: list[Operation] = []
        self.any_async = self._classify_block(fn.entry)
        self.relevant = self._relevant(fn) if self.any_async else set()

    def _classify_block(self, block: Block) -> bool:
        found = False
        for op in block.ops:
            found |= self._classify(op)
        return found

    def _classify(self, op: Operation) -> bool:
        name = op.name
        inner = False
        for region in op.regions:
            for block in region.blocks:
                inner |= self._classify_block(block)
        self.has_async[id(op)] = inner
        if op.opdef.is_terminator:
            self.kind[id(op)] = _TERM
        elif name in ASYNC_OPS:
            self.kind[id(op)] = _ASYNC
            if name == "trip_count":
                self._trip_count(op)
            return True
        elif name == "for":
            self.kind[id(op)] = _FOR
        elif name == "when":
            self.kind[id(op)] = _WHEN
        elif op.regions:
            self.kind[id(op)] = _LOOP  # an unscheduled pipeline, or any other region op
        elif (op.opdef.is_pure and op.results and name not in DATA_OPS
              and all(_is_int_scalar(r.type) for r in op.results)
              and all(_is_int_scalar(v.type) for v in op.operands)):
            self.kind[id(op)] = _SCALAR
        else:
            self.kind[id(op)] = _DATA
        return inner

    @staticmethod
    def _relevant(fn: Function) -> set[int]:
        """The values the protocol depends on: operands of the async ops, loop bounds and
        branch conditions, and what they are computed from (through carried values too).
        The run skips the ops that make none of them (the user's tile arithmetic)."""
        relevant: set[int] = set()
        work: list[Value] = []

        def need(v: Value) -> None:
            if id(v) not in relevant:
                relevant.add(id(v))
                work.append(v)

        def carried(op: Operation, k: int) -> None:
            """The k-th carried value of a region op: its init and every region's yield."""
            inits = op.variadic("inits")
            if k < len(inits):
                need(inits[k])
            for region in op.regions:
                term = region.block.terminator
                if term is not None and k < len(term.operands):
                    need(term.operands[k])

        for op in fn.walk():
            if op.name in ASYNC_OPS:
                for v in op.operands:
                    need(v)
            elif op.name == "for":
                for slot in ("lo", "hi", "step"):
                    need(op.operand(slot))
            elif op.name == "when":
                need(op.operand("cond"))
        while work:
            v = work.pop()
            if isinstance(v, OpResult):
                if v.owner.regions:
                    carried(v.owner, v.index)
                else:
                    for operand in v.owner.operands:
                        need(operand)
            elif isinstance(v, BlockArgument) and v.block.parent is not None:
                owner = v.block.parent.parent  # None: a function argument
                if owner is not None:
                    k = v.index - (len(v.block.args) - len(owner.variadic("inits")))
                    if k >= 0:
                        carried(owner, k)
        return relevant

    def code(self, block: Block) -> tuple[list[int], list[tuple]]:
        """The block as the run executes it: its argument keys, and per op its kind, the
        op, its operand and result keys, and its value when it is an integer constant."""
        code = self.blocks.get(id(block))
        if code is None:
            steps = []
            for op in block.ops:
                kind, const = self.kind[id(op)], None
                if kind in (_SCALAR, _DATA) and not any(id(r) in self.relevant
                                                         for r in op.results):
                    continue  # nothing the protocol depends on
                if kind == _SCALAR and op.name == "constant":
                    kind = _CONST
                    (const,) = [r.item() for r in op.opdef.reference(None, op, [])]
                steps.append((kind, op, [id(v) for v in op.operands],
                              [id(r) for r in op.results], const))
            code = self.blocks[id(block)] = ([id(a) for a in block.args], steps)
        return code

    def _trip_count(self, op: Operation) -> None:
        key, stages = op.attrs.get("pipeline"), op.attrs.get("stages")
        if not isinstance(stages, int) or stages < 1 or key is None:
            raise ScheduleError(
                f"`trip_count` needs the attributes `pipeline` and `stages` (a positive int), "
                f"got {dict(op.attrs)}", op.loc,
                ["the schedule solver sets them; a hand-built schedule must too"])
        self.stages.setdefault(key, set()).add(stages)
        self.trip_ops.append(op)

    def runs(self) -> list[dict[Any, int]]:
        """Each run's trip count per pipeline: the short counts side by side (a pipeline
        with fewer repeats its last), then each pipeline at the long run while the others
        take their last short count (nested pipelines would multiply long runs)."""
        if not self.stages:
            return [{}]
        short = {}
        for key, stages in self.stages.items():
            counts: list[int] = []
            for s in sorted(stages):
                counts += [n for n in trip_counts(s) if n != LONG_RUN and n not in counts]
            short[key] = sorted(counts)
        length = max(len(c) for c in short.values())
        runs = [{k: c[min(r, len(c) - 1)] for k, c in short.items()} for r in range(length)]
        for key in short:
            runs.append({k: LONG_RUN if k == key else c[-1] for k, c in short.items()})
        return runs


# --- one abstract run ---------------------------------------------------------------------------

class _Found(Exception):
    """What stopped a run: a violation (or an op the checker cannot follow) at an op."""

    def __init__(self, op: Operation | None, rule: ProtocolRule | None, detail: str) -> None:
        super().__init__(detail)
        self.op = op
        self.rule = rule
        self.detail = detail


class _Run:
    """The context the ops' references see (as the interpreter's ``ExecContext``): the
    protocol, the running role, the trip counts under test."""

    def __init__(self, plan: _Plan, counts: dict[Any, int]) -> None:
        self.plan = plan
        self.counts = counts
        self.env: dict[int, Any] = {}
        self.role = "cta"
        self.roles: RoleScheduler | None = None
        self.protocol = ProtocolState()
        self.program_id = ("?", "?", "?")
        self.lanes: dict[int, tuple[int, list[Any]]] = {}  # op -> (its loop, per iteration)
        self.iteration: dict[int, int] = {}  # loop -> the iteration running
        self.vectorized: dict[int, list[int]] = {}  # loop -> its ops in ``lanes``

    # --- what the references ask of the context --------------------------------------------

    def cta_barrier(self) -> None:
        if self.roles is not None:
            raise ProtocolViolation(ProtocolRule.BARRIER_IN_ROLE,
                                    f"role `{self.role}` executes a CTA barrier")
        self.protocol.cta_barrier([self.role])

    def trip_count(self, op: Operation, n: Any) -> int:
        return self.counts[op.attrs["pipeline"]]

    def child(self, role: str) -> _Run:
        c = object.__new__(_Run)
        c.__dict__.update(self.__dict__)
        c.role = role
        return c

    def run_roles(self, op: Operation, args: Sequence[Any]) -> list[Any]:
        producer, consumer = (r.block for r in op.regions)
        try:
            results = RoleScheduler(op).run(self, [("producer", producer, []),
                                                   ("consumer", consumer, list(args))])
        except RoleDeadlock as exc:
            v = self.protocol.deadlock([(role, why) for role, _, why in exc.blocked])
            raise _Found(exc.blocked[0][1], v.rule, str(v)) from None
        return results[1]

    # --- running blocks ----------------------------------------------------------------------

    def run_block(self, block: Block, args: Sequence[Any]) -> list[Any]:
        env = self.env
        arg_ids, steps = self.plan.code(block)
        get = env.get
        for key, value in zip(arg_ids, args):
            env[key] = value
        for kind, op, ins, outs, const in steps:
            if kind == _CONST:
                env[outs[0]] = const
                continue
            if kind == _SCALAR:
                lane = self.lanes.get(id(op))
                if lane is not None:
                    env[outs[0]] = lane[1][self.iteration[lane[0]]]
                    continue
                results = self._scalar(op, [get(k, UNKNOWN) for k in ins])
            elif kind == _ASYNC:
                results = self._async(op, [get(k, UNKNOWN) for k in ins])
            elif kind == _DATA:
                for key in outs:
                    env[key] = UNKNOWN
                continue
            elif kind == _TERM:
                return [get(k, UNKNOWN) for k in ins]
            elif kind == _FOR:
                results = self._for(op, [get(k, UNKNOWN) for k in ins])
            elif kind == _WHEN:
                results = self._when(op, [get(k, UNKNOWN) for k in ins])
            else:
                results = self._loop(op, [get(k, UNKNOWN) for k in ins])
            for key, value in zip(outs, results):
                env[key] = value
        return []

    def _scalar(self, op: Operation, values: list[Any]) -> list[Any]:
        if any(v is UNKNOWN for v in values):
            return [UNKNOWN] * len(op.results)
        key = (id(op), *values)
        memo = self.plan.memo
        out = memo.get(key)
        if out is None:
            arrays = [np.asarray(v, dtype=o.type.dtype.np) for v, o in zip(values, op.operands)]
            try:
                out = [r.item() for r in op.opdef.reference(self, op, arrays)]
            except ArithmeticError:  # division by zero: the run time reports it
                out = [UNKNOWN] * len(op.results)
            memo[key] = out
        return out

    def _async(self, op: Operation, args: list[Any]) -> list[Any]:
        protocol = self.protocol
        protocol.site = op
        while True:
            try:
                results = op.opdef.reference(self, op, args)
                break
            except WouldBlock as exc:
                if self.roles is None:
                    v = protocol.deadlock([(self.role, exc)])
                    raise _Found(op, v.rule, str(v)) from None
                self.roles.block(self, op, exc)
            except ProtocolViolation as exc:
                raise _Found(op, exc.rule, str(exc)) from None
            except UnknownOperand:
                raise _Found(op, None, f"`{op.name}` takes an operand that depends on runtime "
                                       "data; the checker cannot follow the protocol") from None
        if op.name == "smem_read":
            return [UNKNOWN]
        return list(results)

    def _for(self, op: Operation, args: list[Any]) -> list[Any]:
        lo, hi, step, *carried = args
        body = op.regions[0].block
        if not self.plan.has_async[id(op)]:
            return _untouched(body, carried)
        iterations = range(lo, hi, step) if not any(
            v is UNKNOWN for v in (lo, hi, step)) and step != 0 else None
        if iterations is not None and len(iterations) <= LONG_RUN + 1:
            for stale in self.vectorized.pop(id(op), ()):  # from an earlier entry
                del self.lanes[stale]
            if len(iterations) > 8:
                self._vectorize(op, body, iterations)
            key = id(op)
            for k, i in enumerate(iterations):
                self.iteration[key] = k
                carried = self.run_block(body, [i, *carried])
            return carried
        return self._twice(body, [UNKNOWN], carried)

    def _vectorize(self, loop: Operation, body: Block, iterations: range) -> None:
        """Compute the loop's index arithmetic (the elementwise scalar ops of its body, and
        of the branches in it, that depend on the index and on known values) for every
        iteration at once, through the same references."""
        inside: set[int] = set()
        candidates: list[Operation] = []
        vectors: dict[int, np.ndarray] = {}

        def scan(block: Block, top: bool) -> None:
            inside.update(id(a) for a in block.args)
            for op in block.ops:
                if op.name == "constant" and self.plan.kind[id(op)] == _SCALAR:
                    vectors[id(op.result)] = op.opdef.reference(None, op, [])[0]
                    continue  # the same on every iteration
                inside.update(id(r) for r in op.results)
                if top and self.plan.kind[id(op)] == _SCALAR and op.name in PER_ELEMENT:
                    candidates.append(op)
                for region in op.regions:
                    for inner in region.blocks:
                        scan(inner, top and op.name == "when")

        scan(body, True)
        iv = body.args[0]
        vectors[id(iv)] = np.arange(iterations.start, iterations.stop, iterations.step,
                                    dtype=iv.type.dtype.np)
        varying = {id(iv)}
        env = self.env
        for op in candidates:
            arrays: list[Any] = []
            for v in op.operands:
                arrays.append(self._lane_operand(v, vectors, inside, env))
            if any(a is None for a in arrays) or not any(id(v) in varying for v in op.operands):
                continue
            try:
                (out,) = op.opdef.reference(self, op, arrays)
            except ArithmeticError:
                continue
            out = np.broadcast_to(out, (len(iterations),))
            vectors[id(op.result)] = out
            varying.add(id(op.result))
            self.lanes[id(op)] = (id(loop), out.tolist())
            self.vectorized.setdefault(id(loop), []).append(id(op))

    @staticmethod
    def _lane_operand(v: Value, vectors: dict[int, np.ndarray], inside: set[int],
                      env: dict[int, Any]) -> np.ndarray | None:
        """An operand for ``_vectorize``: the per-iteration values, or the known value
        from outside the loop; None when neither."""
        got = vectors.get(id(v))
        if got is not None:
            return got
        if id(v) in inside:
            return None
        value = env.get(id(v), UNKNOWN)
        if value is UNKNOWN:
            return None
        return np.asarray(value, dtype=v.type.dtype.np)

    def _twice(self, body: Block, head: list[Any], carried: list[Any]) -> list[Any]:
        """A loop that runs an unknown number of times: its body twice, the second time
        from what either path gives."""
        first = self.run_block(body, [*head, *carried])
        mid = [_join(a, b) for a, b in zip(carried, first)]
        second = self.run_block(body, [*head, *mid])
        return [_join(a, b) for a, b in zip(mid, second)]

    def _when(self, op: Operation, args: list[Any]) -> list[Any]:
        cond, *inits = args
        body = op.regions[0].block
        if cond is UNKNOWN:
            return [_join(a, b) for a, b in zip(inits, self.run_block(body, []))]
        return self.run_block(body, []) if cond else inits

    def _loop(self, op: Operation, args: list[Any]) -> list[Any]:
        """A region op that is neither a loop nor a branch of the scheduled form (a
        pipeline not scheduled yet): its body twice, every block argument unknown but the
        values it carries."""
        body = op.regions[0].block
        n_carried = len(op.results)
        carried = list(args[len(args) - n_carried:]) if n_carried else []
        head = [UNKNOWN] * (len(body.args) - n_carried)
        if not self.plan.has_async[id(op)]:
            return _untouched(body, carried)
        return self._twice(body, head, carried)


def _untouched(body: Block, carried: list[Any]) -> list[Any]:
    """The results of a loop with no async op inside, not run: the carried values it
    passes through unchanged, UNKNOWN for the rest."""
    term = body.terminator
    n = len(carried)
    out = []
    for k, init in enumerate(carried):
        y = term.operands[k] if term is not None and k < len(term.operands) else None
        out.append(init if y is body.args[len(body.args) - n + k] else UNKNOWN)
    return out


def _run(plan: _Plan, counts: dict[Any, int]) -> _Found | None:
    run = _Run(plan, counts)
    fn = plan.fn
    args = [DataFreeTensor(a.name_hint) if isinstance(a.type, TensorType) else UNKNOWN
            for a in fn.args]
    try:
        run.run_block(fn.entry, args)
        run.protocol.finish()
    except _Found as found:
        return found
    except ProtocolViolation as exc:  # from finish()
        site = exc.site if isinstance(exc.site, Operation) else None
        return _Found(site or (plan.trip_ops[0] if plan.trip_ops else None), exc.rule,
                      str(exc))
    return None


# --- findings and errors ------------------------------------------------------------------------

@dataclass
class Finding:
    """One violation: its rule (None: an op the checker cannot follow), the op, the first
    detail seen, and every run it showed up in."""

    rule: ProtocolRule | None
    op: Operation | None
    detail: str
    runs: list[dict[Any, int]] = field(default_factory=list)

    @property
    def loc(self) -> SourceLoc | None:
        return self.op.loc if self.op is not None else None

    def message(self) -> str:
        first, *rest = self.runs
        where = _counts_text(first)
        if rest:
            where += f" (also at {', '.join(_counts_text(r, short=True) for r in rest)})"
        what = f"`{self.op.name}`: " if self.op is not None else ""
        if self.rule is None:
            return f"pipeline protocol not checkable at {where}: {what}{self.detail}"
        return (f"pipeline protocol broken, {self.rule.name} ({self.rule.value}), at "
                f"{where}: {what}{self.detail}")

    def diagnostic(self) -> Diagnostic:
        hints = [HINTS[self.rule]] if self.rule is not None else [
            "slots, parities and trip counts of a schedule must be integer arithmetic on the "
            "loop index and the trip count"]
        return Diagnostic(self.message(), self.loc, (*hints, _GENERAL_HINT))


def _counts_text(counts: dict[Any, int], short: bool = False) -> str:
    if not counts:
        return "the only run" if not short else "-"
    if len(counts) == 1:
        (n,) = counts.values()
        return str(n) if short else f"trip count {n}"
    text = ", ".join(f"{n} (pipeline {k})" for k, n in counts.items())
    return text if short else f"trip counts {text}"


def check_function(fn: Function) -> list[Finding]:
    """Every violation of ``fn``'s protocol over the trip counts (none when it has no
    asynchronous ops), one per rule and op, in the order found."""
    plan = _Plan(fn)
    if not plan.any_async:
        return []
    findings: dict[tuple, Finding] = {}
    for counts in plan.runs():
        found = _run(plan, counts)
        if found is None:
            continue
        key = (found.rule, id(found.op))
        if key not in findings:
            findings[key] = Finding(found.rule, found.op, found.detail)
        findings[key].runs.append(counts)
    return list(findings.values())


def check_protocol(module: Module) -> None:
    """Raise one ``ScheduleError`` listing every protocol violation of the module's
    scheduled pipelines (each at the op's line); return when there is none."""
    findings = [f for fn in module.functions for f in check_function(fn)]
    if not findings:
        return
    first, *rest = (f.diagnostic() for f in findings)
    raise ScheduleError(first.message, first.loc, first.hints, rest)
