"""tilekit.codegen: IR with layouts -> per-thread LLVM IR (llvmlite) -> PTX / AMDGCN.

``compile_module(module, target)`` is the one entry point the runtime calls; it
returns a :class:`~tilekit.codegen.artifact.CompiledKernel` (plain data). Importing
this package imports llvmlite, so the runtime imports it only on a cache miss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from tilekit.codegen.artifact import CompiledKernel
    from tilekit.ir.core import Module


def compile_module(module: Module, target: str = "sm_90a", num_warps: int | None = None,
                   divisible: frozenset[tuple[str, int, int]] = frozenset(),
                   while_llvm: Callable[[], object] | None = None,
                   check: bool = False) -> CompiledKernel:
    """Lower a traced, optimized module for ``target`` (``sm_90a``, ``sm_80``, ``gfx942``);
    ``num_warps`` None lets the driver choose from the tile sizes; ``divisible`` is the
    call's size facts (``tilekit.codegen.size_facts``); ``while_llvm`` is called as LLVM's
    optimizer starts (see ``driver.emit_binary``); ``check`` bounds-checks every raw
    access (``TILEKIT_CHECK``, ``bounds_check``)."""
    from tilekit.codegen.driver import compile_module as _compile

    return _compile(module, target, num_warps, divisible, while_llvm, check)
