"""nvJitLink is loaded on a worker thread while LLVM optimizes a kernel (``link.prefetch``),
and a compile that needs it waits for that load instead of loading it twice."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilekit.rt import link

ROOT = Path(__file__).resolve().parents[2]


def _fresh_process(code: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_prefetch_loads_on_one_worker_and_available_waits_for_it() -> None:
    got = _fresh_process("""
        import json, threading
        from tilekit.rt import link
        link.prefetch()
        worker = link._prefetch
        name = worker.name
        ok = link.available()  # joins the worker: the library is loaded once
        alive = worker.is_alive()
        link.prefetch()  # loaded: no second worker
        print(json.dumps({"name": name, "ok": ok, "alive": alive,
                          "same": link._prefetch is worker,
                          "threads": threading.active_count()}))
    """)
    assert got["name"] == "tilekit-nvjitlink" and not got["alive"] and got["same"]
    assert got["threads"] == 1
    assert got["ok"] == link.available()  # what a process without the prefetch answers


def test_prefetch_after_a_load_starts_nothing() -> None:
    got = _fresh_process("""
        import json
        from tilekit.rt import link
        ok = link.available()
        link.prefetch()
        print(json.dumps({"ok": ok, "worker": link._prefetch is not None}))
    """)
    assert got == {"ok": link.available(), "worker": False}


@pytest.mark.parametrize("arch, prefetched", [("sm_90a", True), ("sm_80", True),
                                              ("gfx942", False)])
def test_a_compile_starts_the_load_as_llvm_optimizes(arch: str, prefetched: bool,
                                                     monkeypatch, tmp_path: Path) -> None:
    """After the lowering (Python, which a worker would slow down) and before the
    optimizer (which runs without the GIL); AMD targets link no PTX."""
    import tilekit.codegen.driver as driver
    import tilekit.codegen.lower as lower
    from examples.softmax import softmax
    from tilekit.rt import gpu

    monkeypatch.setenv("TILEKIT_CACHE_DIR", str(tmp_path))
    events: list[str] = []
    real_lower, real_optimize = lower.lower_function, driver.optimize

    def lowered(*args: Any, **kwargs: Any) -> Any:
        result = real_lower(*args, **kwargs)
        events.append("lowered")
        return result

    def optimize(*args: Any, **kwargs: Any) -> None:
        events.append("optimize")
        real_optimize(*args, **kwargs)

    monkeypatch.setattr(lower, "lower_function", lowered)
    monkeypatch.setattr(driver, "optimize", optimize)
    monkeypatch.setattr(link, "prefetch", lambda: events.append("prefetch"))
    x = np.random.default_rng(3).standard_normal((5, 37)).astype(np.float32)
    module = softmax.trace(x, np.empty_like(x), N=37)
    spec = next(s for s, m in softmax._cache.items() if m is module)
    gpu.compile_cached(module, spec, arch)
    expected = ["lowered", "prefetch", "optimize"] if prefetched else ["lowered", "optimize"]
    assert events == expected
