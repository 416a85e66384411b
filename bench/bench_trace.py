"""How long tilekit takes to turn a kernel into IR: tracing plus the pass pipeline.

This is the latency a user pays on the first launch of every new
specialization, before anything runs. Each run clears the kernel's
specialization cache and calls ``kernel.trace(...)`` (argument
specialization, tracing, verification and the pass pipeline, exactly what a
first launch does before running); the report gives the median, min and max
over ``--runs`` runs, and the median split into tracing and passes.

    python3 bench/bench_trace.py              # table on stdout, JSON in bench/results/trace.json
    python3 bench/bench_trace.py --runs 200 --check   # exit 1 if softmax misses the target

Target: the softmax kernel of examples/softmax.py traces in under 50 ms (median).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import layer_norm  # noqa: E402
import matmul  # noqa: E402
import softmax  # noqa: E402
import transpose  # noqa: E402
import vector_add  # noqa: E402

from tilekit import knobs  # noqa: E402
from tilekit.lang.kernel import KernelFunction  # noqa: E402
from tilekit.rt.launcher import specialize_arguments  # noqa: E402

TARGET_MS = 50.0
RESULTS = ROOT / "bench" / "results" / "trace.json"


@dataclass(frozen=True)
class Case:
    name: str
    kernel: KernelFunction
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def cases() -> list[Case]:
    """The kernels of examples/, with the arguments their main() launches them with."""
    f32 = np.float32
    bf16 = ml_dtypes.bfloat16
    return [
        Case("softmax", softmax.softmax,
             (np.zeros((1000, 4097), f32), np.zeros((1000, 4097), f32)), {"N": 4097}),
        Case("layer_norm", layer_norm.layer_norm,
             (np.zeros((67, 1001), f32), np.zeros(1001, f32), np.zeros(1001, f32),
              np.zeros((67, 1001), f32), 1001, 1e-5), {"BLOCK": 256}),
        Case("matmul", matmul.matmul,
             (np.zeros((131, 200), bf16), np.zeros((200, 77), bf16), np.zeros((131, 77), f32),
              200), {"BM": 64, "BN": 32, "BK": 32}),
        Case("transpose", transpose.transpose,
             (np.zeros((1000, 37), f32), np.zeros((37, 1000), f32)), {"BM": 64, "BN": 16}),
        Case("vector_add", vector_add.add,
             (np.zeros(100_003, f32), np.zeros(100_003, f32), np.zeros(100_003, f32), 100_003),
             {"BLOCK": 1024}),
    ]


@dataclass
class Result:
    name: str
    runs: int
    ops: int
    median_ms: float
    min_ms: float
    max_ms: float
    trace_median_ms: float
    passes_median_ms: float
    cold_ms: float = float("nan")


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def measure(case: Case, runs: int, warmup: int = 3) -> Result:
    kernel = case.kernel

    def full() -> Any:
        kernel._cache.clear()
        return kernel.trace(*case.args, **case.kwargs)

    for _ in range(warmup):
        full()
    totals = [_timed(full) for _ in range(runs)]

    # The same work split in two: tracing (+ verifying the traced IR), then the passes.
    spec, _ = specialize_arguments(kernel, kernel.bind(case.args, case.kwargs, None), None)
    traces, passes = [], []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        module = kernel._trace(spec)
        t1 = time.perf_counter()
        kernel.passes.run(module)
        t2 = time.perf_counter()
        traces.append((t1 - t0) * 1e3)
        passes.append((t2 - t1) * 1e3)
    kernel._cache.clear()
    ops = sum(1 for _ in full().walk())
    kernel._cache.clear()
    return Result(case.name, runs, ops, statistics.median(totals), min(totals), max(totals),
                  statistics.median(traces), statistics.median(passes))


def cold_first_trace(name: str, processes: int) -> float:
    """The first trace of a kernel in a fresh interpreter (everything imported, nothing
    traced yet): what the very first launch pays. Median over ``processes`` processes."""
    times = []
    for _ in range(processes):
        out = subprocess.run([sys.executable, __file__, "--cold-one", name],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        times.append(float(out.stdout.strip()))
    return statistics.median(times)


def _cold_one(name: str) -> None:
    case = next(c for c in cases() if c.name == name)
    with knobs.override(dump=frozenset(), verify_passes=True):
        ms = _timed(lambda: case.kernel.trace(*case.args, **case.kwargs))
    print(f"{ms:.6f}")


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"arch": platform.machine(), "python": platform.python_version(), "cpu": cpu,
            "system": platform.system()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="timed runs per kernel")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 when softmax's median is not under {TARGET_MS:g} ms")
    parser.add_argument("--cold", type=int, default=3, metavar="N",
                        help="fresh processes for the first-trace figure (0: skip)")
    parser.add_argument("--cold-one", metavar="KERNEL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cold_one:
        _cold_one(args.cold_one)
        return 0

    # Dumps off, verification on (the defaults a user gets).
    with knobs.override(dump=frozenset(), verify_passes=True):
        results = [measure(c, args.runs) for c in cases()]
    if args.cold:
        for r in results:
            r.cold_ms = cold_first_trace(r.name, args.cold)

    print(f"tracing + passes, {args.runs} runs each (ms)")
    print(f"{'kernel':<12} {'ops':>4} {'median':>8} {'min':>8} {'max':>8} {'trace':>8} "
          f"{'passes':>8} {'cold':>8}")
    for r in results:
        print(f"{r.name:<12} {r.ops:>4} {r.median_ms:>8.2f} {r.min_ms:>8.2f} {r.max_ms:>8.2f} "
              f"{r.trace_median_ms:>8.2f} {r.passes_median_ms:>8.2f} {r.cold_ms:>8.2f}")
    print("(trace/passes: medians of the two halves; cold: the first trace in a fresh process)")
    softmax_ms = next(r.median_ms for r in results if r.name == "softmax")
    met = softmax_ms < TARGET_MS
    print(f"softmax: {softmax_ms:.2f} ms median, target < {TARGET_MS:g} ms: "
          f"{'met' if met else 'MISSED'}")

    report = {
        "benchmark": "trace",
        "what": "kernel.trace() with the specialization cache cleared: argument "
                "specialization, tracing, verification, pass pipeline",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": " ".join(["python3", "bench/bench_trace.py",
                             *(sys.argv[1:] if argv is None else argv)]),
        "runs": args.runs,
        "target": {"kernel": "softmax", "median_ms_below": TARGET_MS, "met": met},
        "results": {r.name: {k: round(v, 4) if isinstance(v, float) else v
                             for k, v in asdict(r).items()} for r in results},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
