"""A fresh process's first launch from an AOT portfolio: time from ``import tilekit``.

Builds a portfolio of ``examples/softmax.py`` (f32 1000 x 4097, bf16 4096 x 4097) for this
GPU's arch, then starts fresh processes that, like a torch program, have imported torch
and made the CUDA context and the input before the clock starts. Each one times
``import tilekit``, ``tilekit.load_portfolio(path, strict=True)`` and the first launch
(synchronized), checks that nothing was compiled and no llvmlite imported, and compares
the output with torch's softmax. Prints a table and writes ``aot_start.json``.

The children import from compiled bytecode, as an installed package does (pip compiles
it at install): one untimed run per case writes it (``PYTHONPYCACHEPREFIX`` in the work
folder), then the timed runs read it.

    python3 bench/aot_start.py [--runs 7] [--out DIR] [--profile]

``--profile`` also runs one child per case under cProfile (after the timed runs) and
prints where its time went: the functions by own time and by cumulative time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from common import (  # noqa: E402
    environment,
    format_table,
    median,
    parser,
    print_header,
    require_gpu,
    write_json,
)

CASES = {"f32 1000x4097": ("f32", 1000, 4097), "bf16 4096x4097": ("bf16", 4096, 4097)}


def child(path: str, case: str, profile: bool = False) -> None:
    """One fresh process: the timed first launch (torch and the context already there)."""
    import torch

    dt, rows, cols = CASES[case]
    dtype = torch.float32 if dt == "f32" else torch.bfloat16
    x = torch.randn(rows, cols, device="cuda").to(dtype)
    y = torch.full_like(x, float("nan"))
    torch.cuda.synchronize()
    sys.path.insert(0, str(ROOT))
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t0 = time.perf_counter()
    import tilekit

    t1 = time.perf_counter()
    tilekit.load_portfolio(path, strict=True)
    t2 = time.perf_counter()
    from examples.softmax import softmax

    softmax[rows](x, y, N=cols)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    if profile:
        import pstats

        profiler.disable()
        for order in ("tottime", "cumulative"):
            pstats.Stats(profiler, stream=sys.stderr).sort_stats(order).print_stats(28)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(
            "tilekit|examples", 60)
    from tilekit.rt import cache

    err = float((y.double() - torch.softmax(x.double(), 1)).abs().max())
    print("RESULT " + json.dumps({
        "import_ms": (t1 - t0) * 1e3, "load_portfolio_ms": (t2 - t1) * 1e3,
        "first_launch_ms": (t3 - t2) * 1e3, "total_ms": (t3 - t0) * 1e3,
        "portfolio_hits": cache.stats()["portfolio_hits"],
        "compiles": cache.stats()["compiles"], "llvmlite": "llvmlite" in sys.modules,
        "traced": "tilekit.lang.tracer" in sys.modules,
        "max_error": err}))


def main() -> int:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="fresh processes per case")
    p.add_argument("--profile", action="store_true", help="also profile one child per case")
    p.add_argument("--child", nargs=2, metavar=("PORTFOLIO", "CASE"), help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        child(*args.child, profile=args.profile)
        return 0
    require_gpu()
    env = environment()
    print_header(env)
    from tilekit.aot import build, calls
    from tilekit.rt import driver

    arch = driver.device_props(0).arch
    work = Path(tempfile.mkdtemp(prefix="tk_aot_"))
    path = work / "softmax.tkp"
    declared = [build.Declared(calls.parse_compact(
        f"softmax: X={dt}[{r},{c}] Y={dt}[{r},{c}] N={c}"), name)
        for name, (dt, r, c) in CASES.items()]
    t = time.perf_counter()
    build.build([str(ROOT / "examples" / "softmax.py")], declared, path, [arch], workers=2,
                show_progress=False)
    build_s = time.perf_counter() - t
    rows, out = [], []
    child_env = dict(os.environ, TILEKIT_CACHE_DIR=str(work / "empty-cache"),
                     PYTHONPYCACHEPREFIX=str(work / "pyc"),
                     PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child_env.pop("PYTHONDONTWRITEBYTECODE", None)
    for case in CASES:
        results = []
        for run in range(args.runs + 1):  # run 0 writes the bytecode, untimed
            proc = subprocess.run([sys.executable, __file__, "--child", str(path), case],
                                  env=child_env, capture_output=True, text=True, timeout=300)
            if proc.returncode:
                print(proc.stderr[-2000:], file=sys.stderr)
                return 1
            line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
            if run:
                results.append(json.loads(line[len("RESULT "):]))
        row = {k: median([r[k] for r in results]) for k in
               ("import_ms", "load_portfolio_ms", "first_launch_ms", "total_ms")}
        row.update(case=case, runs=[r["total_ms"] for r in results],
                   prebuilt=all(r["portfolio_hits"] == 1 and r["compiles"] == 0
                                and not r["llvmlite"] for r in results),
                   traced=any(r["traced"] for r in results),
                   max_error=max(r["max_error"] for r in results))
        out.append(row)
        rows.append([case, f"{row['import_ms']:.1f}", f"{row['load_portfolio_ms']:.1f}",
                     f"{row['first_launch_ms']:.1f}", f"{row['total_ms']:.1f}",
                     "yes" if row["prebuilt"] else "NO", "yes" if row["traced"] else "no",
                     f"{row['max_error']:.1e}"])
    if args.profile:
        for case in CASES:
            proc = subprocess.run([sys.executable, __file__, "--child", str(path), case,
                                   "--profile"], env=child_env, capture_output=True, text=True,
                                  timeout=300)
            print(f"--- profile of one child, {case} ---\n{proc.stderr[-30000:]}")
    print(format_table(["softmax", "import ms", "load_portfolio ms", "first launch ms",
                        "total ms (median)", "prebuilt, no llvmlite", "traced",
                        "max error"], rows))
    print(f"portfolio: {path.stat().st_size} bytes, built in {build_s:.1f} s for {arch}")
    write_json("aot_start", {"environment": env, "arch": arch, "build_s": build_s,
                             "rows": out}, Path(args.out) if args.out else None)
    return 0


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
