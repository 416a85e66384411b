"""What the offline SASS tests share: skips when the linker or cuobjdump is missing, and
the opcodes and resource usage of a cubin."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from tilekit.codegen import sass
from tilekit.rt import link

needs_linker = pytest.mark.skipif(not link.available(), reason="nvJitLink is not installed")
needs_cuobjdump = pytest.mark.skipif(
    not (link.available() and sass.available()),
    reason="nvJitLink or cuobjdump is not installed (nvidia-nvjitlink, nvidia-cuda-cuobjdump)")


def opcodes(cubin: bytes) -> list[str]:
    return [i.split()[0] for i in sass.instructions(sass.disassemble(cubin))]


def resources(cubin: bytes) -> dict[str, int]:
    """``cuobjdump -res-usage``: REG, STACK, LOCAL, SHARED... of the kernel."""
    with tempfile.TemporaryDirectory(prefix="tilekit-res-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([sass.tool("cuobjdump"), "-res-usage", str(path)],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    line = next(ln for ln in out.splitlines() if "REG:" in ln)
    return {k: int(v) for k, v in re.findall(r"([A-Z]+):(\d+)", line)}
