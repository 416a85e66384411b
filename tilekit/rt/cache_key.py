"""The disk cache's key (``tilekit.rt.cache`` describes what goes into it).

A module of its own, imported when the first kernel is looked up on disk and still named
``tilekit.rt.cache.CacheKey``: a namedtuple costs ~0.1 ms to create, and a process whose
kernels come from memory or an AOT portfolio never makes this one.
"""

from __future__ import annotations

import hashlib
import json
from collections import namedtuple

from tilekit.rt import cache


class CacheKey(namedtuple("CacheKey", "name text digest")):
    __slots__ = ()  # the fields, with their types:
    # name: str  # the kernel's name (for file names and `tilekit cache list`)
    # text: str  # canonical JSON of every input
    # digest: str  # its sha256

    @staticmethod
    def of(name: str, ir_text: str, spec_text: str, arch: str,
           tools: tuple[tuple[str, str], ...] | None = None) -> CacheKey:
        doc = {"ir": ir_text, "specialization": spec_text, "arch": arch,
               "toolchain": dict(tools if tools is not None else cache.toolchain())}
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return CacheKey(name, text, hashlib.sha256(text.encode()).hexdigest())

    @property
    def filename(self) -> str:
        safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in self.name)[:64]
        return f"{safe}-{self.digest}{cache.SUFFIX}"
