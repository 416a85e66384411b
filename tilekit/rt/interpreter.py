"""The CPU interpreter: runs a kernel's IR with numpy, one program instance at a time.

It is the definition of what a kernel means (each op's ``reference``), the
backend when no GPU is present, and a debugging mode (``TILEKIT_INTERPRET=1``).
Every memory access is checked; a fault is reported at the user's source
line with the program id and the offending index.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tilekit.errors import ExecutionError, MemoryAccessError, SourceLoc
from tilekit.ir.async_protocol import ProtocolState, ProtocolViolation, WouldBlock
from tilekit.ir.core import Block, Function, Operation, Value
from tilekit.ir.ops.control import ZeroStepLoop
from tilekit.ir.ops.elementwise import IntegerDivisionByZero
from tilekit.ir.ops.memory import DeviceAssertionError
from tilekit.ir.roles import RoleDeadlock, RoleScheduler
from tilekit.rt.memory import OutOfBounds


def out_of_bounds(op_name: str, program_id: tuple[int, int, int], exc: OutOfBounds,
                  loc: SourceLoc | None) -> MemoryAccessError:
    """The error of an access outside its tensor, as the interpreter words it (the GPU's
    check mode, ``tilekit.rt.check_mode``, words its faults the same way)."""
    return MemoryAccessError(f"`{op_name}` out of bounds in program {program_id}: {exc} "
                             f"(at position {exc.position} of the tile)", loc, exc.hints)


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
        self.roles: RoleScheduler | None = None
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
                raise out_of_bounds(op.name, self.program_id, exc, op.loc) from None
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
        try:
            results = RoleScheduler(op).run(self, [("producer", producer, []),
                                                   ("consumer", consumer, list(args))])
        except RoleDeadlock as exc:
            raise ExecutionError(f"deadlock in program {self.program_id}: {exc}", op.loc,
                                 _HINTS_DEADLOCK) from None
        return results[1]


_HINTS_DEADLOCK = [
    "a wait's phase never completes: check the stage count and the trip count, or run "
    "the protocol checker (TILEKIT_DUMP=sched shows the schedule)",
]


def normalize_grid(grid: Sequence[int]) -> tuple[int, int, int]:
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    return g  # type: ignore[return-value]


def program_ids(grid: tuple[int, int, int]) -> Iterator[tuple[int, int, int]]:
    """The program ids of ``grid`` in launch order (x fastest), generated one at a time:
    memory stays flat in the grid's size (``itertools.product`` would first make a tuple
    of each range, 2**31 ints for the largest grid)."""
    gx, gy, gz = grid
    for z in range(gz):
        for y in range(gy):
            for x in range(gx):
                yield x, y, z


def run(function: Function, grid: Sequence[int], args: Mapping[Value, Any]) -> None:
    """Run every program instance of ``grid``; ``args`` binds the function's arguments
    (tensor bindings and 0-d numpy scalars). Each program's state is dropped when it
    ends, so a long grid runs in constant memory (and stops at Ctrl-C)."""
    g = normalize_grid(grid)
    inputs = [args[a] for a in function.args]
    for pid in program_ids(g):
        ctx = ExecContext(pid, g)
        ctx.run_block(function.entry, inputs)
        if ctx._protocol is not None:
            try:
                ctx._protocol.finish()
            except ProtocolViolation as exc:
                raise ExecutionError(
                    f"pipeline protocol broken in program {ctx.program_id} ({exc.rule.name}: "
                    f"{exc.rule.value}): {exc}", function.loc if hasattr(function, "loc")
                    else None) from None
