"""The autotuner on a GPU: the softmax example (rows per program), the pipelined row sum
(tile and stages) and the matmul example (tiles), each tuned over a handful of configs
that include the example's default; then a second process that reuses the stored
choices.

For each kernel: every config's median (CUDA events over the tuner's repetitions, on
fresh random inputs, L2 written over between repetitions), the bandwidth (each input
read once, each output written once; TFLOP/s for the matmul), which config was chosen or
why a config was pruned, and the chosen config's speedup over the default. The second
process launches the same calls against the same cache and reports its tuner counters
(``timings`` must be 0) and how long its first call took. Prints tables and writes
``bench/results/autotune.json``.

    python3 bench/autotune.py [--out DIR] [--quick] [--cache DIR]
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import softmax  # noqa: E402  (examples/softmax.py)

import tilekit as tk  # noqa: E402
from bench.common import (  # noqa: E402
    environment,
    format_table,
    parser,
    print_header,
    require_gpu,
    write_json,
)
from tilekit.tune import autotune  # noqa: E402

# --- the kernels --------------------------------------------------------------------------------

SOFTMAX_CONFIGS = [{"ROWS": 1}, {"ROWS": 2}, {"ROWS": 4}, {"ROWS": 8}]  # ROWS=1: the example


softmax_rows = autotune(configs=SOFTMAX_CONFIGS, key=["X"])(softmax.softmax_rows)


ROW_SUM_CONFIGS = [{"BM": 8, "BN": 256, "STAGES": 3},  # the example's
                   {"BM": 8, "BN": 256, "STAGES": 2}, {"BM": 8, "BN": 256, "STAGES": 4},
                   {"BM": 16, "BN": 128, "STAGES": 3}, {"BM": 4, "BN": 512, "STAGES": 3},
                   {"BM": 16, "BN": 256, "STAGES": 4}]
MATMUL_CONFIGS = [{"BM": 64, "BN": 32, "BK": 32},  # the example's
                  {"BM": 32, "BN": 32, "BK": 32}, {"BM": 64, "BN": 64, "BK": 32},
                  {"BM": 128, "BN": 64, "BK": 16}]


def tuned_kernels() -> dict[str, Any]:
    from matmul import matmul
    from pipeline_row_sum import pipeline_row_sum

    return {"softmax": softmax_rows,
            "pipeline_row_sum": autotune(configs=ROW_SUM_CONFIGS, key=["X"])(pipeline_row_sum),
            "matmul": autotune(configs=MATMUL_CONFIGS, key=["A", "B"])(matmul)}


def cases(torch: Any, quick: bool) -> list[dict[str, Any]]:
    """Each kernel's call: inputs (fresh random), the launch, a check, bytes and flops."""
    dev = "cuda"
    torch.manual_seed(0)
    rows, cols = (1024, 4097) if quick else (4096, 4097)
    x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
    sm_y = torch.full_like(x, float("nan"))
    rs_rows, rs_cols = (2048, 8192) if quick else (8192, 8192)
    rs_x = torch.randn(rs_rows, rs_cols, device=dev, dtype=torch.bfloat16)
    rs_y = torch.full((rs_rows,), float("nan"), device=dev, dtype=torch.float32)
    M, N, K = (512, 512, 512) if quick else (1024, 1024, 1024)
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
    c = torch.full((M, N), float("nan"), device=dev, dtype=torch.float32)
    return [
        dict(name="softmax", what=f"softmax {rows}x{cols} bf16",
             grid=lambda meta: (tk.cdiv(rows, meta["ROWS"]),), args=(x, sm_y),
             kwargs={"N": cols}, bytes=2 * x.numel() * 2, flops=None,
             error=lambda: float((sm_y.float() - torch.softmax(x.float(), 1)).abs().max()),
             tol=1e-2),
        dict(name="pipeline_row_sum", what=f"row sum {rs_rows}x{rs_cols} bf16",
             grid=lambda meta: (tk.cdiv(rs_rows, meta["BM"]),), args=(rs_x, rs_y), kwargs={},
             bytes=rs_x.numel() * 2 + rs_rows * 4, flops=None,
             error=lambda: float(((rs_y.double() - rs_x.double().sum(1)).abs()
                                  / rs_x.double().abs().sum(1)).max()),
             tol=1e-5),
        dict(name="matmul", what=f"matmul {M}x{N}x{K} bf16 (tensor cores)",
             grid=lambda meta: (tk.cdiv(M, meta["BM"]), tk.cdiv(N, meta["BN"])),
             args=(a, b, c, K), kwargs={}, bytes=None, flops=2 * M * N * K,
             error=lambda: float((c.double() - a.double() @ b.double()).norm()
                                 / (a.double() @ b.double()).norm()),
             tol=1e-5),
    ]


# --- the first process: tune, report --------------------------------------------------------------


def tune_all(torch: Any, quick: bool) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    from tilekit.errors import TilekitError

    kernels = tuned_kernels()
    out, table = [], []
    for case in cases(torch, quick):
        tuned = kernels[case["name"]]
        t0 = time.perf_counter()
        try:
            tuned[case["grid"]](*case["args"], **case["kwargs"])
            torch.cuda.synchronize()
        except TilekitError as exc:
            print(f"{case['what']}: not tuned ({exc.message})", flush=True)
            out.append({"kernel": case["name"], "what": case["what"], "error": exc.message})
            continue
        seconds = time.perf_counter() - t0
        err = case["error"]()
        [decision] = tuned.decisions.values()
        default = tuned.configs[0]
        rows = []
        for config in tuned.configs:
            ms = decision.medians.get(config)
            rate = None
            if ms is not None:
                rate = case["bytes"] / ms / 1e6 if case["bytes"] else case["flops"] / ms / 1e9
            chosen = config == decision.chosen
            rows.append({"config": config.to_json(), "median_ms": ms, "rate": rate,
                         "chosen": chosen, "default": config == default,
                         "pruned": decision.pruned.get(config)})
            table.append([case["what"], config.label + (" (default)" if config == default
                                                        else ""),
                          ms, rate, "yes" if chosen else decision.pruned.get(config, "")])
        speedup = None
        if default in decision.medians:
            speedup = decision.medians[default] / decision.medians[decision.chosen]
        out.append({"kernel": case["name"], "what": case["what"],
                    "rate_unit": "GB/s" if case["bytes"] else "TFLOP/s",
                    "first_call_s": seconds, "error": err, "error_ok": err <= case["tol"],
                    "chosen": decision.chosen.to_json(), "speedup_over_default": speedup,
                    "configs": rows})
        print(f"{case['what']}: chose {decision.chosen.label}"
              + (f", {speedup:.2f}x the default's speed" if speedup else "")
              + f"; tuning took {seconds:.1f} s; error {err:.1e}"
              + ("" if err <= case["tol"] else " WRONG"), flush=True)
    return out, table


# --- the second process: reuse ---------------------------------------------------------------


def reuse(quick: bool) -> dict[str, Any]:
    """Launch every case once against the stored choices; the tuner's counters and each
    first call's seconds."""
    torch = require_gpu()
    from tilekit.errors import TilekitError
    from tilekit.tune import stats

    kernels = tuned_kernels()
    first: dict[str, float] = {}
    for case in cases(torch, quick):
        t0 = time.perf_counter()
        try:
            kernels[case["name"]][case["grid"]](*case["args"], **case["kwargs"])
            torch.cuda.synchronize()
        except TilekitError:
            continue
        first[case["name"]] = time.perf_counter() - t0
    return {"stats": stats(), "first_call_s": first}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller inputs")
    p.add_argument("--cache", type=Path, default=None,
                   help="the cache directory (default: a fresh temporary one, so that the "
                        "first process tunes)")
    p.add_argument("--reuse", type=Path, default=None, help=argparse_hidden())
    args = p.parse_args()
    if args.reuse is not None:
        os.environ["TILEKIT_CACHE_DIR"] = str(args.reuse)
        print("RESULT " + json.dumps(reuse(args.quick)))
        return 0
    torch = require_gpu()
    env = environment()
    print_header(env)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="tilekit-autotune-"))
    os.environ["TILEKIT_CACHE_DIR"] = str(cache)
    results, table = tune_all(torch, args.quick)
    print(format_table(["call", "config", "median ms", "GB/s or TFLOP/s", "chosen / pruned"],
                       table))

    cmd = [sys.executable, str(Path(__file__).resolve()), "--reuse", str(cache)]
    if args.quick:
        cmd.append("--quick")
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    second: dict[str, Any] = {"returncode": done.returncode, "wall_s": wall}
    line = next((s for s in done.stdout.splitlines() if s.startswith("RESULT ")), None)
    if line is None:
        second["stderr"] = done.stderr[-2000:]
        print(f"second process failed:\n{done.stderr[-2000:]}")
    else:
        second.update(json.loads(line.removeprefix("RESULT ")))
        timings = second["stats"]["timings"]
        print(f"second process: timings == {timings} ({'reused' if timings == 0 else 'RETUNED'}"
              f", disk hits {second['stats']['disk_hits']}); first call: "
              + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in second["first_call_s"].items()))
    write_json("autotune", {"bench": "autotune", **env, "cache_dir": str(cache),
                            "kernels": results, "second_process": second},
               Path(args.out) if args.out else None)
    ok = line is not None and second["stats"]["timings"] == 0 and \
        all(r.get("error_ok", False) for r in results if "configs" in r)
    return 0 if ok else 1


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
