"""SASS (NVIDIA machine code) of a linked cubin, read with ``cuobjdump`` or ``nvdisasm``.

For offline checks of what the hardware will run (vector widths, spills, barriers):
the ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` wheels ship the tools, and
``cuda.pathfinder.find_nvidia_binary_utility`` finds them (a CUDA toolkit on ``PATH``
is the fallback). No GPU is needed. Nothing here is on the launch path.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["SassUnavailable", "available", "disassemble", "instructions", "tool"]

TOOLS = ("cuobjdump", "nvdisasm")


class SassUnavailable(RuntimeError):
    """The disassembler is not installed here."""


@functools.cache
def tool(name: str = "cuobjdump") -> str | None:
    """The path of ``cuobjdump`` or ``nvdisasm``, or None when neither the NVIDIA wheel nor
    a toolkit on ``PATH`` provides it."""
    if name not in TOOLS:
        raise ValueError(f"unknown tool {name!r}; expected one of {TOOLS}")
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility(name)
    except Exception:  # noqa: BLE001 - not installed, or an unusable install
        found = None
    return found or shutil.which(name)


def available(name: str = "cuobjdump") -> bool:
    return tool(name) is not None


def disassemble(cubin: bytes, name: str = "cuobjdump", timeout: float = 60.0) -> str:
    """The SASS text of ``cubin`` (an ELF from ``tilekit.rt.link.link_ptx``).

    ``cuobjdump -sass`` prints a ``code for sm_XX`` header and the functions;
    ``nvdisasm -c`` prints the code sections alone. Raises ``SassUnavailable`` when the tool is
    missing and ``RuntimeError`` with the tool's message when it rejects the input.
    """
    path = tool(name)
    if path is None:
        raise SassUnavailable(f"{name} is not installed (pip install nvidia-cuda-{name})")
    with tempfile.TemporaryDirectory(prefix="tilekit-sass-") as tmp:
        image = Path(tmp) / "kernel.cubin"
        image.write_bytes(cubin)
        argv = [path, "-sass", str(image)] if name == "cuobjdump" else [path, "-c", str(image)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {out.returncode}): {out.stderr.strip()}")
    return out.stdout


# `/*0100*/   @!P5 LDG.E.128 R4, desc[UR4][R4.64] ;  /* 0x... */` (cuobjdump), or
# `/*0100*/   @!P5 LDG.E.128 R4, desc[UR4][R4.64] ;` (nvdisasm)
_INSTRUCTION = re.compile(r"^[ \t]*/\*[0-9a-f]{4,}\*/[ \t]+(?P<text>[@A-Z][^;\n]*?)[ \t]*;",
                          re.MULTILINE)
_PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")


def instructions(sass: str) -> list[str]:
    """Each instruction of ``sass`` without its address, predicate and encoding, e.g.
    ``"LDG.E.128 R4, desc[UR4][R4.64]"``; its opcode is ``text.split()[0]``."""
    return [_PREDICATE.sub("", m.group("text")) for m in _INSTRUCTION.finditer(sass)]
