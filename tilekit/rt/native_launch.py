"""Whether the launch fast path's hits run in C (``tilekit.rt._fastlaunch``), and why not.

The extension is optional (``setup.py`` builds it when a C compiler is there; a source
checkout builds it with ``python3 setup.py build_ext --inplace``). Without it, or with
``TILEKIT_NATIVE_LAUNCH=0``, every hit takes the generated Python dispatcher
(``fastpath``), which decides the same hits and packs the same bytes. Imported when the
first dispatcher is built, never by ``import tilekit``.
"""

from __future__ import annotations

import ctypes
import functools
from types import ModuleType
from typing import Any

from tilekit import knobs


@functools.cache
def _load() -> tuple[ModuleType | None, str]:
    """The extension module, or None and why it could not be imported."""
    try:
        from tilekit.rt import _fastlaunch  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"not built ({exc})"
    return _fastlaunch, ""


def module() -> ModuleType | None:
    """The extension when it is built and ``TILEKIT_NATIVE_LAUNCH`` is on, else None."""
    if not knobs.NATIVE_LAUNCH.get():
        return None
    return _load()[0]


def status() -> str:
    """One line for ``tilekit info``: which launcher serves fast-path hits."""
    lib, why = _load()
    if lib is None:
        return (f"python (the native launcher is {why}; build it with "
                "`python3 setup.py build_ext --inplace` or reinstall with a C compiler)")
    if not knobs.NATIVE_LAUNCH.get():
        return f"python (TILEKIT_NATIVE_LAUNCH=0; native launcher built: {lib.__file__})"
    return f"native ({lib.__file__})"


def function_address(fn: Any) -> int | None:
    """The C address of a ctypes function (libcuda's ``cuLaunchKernelEx``, a test's
    ``CFUNCTYPE`` callback), or None for anything else (e.g. a Python stand-in: that
    dispatcher stays in Python)."""
    if not isinstance(fn, ctypes._CFuncPtr):  # type: ignore[attr-defined]
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value or None
