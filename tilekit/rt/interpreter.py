"""The CPU interpreter: runs a kernel's IR with numpy, one program instance at a time.

It is the definition of what a kernel means (each op's ``reference``), the
backend when no GPU is present, and a debugging mode (``TILEKIT_INTERPRET=1``).
Every memory access is checked; a fault is reported at the user's source
line with the program id and the offending index.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilekit.errors import ExecutionError, MemoryAccessError
from tilekit.ir.core import Block, Function, Value
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
    """The state of one program instance: its id and the values computed so far."""

    def __init__(self, program_id: tuple[int, int, int], grid: tuple[int, int, int],
                 out: Any = None) -> None:
        self.program_id = program_id
        self.grid = grid
        self.env: dict[int, Any] = {}
        self.out = out if out is not None else sys.stdout

    def run_block(self, block: Block, args: Sequence[Any]) -> list[Any]:
        env = self.env
        for arg, value in zip(block.args, args):
            env[id(arg)] = value
        for op in block.ops:
            operands = [env[id(v)] for v in op.operands]
            if op.opdef.is_terminator:
                return operands
            try:
                results = op.opdef.reference(self, op, operands)
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
            for result, value in zip(op.results, results):
                env[id(result)] = value
        return []

    def print(self, prefix: str, values: Sequence[np.ndarray]) -> None:
        text = " ".join(np.array2string(np.asarray(v), threshold=64) for v in values)
        self.out.write(f"pid {self.program_id} {prefix}{text}\n")


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
