"""tilekit's IR: typed SSA values, ops in ordered blocks with regions, declared once.

The hub of the compiler: it imports nothing from the other stages (only the
leaf modules ``tilekit.errors`` and ``tilekit.knobs``), and every stage
reads and writes it.
"""

from tilekit.ir import ops as _ops  # noqa: F401  (registers the op table)
from tilekit.ir.builder import Builder
from tilekit.ir.core import (
    Block,
    BlockArgument,
    Function,
    Module,
    Operation,
    OpResult,
    Region,
    Value,
    replace_uses,
)
from tilekit.ir.dtypes import DType, promote, weak_promote
from tilekit.ir.opdef import REGISTRY, Effect, OpDef, OpTypeError, lookup
from tilekit.ir.passes import DCE, Pass, PassManager, dump, should_dump
from tilekit.ir.printer import print_function, print_module
from tilekit.ir.types import TensorType, TileType, Type, scalar
from tilekit.ir.verifier import verify

__all__ = [
    "Block", "BlockArgument", "Builder", "DCE", "DType", "Effect", "Function", "Module",
    "OpDef", "OpResult", "OpTypeError", "Operation", "Pass", "PassManager", "REGISTRY",
    "Region", "TensorType", "TileType", "Type", "Value", "dump", "lookup", "print_function",
    "print_module", "promote", "replace_uses", "scalar", "should_dump", "verify", "weak_promote",
]
