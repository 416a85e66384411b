"""Compile time: softmax from trace to loaded cubin (cold), and a warm process's first launch.

* **cold**: a fresh process with an empty ``TILEKIT_CACHE_DIR`` launches the softmax of
  ``examples/softmax.py`` once; timed inside it (torch and the CUDA context are set up
  before the clock starts): from the launch call to its return (trace, passes, layouts,
  lowering, LLVM and PTX, nvJitLink, the disk cache write, module load, launch), with
  the breakdown by stage (each stage's function wrapped with a timer).
* **warm**: a fresh process whose cache directory holds the kernel already: from before
  ``import tilekit`` to the first launch returned (and to its result synchronized).
* every child has an empty ``TILEKIT_CACHE_DIR`` (the cold runs; the warm runs share a
  filled one) and its own empty ``CUDA_CACHE_PATH``: nvJitLink's own JIT cache, in
  ``~/.nv/ComputeCache`` by default, would otherwise hand a cold child the cubin that an
  earlier process assembled, and the figure would leave out ptxas.
* **offline** (``--offline``, no GPU, no torch): the cold run's compile alone, as a launch
  does it up to the module load: trace, the cache key, ``compile_module``, nvJitLink, the
  cache write, for the same arguments as numpy arrays, targeting ``--arch`` (sm_90a).

Python bytecode: the children import tilekit from compiled bytecode, as an installed
package does (a private ``PYTHONPYCACHEPREFIX``, filled by one discarded run first, and
``PYTHONDONTWRITEBYTECODE`` dropped); ``--source-imports`` keeps the environment's setting
(with ``PYTHONDONTWRITEBYTECODE=1`` every import compiles tilekit's sources: ~20 ms more
for the codegen imports and ~25 ms more inside the lowering, which imports lazily).

Medians over ``--processes`` processes each. Targets (issue 7): cold < 0.5 s; warm first
launch within 50 ms of ``import tilekit``. The LLVM pipeline measured is
``tilekit.codegen.driver.SPEED_LEVEL`` (``default<O3>``); ``--llvm-opt N`` measures
``default<ON>`` instead and ``--no-prefetch`` without the driver's libdevice prefetch
thread (the child sets the driver's constants; comparisons, not settings).

    python3 bench/compile.py [--out DIR] [--processes 3] [--offline] [--llvm-opt N]
                             [--no-prefetch] [--source-imports]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import common  # noqa: E402  (bench/common.py)

ROWS, COLS = 1000, 4097
ARCH = "sm_90a"  # the offline mode's target (--arch)
LLVM_OPT: int | None = None  # --llvm-opt: measure default<ON> instead of the driver's level
NO_PREFETCH = False  # --no-prefetch: libdevice parsed after the lowering, not during it
# The LLVM stages are tilekit.codegen.driver's steps: parse_ir (parse, verify), link_math
# (libdevice), optimize (the pass pipeline), emit_code (the PTX printer); "IR text" is the
# rest of compile_module (mostly printing the lowered llvmlite.ir module to text).
LLVM_STAGES = ["LLVM IR text (llvmlite.ir printing)", "LLVM parse + verify", "libdevice link",
               "LLVM optimize", "LLVM PTX emission"]
# "nvJitLink load": the compiling thread's wait for the library (link.prefetch loads it on a
# worker thread while LLVM optimizes; the worker's own time is the overlapped stage)
OVERLAPPED = ["nvJitLink load (worker thread, overlapped)"]
STAGES = ["trace + passes", "cache key", "import codegen (llvmlite, layout)", "layouts",
          "lowering", *LLVM_STAGES, "nvJitLink load", "nvJitLink", "module load",
          "other (describe, cache, checks)", *OVERLAPPED]


# --- in the child process -----------------------------------------------------------------


def _wrap(obj: Any, name: str, label: str, times: dict[str, float]) -> None:
    real = getattr(obj, name, None)  # None: an older checkout without this stage
    if real is None or getattr(real, "_bench_wrapped", False):
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            # a worker thread's time (nvJitLink's load, started as LLVM optimizes) overlaps
            # the main thread's stages: shown apart, not in their sum
            main = threading.current_thread() is threading.main_thread()
            times[label if main else f"{label} (worker thread, overlapped)"] += \
                time.perf_counter() - t

    timed._bench_wrapped = True  # type: ignore[attr-defined]
    setattr(obj, name, timed)


def _instrument(times: dict[str, float]) -> None:
    """Wrap each stage's function with a timer (the cold and offline breakdowns)."""
    import tilekit.codegen as codegen
    from tilekit.lang.kernel import KernelFunction
    from tilekit.rt import driver, gpu, link

    _wrap(KernelFunction, "specialize", "trace + passes", times)
    _wrap(gpu, "cache_key", "cache key", times)
    _wrap(link, "available", "nvJitLink load", times)  # its first call loads the library
    _wrap(link, "link_ptx", "nvJitLink", times)
    _wrap(driver, "load_function", "module load", times)
    real_compile = codegen.compile_module

    def compile_module(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        import tilekit.codegen.driver as cg_driver  # llvmlite
        import tilekit.codegen.lower as lower
        import tilekit.layout.propagate as propagate

        times["import codegen (llvmlite, layout)"] += time.perf_counter() - t
        _wrap(propagate, "assign_layouts", "layouts", times)
        _wrap(lower, "lower_function", "lowering", times)
        for name, label in (("parse_ir", "LLVM parse + verify"), ("link_math", "libdevice link"),
                            ("optimize", "LLVM optimize"), ("emit_code", "LLVM PTX emission")):
            _wrap(cg_driver, name, label, times)
        if LLVM_OPT is not None:
            cg_driver.SPEED_LEVEL = LLVM_OPT
        if NO_PREFETCH:
            cg_driver.PREFETCH_LIBDEVICE = False
        t = time.perf_counter()
        try:
            return real_compile(*args, **kwargs)
        finally:
            times["codegen"] += time.perf_counter() - t

    codegen.compile_module = compile_module


def _settle(out: dict[str, Any], times: dict[str, float]) -> None:
    """The breakdown: the IR text as compile_module's rest, "other" as the launch's rest."""
    stages = out["stages_ms"] = {k: v * 1e3 for k, v in times.items()}
    stages["LLVM IR text (llvmlite.ir printing)"] = stages.pop("codegen", 0.0) - sum(
        stages.get(k, 0.0) for k in ("layouts", "lowering", *LLVM_STAGES[1:]))
    stages["other (describe, cache, checks)"] = out["launch_to_returned_ms"] - \
        sum(v for k, v in stages.items() if k not in OVERLAPPED)


def _pipeline() -> str:
    from tilekit.codegen import driver

    level = getattr(driver, "SPEED_LEVEL", 3)  # 3: a checkout from before the constant
    prefetch = getattr(driver, "PREFETCH_LIBDEVICE", False) and not NO_PREFETCH
    return (f"default<O{LLVM_OPT if LLVM_OPT is not None else level}>"
            f"{', libdevice parsed during the lowering' if prefetch else ''}")


def child(mode: str) -> None:
    if mode == "offline":
        offline_child()
        return
    import torch

    x = torch.randn(ROWS, COLS, device="cuda")
    y = torch.empty_like(x)
    torch.cuda.synchronize()  # the CUDA context exists before the clock starts
    times: dict[str, float] = defaultdict(float)
    t_import = time.perf_counter()
    import tilekit  # noqa: F401
    from tilekit.rt import cache

    if mode == "cold":  # the breakdown (the warm run is timed bare)
        _instrument(times)
    sys.path.insert(0, str(ROOT / "examples"))
    t_launch = time.perf_counter()
    from softmax import softmax

    softmax[ROWS](x, y, N=COLS)
    t_returned = time.perf_counter()
    torch.cuda.synchronize()
    t_done = time.perf_counter()
    ok = bool(torch.allclose(y, torch.softmax(x, dim=1), rtol=1e-4, atol=1e-6))
    out = {"mode": mode, "ok": ok, "stats": dict(cache.stats()),
           "import_to_returned_ms": (t_returned - t_import) * 1e3,
           "import_to_synchronized_ms": (t_done - t_import) * 1e3,
           "launch_to_returned_ms": (t_returned - t_launch) * 1e3,
           "pipeline": _pipeline()}
    if mode == "cold":
        _settle(out, times)
    print("RESULT " + json.dumps(out))


def offline_child() -> None:
    """The cold compile without a GPU: what ``gpu._load`` does before the module load
    (specialize, compile_cached: cache key, compile_module, nvJitLink, the cache write)."""
    import numpy as np

    x = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    y = np.empty_like(x)
    times: dict[str, float] = defaultdict(float)
    t_import = time.perf_counter()
    import tilekit  # noqa: F401
    from tilekit.codegen.size_facts import size_facts_holding
    from tilekit.rt import cache, gpu, link
    from tilekit.rt.arrays import HostArray
    from tilekit.rt.launcher import specialize_arguments

    _instrument(times)
    sys.path.insert(0, str(ROOT / "examples"))
    t_launch = time.perf_counter()
    from softmax import softmax

    spec, runtime = specialize_arguments(softmax, softmax.bind((x, y), {"N": COLS}, None), None)
    module = softmax.specialize(spec)
    divisible = size_facts_holding(softmax.size_candidates(spec),
                                   {n: a.shape for n, a in runtime.items()
                                    if isinstance(a, HostArray)})
    entry = gpu.compile_cached(module, spec, ARCH, divisible=divisible)
    t_returned = time.perf_counter()
    out = {"mode": "offline", "ok": bool(entry.image) or not link.available(),
           "linked": bool(entry.image), "stats": dict(cache.stats()),
           "import_to_returned_ms": (t_returned - t_import) * 1e3,
           "launch_to_returned_ms": (t_returned - t_launch) * 1e3,
           "pipeline": _pipeline()}
    _settle(out, times)
    print("RESULT " + json.dumps(out))


# --- the parent ---------------------------------------------------------------------------


PYCACHE: str | None = None  # the children's PYTHONPYCACHEPREFIX (None: the environment's)


def run_child(mode: str, cache_dir: str, extra: list[str]) -> dict[str, Any]:
    # CUDA_CACHE_PATH: nvJitLink (13.x) and the driver keep a JIT cache of PTX -> cubin in
    # ~/.nv/ComputeCache by default, shared by every process: a child would find the PTX
    # that an earlier child (or the bytecode run) assembled, and skip ptxas (~0.3 s on the
    # H100's host). A fresh one per child makes "cold" cold for the toolchain too.
    env = dict(os.environ, TILEKIT_CACHE_DIR=cache_dir,
               CUDA_CACHE_PATH=os.path.join(cache_dir, "nv-compute-cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("TILEKIT_INTERPRET", None)
    if PYCACHE is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = PYCACHE
    proc = subprocess.run([sys.executable, __file__, "--child", mode, *extra], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    sys.exit(f"the {mode} child failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def stage_table(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median ms per stage, and the LLVM stages' sum (the figure once called "LLVM O3 +
    PTX", which did not include the IR text)."""
    stages = {s: common.median([r["stages_ms"].get(s, 0.0) for r in runs]) for s in STAGES}
    stages["(LLVM parse to PTX, the four stages)"] = common.median(
        [sum(r["stages_ms"].get(s, 0.0) for s in LLVM_STAGES[1:]) for r in runs])
    return stages


def main() -> int:
    global ARCH, LLVM_OPT, NO_PREFETCH
    p = common.parser(__doc__.split("\n", 1)[0])
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--offline", action="store_true",
                   help="no GPU: time trace to linked cubin (no module load, no launch)")
    p.add_argument("--arch", default=ARCH, help="the offline mode's target (sm_90a, sm_80)")
    p.add_argument("--llvm-opt", type=int, choices=range(4), default=None,
                   help="measure LLVM's default<ON> pipeline instead of the driver's")
    p.add_argument("--no-prefetch", action="store_true",
                   help="measure without the driver's libdevice prefetch thread")
    p.add_argument("--source-imports", action="store_true",
                   help="keep the environment's bytecode setting (PYTHONDONTWRITEBYTECODE)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    ARCH, LLVM_OPT, NO_PREFETCH = args.arch, args.llvm_opt, args.no_prefetch
    if args.child:
        child(args.child)
        return 0
    extra = ["--arch", args.arch] + ([] if args.llvm_opt is None else
                                     ["--llvm-opt", str(args.llvm_opt)])
    extra += ["--no-prefetch"] if args.no_prefetch else []
    with tempfile.TemporaryDirectory(prefix="tk_pycache_") as pycache:
        return measure(args, extra, None if args.source_imports else pycache)


def bytecode_note() -> str:
    if PYCACHE is not None:
        return "imports from bytecode (a private PYTHONPYCACHEPREFIX, filled first)"
    off = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    return ("imports compile sources (PYTHONDONTWRITEBYTECODE is set)" if off else
            "imports as the environment has them (--source-imports)")


def measure(args: argparse.Namespace, extra: list[str], pycache: str | None) -> int:
    global PYCACHE
    PYCACHE = pycache
    if not args.offline:
        common.require_gpu()
    if pycache is not None:  # one discarded run writes the bytecode
        with tempfile.TemporaryDirectory(prefix="tk_fill_") as d:
            run_child("offline" if args.offline else "cold", d, extra)
    if args.offline:
        return offline_main(args, extra)
    env = common.environment()
    common.print_header(env)

    colds, warms = [], []
    for _ in range(args.processes):
        with tempfile.TemporaryDirectory(prefix="tk_cold_") as d:
            colds.append(run_child("cold", d, extra))
    with tempfile.TemporaryDirectory(prefix="tk_warm_") as d:
        run_child("cold", d, extra)  # fills the cache
        for _ in range(args.processes):
            warms.append(run_child("warm", d, extra))
    bad = [r for r in colds + warms if not r["ok"]]
    if bad:
        sys.exit(f"softmax computed a wrong result in {len(bad)} process(es)")
    if any(r["stats"].get("compiles", 0) != 1 for r in colds):
        print("# warning: a cold process did not compile exactly once:",
              [r["stats"] for r in colds])
    if any(r["stats"].get("compiles", 0) for r in warms):
        print("# warning: a warm process compiled (the disk cache missed):",
              [r["stats"] for r in warms])

    cold_ms = common.median([r["launch_to_returned_ms"] for r in colds])
    warm_ms = common.median([r["import_to_returned_ms"] for r in warms])
    warm_sync_ms = common.median([r["import_to_synchronized_ms"] for r in warms])
    stages = stage_table(colds)
    pipeline = colds[0]["pipeline"]
    print(f"\nsoftmax {ROWS}x{COLS} float32, medians of {args.processes} processes; "
          f"LLVM pipeline {pipeline}; {bytecode_note()}:\n")
    print(common.format_table(
        ["measure", "ms", "target ms"],
        [["cold: first launch, empty cache (trace to loaded cubin, launched)", cold_ms, 500.0],
         ["warm: import tilekit to first launch returned", warm_ms, 50.0],
         ["warm: import tilekit to first result synchronized", warm_sync_ms, None]]))
    print("\ncold compile by stage (median ms):\n")
    print(common.format_table(["stage", "ms"], [[k, v] for k, v in stages.items()]))
    data = {"environment": env, "kernel": f"examples/softmax.py, {ROWS}x{COLS} float32",
            "llvm_pipeline": pipeline, "bytecode": bytecode_note(),
            "cold_ms": cold_ms, "warm_import_to_launch_ms": warm_ms,
            "warm_import_to_synchronized_ms": warm_sync_ms, "cold_stages_ms": stages,
            "targets_ms": {"cold <": 500, "warm <": 50}, "cold_runs": colds, "warm_runs": warms}
    for path in common.write_json("compile", data, args.out):
        print(f"# wrote {path}")
    return 0


def offline_main(args: argparse.Namespace, extra: list[str]) -> int:
    """``--offline``: the cold compile in fresh processes, no GPU; its own JSON
    (``compile_offline``), so the GPU figures are not overwritten."""
    env = common.environment()
    common.print_header(env)
    runs = []
    for _ in range(args.processes):
        with tempfile.TemporaryDirectory(prefix="tk_offline_") as d:
            runs.append(run_child("offline", d, extra))
    if any(not r["ok"] for r in runs):
        sys.exit("nvJitLink is available but a process produced no cubin")
    if not runs[0]["linked"]:
        print("# nvJitLink is not installed here: the figures stop at the PTX")
    total = common.median([r["launch_to_returned_ms"] for r in runs])
    stages = stage_table(runs)
    stages.pop("module load", None)
    pipeline = runs[0]["pipeline"]
    print(f"\nsoftmax {ROWS}x{COLS} float32 for {args.arch}, offline (no module load, no "
          f"launch), medians of {args.processes} processes; LLVM pipeline {pipeline}; "
          f"{bytecode_note()}:\n")
    print(common.format_table(["measure", "ms"],
                              [["trace to linked cubin, empty cache", total]]))
    print("\nby stage (median ms):\n")
    print(common.format_table(["stage", "ms"], [[k, v] for k, v in stages.items()]))
    data = {"environment": env, "kernel": f"examples/softmax.py, {ROWS}x{COLS} float32",
            "arch": args.arch, "llvm_pipeline": pipeline, "bytecode": bytecode_note(),
            "offline_ms": total,
            "stages_ms": stages, "runs": runs}
    for path in common.write_json("compile_offline", data, args.out):
        print(f"# wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
