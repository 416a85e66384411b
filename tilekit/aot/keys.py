"""What identifies a prebuilt kernel: kernel name, IR hash, bucket, arch.

The IR hash is the sha256 of the traced, optimized IR printed *without* source locations:
the same kernel at another path, or after an edit that only moves lines, still matches,
while any change of what the kernel computes does not. The bucket is the runtime's own
canonical text of the specialization and of the call's size facts (``gpu.spec_text``,
``gpu.size_facts_text``). Cheap to compute (well under a millisecond for the examples)
and imports no compiler.
"""

from __future__ import annotations

import hashlib
import json
from collections import namedtuple
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilekit.ir.core import Module


# Records made at import on the launch path are collections.namedtuple classes: a
# dataclass costs ~0.5 ms to create and a typing.NamedTuple ~0.3 ms (it compiles its
# string annotations), a namedtuple ~0.1 ms (bench/aot_start.py: the first launch of a
# fresh process).
class VariantKey(namedtuple("VariantKey", "kernel ir_hash spec size_facts arch")):
    __slots__ = ()  # the fields, with their types:
    # kernel: str  # the kernel's name
    # ir_hash: str  # ir_hash() of its traced module
    # spec: str  # gpu.spec_text of the specialization
    # size_facts: str  # gpu.size_facts_text of the call's size facts
    # arch: str  # "sm_90a", "sm_80", "gfx942"

    @property
    def id(self) -> str:
        """A short stable name for the variant (its archive members are named by it)."""
        text = json.dumps(list(self), separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def facts(self) -> set[str]:
        """The key as a set of facts, to rank how far two buckets are apart."""
        return {f"ir={self.ir_hash}", f"arch={self.arch}", *self.spec.split(";"),
                *(f"divisible {f}" for f in self.size_facts.split(",") if f)}


def ir_hash(module: Module) -> str:
    """sha256 of the module printed without source locations (kept on the traced module:
    computed once per specialization)."""
    fn = module.kernel
    found: str | None = getattr(fn, "aot_ir_hash", None)
    if found is None:
        from tilekit.ir.printer import print_module

        found = hashlib.sha256(print_module(module, with_locs=False).encode()).hexdigest()
        fn.aot_ir_hash = found  # type: ignore[attr-defined]
    return found


def key_of(module: Module, spec_text: str, size_facts_text: str, arch: str) -> VariantKey:
    return VariantKey(module.kernel.name, ir_hash(module), spec_text, size_facts_text, arch)
