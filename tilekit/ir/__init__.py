"""tilekit's IR: typed SSA values, ops in ordered blocks with regions, declared once.

The hub of the compiler: it imports nothing from the other stages (only the
leaf modules ``tilekit.errors`` and ``tilekit.knobs``), and every stage
reads and writes it.
"""

from __future__ import annotations

import importlib
from typing import Any

# Names re-exported here, by the submodule that defines them. They are imported on first
# use (PEP 562), so that importing one leaf (``tilekit.ir.dtypes``, for a launch from a
# portfolio) does not import every op definition: the op table is filled when the first
# op is looked up (``opdef.lookup``) or any of these names is used.
_EXPORTS = {
    "Builder": "builder",
    **dict.fromkeys(("Block", "BlockArgument", "Function", "Module", "Operation", "OpResult",
                     "Region", "Value", "replace_uses"), "core"),
    **dict.fromkeys(("DType", "promote", "weak_promote"), "dtypes"),
    **dict.fromkeys(("REGISTRY", "Effect", "OpDef", "OpTypeError", "lookup"), "opdef"),
    **dict.fromkeys(("DCE", "Pass", "PassManager", "dump", "should_dump"), "passes"),
    **dict.fromkeys(("print_function", "print_module"), "printer"),
    **dict.fromkeys(("TensorType", "TileType", "Type", "scalar"), "types"),
    "verify": "verifier",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tilekit.ir' has no attribute {name!r}")
    importlib.import_module("tilekit.ir.ops")  # the op table, as an eager import had it
    value = getattr(importlib.import_module(f"tilekit.ir.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
