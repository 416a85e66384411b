"""A fresh process that loads a portfolio and launches its kernels, libcuda faked.

    python3 -m tests.aot.load_child api|env|strict PORTFOLIO CACHE_DIR

``api`` loads it with ``tilekit.load_portfolio``, ``env`` through ``TILEKIT_PORTFOLIO``,
``strict`` with ``strict=True`` and then launches one call outside the portfolio. The
cache directory is empty, so a kernel can only come from the portfolio or a compile. Prints
one line ``RESULT {json}``: the cache's counters (``portfolio_hits``), the compiler modules
imported (``warm_start.WATCHED``), the modules a prebuilt launch does without
(``NOT_ON_THE_HIT_PATH``) that the four launches imported, the cuda.h structs they made
(``driver.structs``, none), the first bytes of each image handed to ``cuModuleLoadData``,
the strict launch's error and the milliseconds from ``import tilekit`` to the last launch
returned.
"""

from __future__ import annotations

import json
import os
import sys
import time

from tests.rt.warm_start import WATCHED, _stub_driver

# The four launches, one per bucket of tests/aot/conftest.py it hits (FakeTensor shapes).
ALIGNED, MISALIGNED = 0x7F00_0000_0000, 0x7F10_0000_0004

# What launches of prebuilt kernels without tensor maps do without: the tensor maps
# (imported by kernels that have some), the AOT builder, nvJitLink's wrapper, the IR and the
# interpreter; host arrays, the disk cache's key and an error's diagnostic (imported when
# first needed); zip's cp437 codec (ASCII member names are read as ASCII, 3.11+).
NOT_ON_THE_HIT_PATH = ("tilekit.rt.tensor_maps", "tilekit.aot.build",
                       "tilekit.aot.calls", "tilekit.rt.link", "tilekit.ir.core",
                       "tilekit.rt.interpreter", "tilekit.rt.arrays", "tilekit.rt.cache_key",
                       "tilekit.diagnostic",
                       *(("encodings.cp437",) if sys.version_info >= (3, 11) else ()))


def main(mode: str, portfolio: str, cache_dir: str) -> dict[str, object]:
    os.environ["TILEKIT_CACHE_DIR"] = cache_dir
    os.environ.pop("TILEKIT_INTERPRET", None)
    if mode == "env":
        os.environ["TILEKIT_PORTFOLIO"] = portfolio
    import numpy  # noqa: F401  (as torch would have)

    t0 = time.perf_counter()
    import tilekit

    if mode != "env":
        tilekit.load_portfolio(portfolio, strict=mode == "strict")
    lib = _stub_driver()
    from examples.softmax import softmax
    from examples.vector_add import add
    from tests.rt.fake_gpu import FakeTensor
    from tilekit.rt import cache, driver

    softmax[64](FakeTensor((64, 4097), ptr=ALIGNED), FakeTensor((64, 4097), ptr=ALIGNED),
                N=4097)
    softmax[64](FakeTensor((64, 1024), ptr=ALIGNED), FakeTensor((64, 1024), ptr=ALIGNED),
                N=1024)
    x = FakeTensor((4096,), ptr=ALIGNED)
    add[4](x, FakeTensor((4096,), ptr=MISALIGNED), FakeTensor((4096,), ptr=ALIGNED), 4096,
           BLOCK=1024)
    add[98](FakeTensor((100003,), ptr=ALIGNED), FakeTensor((100003,), ptr=ALIGNED),
            FakeTensor((100003,), ptr=ALIGNED), 100003, BLOCK=1024)
    t_launch = time.perf_counter()
    traced = len(softmax._cache) + len(add._cache)  # specializations traced (by the launches)
    extra = sorted(m for m in NOT_ON_THE_HIT_PATH if m in sys.modules)
    structs = driver.structs.cache_info().currsize  # made by the first one needed
    error = None
    if mode == "strict":
        try:
            softmax[64](FakeTensor((64, 2000), ptr=MISALIGNED), FakeTensor((64, 2000)), N=2000)
        except tilekit.LaunchError as exc:
            error = str(exc)
    return {"mode": mode, "stats": cache.stats(), "import_to_launch_ms":
            (t_launch - t0) * 1e3, "modules": sorted(m for m in WATCHED if m in sys.modules),
            "images": [m.hex() for m in lib.modules], "error": error, "traced": traced,
            "front_end": "tilekit.lang.tracer" in sys.modules, "extra_modules": extra,
            "cuda_structs": structs}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3])))
