"""A process's first launch without a GPU: ``import tilekit`` to the first launch returned,
with the CUDA driver stubbed and everything else real (the trace, the cache key, the disk
cache, code generation when the cache is cold).

    python3 -m tests.rt.warm_start cold|warm CACHE_DIR [--torch-like]

prints one line ``RESULT {json}``: the milliseconds from before ``import tilekit`` to the
import done and to the first launch returned, the cache's counters, and which compiler
modules (llvmlite, islpy, sympy, tilekit.layout, tilekit.codegen.driver) and CUDA
bindings (``cuda.bindings``, ``cuda.pathfinder``) were imported, and the libcuda symbols
called. numpy is imported before the clock starts, as torch does in a real program
(``--torch-like``: also the standard modules torch imports, hashlib, json, logging...).
libcuda is ``fake_gpu.FakeLibcuda``, whose functions answer at once, so ``driver``'s own
code runs: on a GPU, the real ``cuInit``, ``cuDevicePrimaryCtxRetain`` and
``cuModuleLoadData`` come on top. ``tests/rt/test_cache.py`` runs this to check that a
warm start imports no compiler and no CUDA bindings.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from typing import Any

WATCHED = ("llvmlite", "llvmlite.binding", "islpy", "sympy", "tilekit.layout",
           "tilekit.codegen.driver", "tilekit.codegen.lower", "cuda.bindings",
           "cuda.bindings.driver", "cuda.bindings.nvjitlink", "cuda.pathfinder")


def _stub_driver() -> Any:
    """libcuda of an H100 that answers at once (nothing is loaded or launched); torch's
    current stream is the default one."""
    from tests.rt.fake_gpu import FakeLibcuda
    from tilekit.rt import device_arrays, driver

    lib = FakeLibcuda()
    driver.use_library(lib)
    device_arrays.current_stream = lambda *args: 0
    device_arrays.torch_current_stream = lambda: (lambda device: 0)
    return lib


# Standard modules ``import torch`` has loaded before tilekit is imported (torch.hub,
# torch._utils, ...): ``--torch-like`` loads them before the clock starts.
TORCH_LIKE = ("numpy", "hashlib", "json", "logging", "ctypes", "dataclasses", "inspect",
              "tempfile", "subprocess", "platform", "shutil", "zipfile", "uuid", "typing",
              "urllib.request", "importlib.metadata")


def main(mode: str, cache_dir: str, torch_like: bool = False) -> dict[str, object]:
    os.environ["TILEKIT_CACHE_DIR"] = cache_dir
    os.environ.pop("TILEKIT_INTERPRET", None)
    for name in TORCH_LIKE if torch_like else ("numpy",):  # torch imports numpy first
        importlib.import_module(name)

    t0 = time.perf_counter()
    import tilekit  # noqa: F401

    t_import = time.perf_counter()
    lib = _stub_driver()
    from examples.softmax import softmax
    from tests.rt.fake_gpu import FakeTensor
    from tilekit.rt import cache

    x = FakeTensor((1000, 4097), ptr=0x7F00_0000_0000)
    y = FakeTensor((1000, 4097), ptr=0x7F10_0000_0000)
    softmax[1000](x, y, N=4097)
    t_launch = time.perf_counter()
    return {"mode": mode, "import_ms": (t_import - t0) * 1e3,
            "import_to_launch_ms": (t_launch - t0) * 1e3, "stats": cache.stats(),
            "modules": sorted(m for m in WATCHED if m in sys.modules),
            "driver_calls": sorted(set(lib.calls))}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2], "--torch-like" in sys.argv)))
