"""The CPU interpreter: runs a kernel's IR with numpy, one program instance at a time.

It is the definition of what a kernel means (each op's ``reference``), the
backend when no GPU is present, and a debugging mode (``TILEKIT_INTERPRET=1``).
Every memory access is checked; a fault is reported at the user's source
line with the program id and the offending index.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilekit.errors import ExecutionError, MemoryAccessError
from tilekit.ir.async_protocol import ProtocolState, ProtocolViolation, WouldBlock
from tilekit.ir.core import Block, Function, Operation, Value
from tilekit.ir.ops.control import ZeroStepLoop
from tilekit.ir.ops.elementwise import IntegerDivisionByZero
from tilekit.ir.ops.memory import DeviceAssertionError
from tilekit.rt.memory import OutOfBounds

_HINTS_OOB = [
    "mask the access, e.g. tk.load(X, offs, mask=offs < n) — or use X.tile(shape, index), "
    "which guards edge tiles itself",
    "run with a smaller grid or print offsets with tk.device_print to see where it starts",
]


class ExecContext:
    """The state of one program instance: its id, the values computed so far, and its
    pipelines' shared memory and barriers (``protocol``). ``role`` names the warp role
    this context runs (``"cta"`` outside ``warp_roles``)."""

    def __init__(self, program_id: tuple[int, int, int], grid: tuple[int, int, int],
                 out: Any = None) -> None:
        self.program_id = program_id
        self.grid = grid
        self.env: dict[int, Any] = {}
        self.out = out if out is not None else sys.stdout
        self.role = "cta"
        self.roles: _RoleScheduler | None = None
        self._protocol: ProtocolState | None = None

    @property
    def protocol(self) -> ProtocolState:
        if self._protocol is None:
            self._protocol = ProtocolState()
        return self._protocol

    def run_block(self, block: Block, args: Sequence[Any]) -> list[Any]:
        env = self.env
        for arg, value in zip(block.args, args):
            env[id(arg)] = value
        for op in block.ops:
            operands = [env[id(v)] for v in op.operands]
            if op.opdef.is_terminator:
                return operands
            results = self.run_op(op, operands)
            for result, value in zip(op.results, results):
                env[id(result)] = value
        return []

    def run_op(self, op: Operation, operands: list[Any]) -> list[Any]:
        """One op's reference, its faults reported at the user's line; a wait that cannot
        go on yet hands over to the other warp role (or is a deadlock when there is none)."""
        while True:
            try:
                return op.opdef.reference(self, op, operands)
            except WouldBlock as exc:
                if self.roles is None:
                    raise ExecutionError(
                        f"deadlock in program {self.program_id}: `{op.name}` waits forever on "
                        f"{exc.what}", op.loc, _HINTS_DEADLOCK) from None
                self.roles.block(self, op, exc)
            except OutOfBounds as exc:
                raise MemoryAccessError(
                    f"`{op.name}` out of bounds in program {self.program_id}: {exc} "
                    f"(at position {exc.position} of the tile)", op.loc, _HINTS_OOB) from None
            except IntegerDivisionByZero as exc:
                raise ExecutionError(f"{exc} in program {self.program_id}", op.loc,
                                     ["guard the divisor with tk.where(d != 0, d, 1)"]) from None
            except ZeroStepLoop as exc:
                raise ExecutionError(f"{exc} in program {self.program_id}", op.loc) from None
            except DeviceAssertionError as exc:
                raise ExecutionError(f"{exc} (program {self.program_id})", op.loc) from None
            except ProtocolViolation as exc:
                raise ExecutionError(
                    f"pipeline protocol broken in program {self.program_id} "
                    f"({exc.rule.name}: {exc.rule.value}): {exc}", op.loc) from None

    def print(self, prefix: str, values: Sequence[np.ndarray]) -> None:
        text = " ".join(np.array2string(np.asarray(v), threshold=64) for v in values)
        self.out.write(f"pid {self.program_id} {prefix}{text}\n")

    # --- what the asynchronous ops ask of the context -------------------------------------

    def cta_barrier(self) -> None:
        if self.roles is not None:
            from tilekit.ir.async_protocol import ProtocolRule

            raise ProtocolViolation(ProtocolRule.BARRIER_IN_ROLE,
                                    f"role `{self.role}` executes a CTA barrier")
        self.protocol.cta_barrier([self.role])

    def trip_count(self, op: Operation, n: Any) -> Any:
        return n

    def child(self, role: str) -> ExecContext:
        """A context for one warp role: same values, same shared memory and barriers."""
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c.role = role
        return c

    def run_roles(self, op: Operation, args: Sequence[Any]) -> list[Any]:
        """Run ``warp_roles``' producer and consumer side by side (one at a time, switching
        when one waits); the consumer's yields are the results."""
        producer, consumer = (r.block for r in op.regions)
        scheduler = _RoleScheduler(op)
        results = scheduler.run(self, [("producer", producer, []),
                                       ("consumer", consumer, list(args))])
        return results[1]


_HINTS_DEADLOCK = [
    "a wait's phase never completes: check the stage count and the trip count, or run "
    "the protocol checker (TILEKIT_DUMP=sched shows the schedule)",
]


class _Deadlock(Exception):
    pass


class _RoleScheduler:
    """Warp roles as threads that take turns: exactly one runs at a time, and it runs until
    it finishes or waits on a phase that has not completed. Deterministic, and a deadlock
    (every unfinished role waiting, nothing changed since) is found, not timed out."""

    def __init__(self, op: Operation) -> None:
        self.op = op
        self.cv = threading.Condition()
        self.turn: str | None = None
        self.version = 0
        self.state: dict[str, str] = {}  # role -> ready | blocked | done
        self.blocked_at: dict[str, tuple[int, Operation, str]] = {}
        self.results: dict[str, list[Any]] = {}
        self.error: BaseException | None = None
        self.deadlock = False

    def _bump(self) -> None:
        self.version += 1

    def run(self, parent: ExecContext, roles: list[tuple[str, Block, list[Any]]]) -> list:
        protocol = parent.protocol
        previous = protocol.on_change
        protocol.on_change = self._bump
        threads = []
        for name, block, args in roles:
            ctx = parent.child(name)
            ctx.roles = self
            self.state[name] = "ready"
            t = threading.Thread(target=self._main, args=(ctx, block, args), daemon=True)
            threads.append(t)
        try:
            with self.cv:
                for t in threads:
                    t.start()
                order = [name for name, _, _ in roles]
                while True:
                    runnable = [r for r in order if self.state[r] == "ready" or (
                        self.state[r] == "blocked" and self.blocked_at[r][0] != self.version)]
                    if self.error is not None or not runnable:
                        break
                    for r in runnable:
                        self.turn = r
                        self.cv.notify_all()
                        while self.turn == r and self.error is None:
                            self.cv.wait()
                        if self.error is not None:
                            break
                if self.error is None and any(v != "done" for v in self.state.values()):
                    self.deadlock = True
                    self.turn = None
                    self.cv.notify_all()
            for t in threads:
                t.join()
        finally:
            protocol.on_change = previous
        if self.error is not None:
            raise self.error
        if self.deadlock:
            waits = "; ".join(f"role `{r}` at `{op.name}` ({op.loc.short if op.loc else '?'}) "
                              f"on {what}" for r, (_, op, what) in self.blocked_at.items()
                              if self.state[r] == "blocked")
            raise ExecutionError(f"deadlock in program {parent.program_id}: {waits}",
                                 self.op.loc, _HINTS_DEADLOCK)
        return [self.results[name] for name, _, _ in roles]

    def _main(self, ctx: ExecContext, block: Block, args: list[Any]) -> None:
        with self.cv:
            while self.turn != ctx.role and not self.deadlock and self.error is None:
                self.cv.wait()
            if self.deadlock or self.error is not None:
                return
            try:
                self.results[ctx.role] = ctx.run_block(block, args)
                self.state[ctx.role] = "done"
            except _Deadlock:
                return
            except BaseException as exc:  # noqa: BLE001  (re-raised by run())
                self.error = exc
            self.turn = None
            self.cv.notify_all()

    def block(self, ctx: ExecContext, op: Operation, exc: WouldBlock) -> None:
        """Called (holding the lock) by a role whose wait cannot go on: hand over the turn
        and sleep until it comes back."""
        self.state[ctx.role] = "blocked"
        self.blocked_at[ctx.role] = (self.version, op, exc.what)
        self.turn = None
        self.cv.notify_all()
        while self.turn != ctx.role:
            if self.deadlock or self.error is not None:
                raise _Deadlock
            self.cv.wait()
        self.state[ctx.role] = "ready"


def normalize_grid(grid: Sequence[int]) -> tuple[int, int, int]:
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    return g  # type: ignore[return-value]


def run(function: Function, grid: Sequence[int], args: Mapping[Value, Any]) -> None:
    """Run every program instance of ``grid``; ``args`` binds the function's arguments
    (tensor bindings and 0-d numpy scalars)."""
    g = normalize_grid(grid)
    inputs = [args[a] for a in function.args]
    for z, y, x in itertools.product(range(g[2]), range(g[1]), range(g[0])):
        ctx = ExecContext((x, y, z), g)
        ctx.run_block(function.entry, inputs)
        if ctx._protocol is not None:
            try:
                ctx._protocol.finish()
            except ProtocolViolation as exc:
                raise ExecutionError(
                    f"pipeline protocol broken in program {ctx.program_id} ({exc.rule.name}: "
                    f"{exc.rule.value}): {exc}", function.loc if hasattr(function, "loc")
                    else None) from None
