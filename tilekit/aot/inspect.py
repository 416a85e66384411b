"""``tilekit aot inspect``: what a portfolio holds, after verifying all of it.

Reading a portfolio verifies every member's size and sha256 (``portfolio.read``), so an
inspection that prints the variants has checked them; one that finds a fault prints the
reason and reports failure (the command exits non-zero).
"""

from __future__ import annotations

import os

from tilekit.errors import PortfolioError


def _bytes(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB" if n < 1 << 20 else \
        f"{n / (1 << 20):.1f} MB"


def _tools(toolchain: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(toolchain.items()))


def report(path: str | os.PathLike[str]) -> tuple[str, bool]:
    """The inspection's text, and whether the file verified."""
    from tilekit.aot.portfolio import read

    try:
        found = read(path)
    except PortfolioError as exc:
        return f"{exc}\nverification FAILED: do not load this file", False
    size = os.path.getsize(path)
    variants = found.variants
    tools = {_tools(dict(v.toolchain)) for v in variants}
    members = sum(len(v.members()) for v in variants)
    lines = [f"portfolio {os.fspath(path)}: format {found.format}, built by tilekit "
             f"{found.tilekit_version}, {len(found.kernels)} kernel"
             f"{'s' * (len(found.kernels) != 1)}, {len(variants)} variant"
             f"{'s' * (len(variants) != 1)}, {_bytes(size)}"]
    per_variant = len(tools) > 1
    if not per_variant and tools:
        lines.append(f"toolchain: {tools.pop()}")
    for name in found.kernels:
        mine = [v for v in variants if v.key.kernel == name]
        modules = sorted({v.module for v in mine})
        archs = ", ".join(sorted({v.key.arch for v in mine}))
        lines.append(f"kernel {name} ({', '.join(modules)}): {len(mine)} variant"
                     f"{'s' * (len(mine) != 1)}, archs {archs}")
        for v in mine:
            blobs = ", ".join(f"{member.rsplit('.', 1)[1]} {len(blob)} B"
                              for member, blob in v.members().items())
            total = sum(len(b) for b in v.members().values())
            lines.append(f"  [{v.key.arch}] {_bytes(total)} ({blobs})  id {v.key.id}  "
                         f"IR {v.key.ir_hash[:12]}")
            lines.append(f"      bucket: {v.key.spec}")
            lines.append(f"      divisible: {v.key.size_facts or 'none'}")
            if per_variant:
                lines.append(f"      toolchain: {_tools(dict(v.toolchain))}")
    lines.append(f"verified: the manifest and all {members} binaries (size and sha256 of each)")
    return "\n".join(lines), True
