"""What check mode (``TILEKIT_CHECK=1``) costs: each kernel with the knob off and on, in one run.

Per kernel, three times (milliseconds, medians):

* ``off``: the launch as users run it (the fast path), CUDA events;
* ``checked kernel``: the checked binary itself, its bounds checks included, without check
  mode's copies and status read (those are stubbed out for this column), CUDA events. A
  kernel without raw loads, stores or atomics (the softmax and the matmul: tile views and
  pipelines only) compiles to the same code checked or not, so this is ``off`` again;
* ``checked launch``: a whole checked launch as ``TILEKIT_CHECK=1`` runs it, wall clock per
  call up to its return: the scratch copy of each written array, the kernel, the
  synchronizing read of the status buffer, the copy back; next to ``off launch``, the
  unchecked launch with a synchronization, timed the same way.

Kernels: vector add 2^28 float32 (bench/memory_bound.py's), the same on every other element
(``add_strided`` on stride-2 views, element i at offset ``i * X.stride(0)``: the check
decomposes offsets there, one division per element), softmax
8192 x 8192 bf16 (one row per program) and the 4096^3 bf16 matmul of bench/matmul.py
(``matmul_pipelined`` 128x256x64, 4 stages, C float32). Each output is checked against torch
before anything is timed, with the knob off and on.

    python3 bench/check_cost.py [--out DIR] [--quick]
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import contextlib
import importlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilekit as tk  # noqa: E402
from bench.common import (  # noqa: E402
    cuda_events_median,
    environment,
    format_table,
    parser,
    print_header,
    require_gpu,
    write_json,
)
from bench.memory_bound import tk_add, tk_softmax  # noqa: E402
from tilekit import knobs  # noqa: E402
from tilekit.rt import check_mode, gpu  # noqa: E402


@tk.kernel
def add_strided(X, Y, Out, n, BLOCK: tk.constexpr):
    """``tk_add`` on rank-1 views of any stride: an offset counts memory elements from the
    view's start, so element i of each is at ``i * its stride(0)``."""
    i = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    mask = i < n
    x = tk.load(X, i * X.stride(0), mask=mask)
    y = tk.load(Y, i * Y.stride(0), mask=mask)
    tk.store(Out, i * Out.stride(0), x + y, mask=mask)


@contextlib.contextmanager
def checked_kernel_only() -> Iterator[None]:
    """Launches of the checked kernels without check mode's scratch copies and status read:
    the checked binary's own time (nothing faults here, so nothing is lost)."""

    class NoScratch:
        def __init__(self, *args: Any) -> None:
            pass

        def open(self) -> dict[str, int]:
            return {}

        def commit(self) -> None:
            pass

        def release(self) -> None:
            pass

    real_scratch, real_status = check_mode.Scratch, gpu._check_status
    check_mode.Scratch = NoScratch  # type: ignore[misc,assignment]
    gpu._check_status = lambda *args: None
    try:
        with knobs.override(check=True):
            yield
    finally:
        check_mode.Scratch, gpu._check_status = real_scratch, real_status


def wall_ms(torch: Any, fn: Callable[[], Any], reps: int) -> float:
    """Median wall time of ``fn()`` followed by a synchronization, in milliseconds."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(statistics.median(times))


def cases(torch: Any) -> list[tuple[str, Callable[[], Any], Callable[[], float], Any]]:
    """(name, run, error of the output against torch, output) for each kernel."""
    dev = torch.device("cuda")
    out: list[tuple[str, Callable[[], Any], Callable[[], float], Any]] = []

    n = 2**28
    x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
    z = torch.full_like(x, float("nan"))
    out.append(("vector add 2^28 f32",
                lambda: tk_add[tk.cdiv(n, 1024)](x, y, z, n, BLOCK=1024),
                lambda: float((z - (x + y)).abs().max()), z))

    xs, ys = x[::2], y[::2]
    zs = torch.full((n,), float("nan"), device=dev)[::2]
    out.append(("vector add 2^27 f32, stride 2",
                lambda: add_strided[tk.cdiv(n // 2, 1024)](xs, ys, zs, n // 2, BLOCK=1024),
                lambda: float((zs - (xs + ys)).abs().max()), zs))

    M = N = 8192
    a = (torch.randn(M, N, device=dev) * 2 + 0.5).to(torch.bfloat16)
    s = torch.full_like(a, float("nan"))
    ref = torch.softmax(a.double(), dim=1)
    out.append(("softmax 8192x8192 bf16", lambda: tk_softmax[M](a, s, N=N),
                lambda: float((s.double() - ref).abs().max()), s))

    ex = importlib.import_module("examples.matmul")
    K = 4096
    A = torch.randn(K, K, device=dev).to(torch.bfloat16)
    B = torch.randn(K, K, device=dev).to(torch.bfloat16)
    C = torch.full((K, K), float("nan"), device=dev)
    ref_c = A.float() @ B.float()
    grid = (tk.cdiv(K, 128), tk.cdiv(K, 256))
    out.append(("matmul 4096^3 bf16 (128x256x64, 4 stages)",
                lambda: ex.matmul_pipelined[grid](A, B, C, K, BM=128, BN=256, BK=64, STAGES=4),
                lambda: float((C - ref_c).abs().max() / ref_c.abs().max()), C))
    return out


def main() -> int:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = p.parse_args()
    torch = require_gpu()
    env = environment()
    print_header(env)
    reps = 10 if args.quick else 30
    rows = []
    for name, run, error, output in cases(torch):
        try:
            row: dict[str, Any] = {"case": name}
            for mode in ("off", "on"):
                output.fill_(float("nan"))
                with knobs.override(check=mode == "on"):
                    run()
                torch.cuda.synchronize()
                row[f"error_{mode}"] = error()
            row["off_ms"] = cuda_events_median(run, reps)
            with checked_kernel_only():
                row["checked_kernel_ms"] = cuda_events_median(run, reps)
            row["off_launch_ms"] = wall_ms(torch, run, reps)
            with knobs.override(check=True):
                row["checked_launch_ms"] = wall_ms(torch, run, reps)
            row["kernel_ratio"] = row["checked_kernel_ms"] / row["off_ms"]
            row["launch_ratio"] = row["checked_launch_ms"] / row["off_launch_ms"]
        except Exception as exc:  # one broken case must not hide the others
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        rows.append(row)
        print(f"{name}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in row.items() if k != "case"), flush=True)
        torch.cuda.empty_cache()
    print()
    print(format_table(
        ["kernel", "off ms", "checked kernel ms", "x", "off launch ms", "checked launch ms",
         "x", "max error off / on"],
        [[r["case"], r.get("off_ms"), r.get("checked_kernel_ms"), r.get("kernel_ratio"),
          r.get("off_launch_ms"), r.get("checked_launch_ms"), r.get("launch_ratio"),
          f"{r.get('error_off', float('nan')):.1e} / {r.get('error_on', float('nan')):.1e}"
          if "error" not in r else r["error"][:60]] for r in rows]))
    write_json("check_cost", {"bench": "check_cost", **env, "reps": reps, "rows": rows},
               args.out)
    bad = any("error" in r or r["error_on"] != r["error_off"] for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
