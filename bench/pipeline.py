"""Pipelined kernels, side by side: tilekit's `tk.pipeline` (TMA, cp.async, warp roles) vs
torch vs Triton, in one run, on 8192 x 8192 bfloat16.

Two cases: a 2-D copy streamed tile by tile through shared memory, and a row reduction
(row sums in float32). Bandwidth counts each input read once and each output written once;
"x copy" divides by torch's device-to-device copy of the same number of bytes, measured in
the same run. Fresh random inputs, outputs poisoned (NaN) and checked before timing
(the copy bit-exact, the sums against a float64 reference), medians of CUDA-event timings.
Each tilekit variant takes the best of a few tile shapes; the table names the winner.

With --stress N: N launches (default 10^4) of pipelined kernels compiled with random
delays in the producer and the consumer (``TILEKIT_JITTER=1``), each on fresh data and
checked, in a child process with a deadline: no hang and no wrong result.

    python3 bench/pipeline.py [--out DIR] [--quick] [--stress N]
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilekit as tk  # noqa: E402
from bench.common import cuda_events_median, environment, require_gpu, write_json  # noqa: E402


@tk.kernel
def tk_copy(X, Y, BM: tk.constexpr, BN: tk.constexpr, STAGES: tk.constexpr,
            ENGINE: tk.constexpr, ROLES: tk.constexpr):
    r = tk.program_id(0)
    for i, x in tk.pipeline(X.tiles((BM, BN), row=r), stages=STAGES, engine=ENGINE,
                            warp_roles=ROLES):
        Y.tile((BM, BN), (r, i)).store(x)


@tk.kernel
def tk_row_sum(X, Y, BM: tk.constexpr, BN: tk.constexpr, STAGES: tk.constexpr,
               ENGINE: tk.constexpr, ROLES: tk.constexpr):
    r = tk.program_id(0)
    acc = tk.zeros((BM, BN), tk.float32)
    for _, x in tk.pipeline(X.tiles((BM, BN), row=r), stages=STAGES, engine=ENGINE,
                            warp_roles=ROLES):
        acc += x.to(tk.float32)
    Y.tile((BM,), (r,)).store(tk.sum(acc, axis=1))


def triton_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def copy(X, Y, M, N, BM: tl.constexpr, BN: tl.constexpr):
        r = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
        c = tl.program_id(1) * BN + tl.arange(0, BN)[None, :]
        mask = (r < M) & (c < N)
        tl.store(Y + r * N + c, tl.load(X + r * N + c, mask=mask), mask=mask)

    @triton.jit
    def row_sum(X, Y, M, N, BM: tl.constexpr, BN: tl.constexpr):
        r = tl.program_id(0) * BM + tl.arange(0, BM)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, N, BN):
            c = k + tl.arange(0, BN)
            mask = (r[:, None] < M) & (c[None, :] < N)
            acc += tl.load(X + r[:, None] * N + c[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + r, tl.sum(acc, axis=1), mask=r < M)

    return triton, dict(copy=copy, row_sum=row_sum)


#: (BM, BN, STAGES) tried for each tilekit variant of the copy. The (1, 1024-4096) tiles
#: are one row's run of 1 x 256 TMA boxes (`tma_box`), 2-8 KB of contiguous bytes per stage:
#: 0.96-0.98x of torch's copy in an ad hoc sweep on the H100 (2026-11-25), where the 2-D
#: boxes of (2-8, 256) reached 0.94x and taller ones 0.88-0.92x.
CONFIGS = [(1, 4096, 2), (1, 4096, 3), (1, 2048, 4), (1, 1024, 8), (8, 256, 8),
           (8, 256, 12), (4, 256, 16), (16, 256, 6), (32, 256, 4)]
#: ... and of the row sum: configs whose programs are all resident at once on a 132-SM
#: H100 (one wave; in the runs before, every config of 1.3 waves was among the slowest),
#: tiles of 4 KB or more (a step's fixed cost, waits, fence and arrivals, over a 1 KB tile
#: takes most of an SM's issue slots) and 3-8 stages (at BM = 8, 7.8 programs per SM with
#: 3 stages in flight each keep ~90 KB in flight per SM; deeper rings cost occupancy).
SUM_CONFIGS = [(8, 256, 3), (8, 256, 4), (8, 256, 6), (16, 256, 4), (16, 256, 6),
               (32, 256, 4), (16, 128, 8), (1, 4096, 2), (1, 2048, 4)]
VARIANTS = {  # name -> (engine, warp roles)
    "tma": ("tma", False),
    "tma + warp roles": ("tma", True),
    "cp.async": ("cp_async", False),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="also write the JSON into this folder")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--stress", type=int, default=0, help="jittered launches to run")
    parser.add_argument("--stress-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stress_child:
        return stress_child(args.stress)
    torch = require_gpu()
    dev = torch.device("cuda")
    torch.manual_seed(int(time.time()))
    reps = 10 if args.quick else 30
    triton, T = triton_kernels()
    M = N = 8192
    rows = []

    def copy_bw(nbytes: int) -> float:
        """torch's copy moving ``nbytes`` (read + written): the median of three measurements
        of medians (one run gave a reference 40% low, an outlier that made the row sums
        read as 1.6x of copy)."""
        src = torch.randn(max(1, nbytes // 8), device=dev)
        dst = torch.empty_like(src)
        ms = sorted(cuda_events_median(lambda: dst.copy_(src), reps, 5) for _ in range(3))[1]
        return 2 * src.numel() * 4 / ms / 1e6

    def best_of(run_for_config, check, configs=CONFIGS) -> tuple[float, tuple, str]:
        best = (math.inf, None, "")
        for cfg in configs:
            try:
                run = run_for_config(cfg)
                check(run)
                ms = cuda_events_median(run, reps, 3)
            except Exception as exc:  # a config that does not fit is skipped, and said
                print(f"    config {cfg}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                continue
            if ms < best[0]:
                best = (ms, cfg, "")
        return best

    x = torch.randn(M, N, device=dev).to(torch.bfloat16)
    same = copy_bw(2 * M * N * 2)

    # --- 2-D copy ---------------------------------------------------------------------------
    y = torch.empty_like(x)

    def check_copy(run):
        y.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        if not torch.equal(y, x):
            raise AssertionError("copy differs")

    for name, (engine, roles) in VARIANTS.items():
        ms, cfg, _ = best_of(lambda c, e=engine, w=roles: (
            lambda: tk_copy[M // c[0]](x, y, BM=c[0], BN=c[1], STAGES=c[2], ENGINE=e, ROLES=w)),
            check_copy)
        rows.append(dict(case="copy 8192x8192 bf16", who=f"tilekit {name}", ms=ms, config=cfg,
                         gbs=2 * M * N * 2 / ms / 1e6, copy_gbs=same))
    ms = cuda_events_median(lambda: y.copy_(x), reps, 5)
    rows.append(dict(case="copy 8192x8192 bf16", who="torch copy_", ms=ms, config=None,
                     gbs=2 * M * N * 2 / ms / 1e6, copy_gbs=same))
    tri = (math.inf, None)
    for BM, BN in [(32, 256), (64, 128), (16, 512)]:
        def run(BM=BM, BN=BN):
            T["copy"][(M // BM, N // BN)](x, y, M, N, BM=BM, BN=BN)
        check_copy(run)
        t = cuda_events_median(run, reps, 3)
        tri = min(tri, (t, (BM, BN)))
    rows.append(dict(case="copy 8192x8192 bf16", who="triton", ms=tri[0], config=tri[1],
                     gbs=2 * M * N * 2 / tri[0] / 1e6, copy_gbs=same))

    # --- row sums ---------------------------------------------------------------------------
    ref = x.double().sum(1)
    s = torch.empty(M, device=dev, dtype=torch.float32)
    nbytes = M * N * 2 + M * 4
    same_r = copy_bw(nbytes)

    def check_sum(run):
        s.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        err = float((s.double() - ref).abs().max() / ref.abs().max())
        if not err < 1e-5:
            raise AssertionError(f"row sums off by {err:.2e}")

    for name, (engine, roles) in VARIANTS.items():
        ms, cfg, _ = best_of(lambda c, e=engine, w=roles: (
            lambda: tk_row_sum[M // c[0]](x, s, BM=c[0], BN=c[1], STAGES=c[2], ENGINE=e,
                                          ROLES=w)), check_sum, SUM_CONFIGS)
        rows.append(dict(case="row sum 8192x8192 bf16", who=f"tilekit {name}", ms=ms,
                         config=cfg, gbs=nbytes / ms / 1e6, copy_gbs=same_r))
    ms = cuda_events_median(lambda: torch.sum(x, dim=1, dtype=torch.float32, out=s), reps, 5)
    rows.append(dict(case="row sum 8192x8192 bf16", who="torch sum", ms=ms, config=None,
                     gbs=nbytes / ms / 1e6, copy_gbs=same_r))
    tri = (math.inf, None)
    for BM, BN in [(8, 512), (16, 256), (32, 128)]:
        def run(BM=BM, BN=BN):
            T["row_sum"][(M // BM,)](x, s, M, N, BM=BM, BN=BN)
        check_sum(run)
        t = cuda_events_median(run, reps, 3)
        tri = min(tri, (t, (BM, BN)))
    rows.append(dict(case="row sum 8192x8192 bf16", who="triton", ms=tri[0], config=tri[1],
                     gbs=nbytes / tri[0] / 1e6, copy_gbs=same_r))

    print(f"{'case':26s} {'who':22s} {'GB/s':>7s} {'x copy':>7s}  config (BM, BN, STAGES)")
    for r in rows:
        r["vs_copy"] = r["gbs"] / r["copy_gbs"]
        print(f"{r['case']:26s} {r['who']:22s} {r['gbs']:7.0f} {r['vs_copy']:7.2f}  "
              f"{r['config']}")

    result = {"bench": "pipeline", **environment(), "gpu": torch.cuda.get_device_name(0),
              "rows": rows}
    if args.stress:
        result["stress"] = run_stress(args.stress)
    write_json("pipeline", result, Path(args.out) if args.out else None)
    return 0


def run_stress(launches: int) -> dict:
    """The stress run in a child process with a deadline: a hang is a failure, not a wait."""
    env = dict(os.environ, TILEKIT_JITTER="1")
    deadline = 300
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--stress-child", "--stress",
                               str(launches)], env=env, capture_output=True, text=True,
                              timeout=deadline)
        ok, out = proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        ok, out = False, f"no answer within {deadline} s: a hang"
    print(f"stress: {launches} jittered launches: {'ok' if ok else 'FAILED'} "
          f"({time.perf_counter() - t0:.1f} s)\n{out.strip()}")
    return dict(launches=launches, ok=ok, seconds=time.perf_counter() - t0, log=out)


def stress_child(launches: int) -> int:
    """Launch pipelined kernels (every engine, with and without warp roles, ragged shapes,
    trip counts around the stage count) on fresh data and check each result."""
    torch = require_gpu()
    dev = torch.device("cuda")
    gen = torch.Generator(device="cpu").manual_seed(int(time.time()))
    bad = 0
    cases = [(v, c) for v in VARIANTS.values() for c in [(8, 64, 3), (16, 128, 2)]]
    for k in range(launches):
        (engine, roles), (BM, BN, ST) = cases[k % len(cases)]
        rows = int(torch.randint(1, 64, (1,), generator=gen))
        # trip counts 0 .. stages + 2 tiles, ragged last tile
        cols = int(torch.randint(0, (ST + 3) * BN, (1,), generator=gen)) // 8 * 8 + 8
        x = torch.randn(rows, cols, device=dev).to(torch.bfloat16)
        y = torch.full_like(x, float("nan"))
        tk_copy[tk.cdiv(rows, BM)](x, y, BM=BM, BN=BN, STAGES=ST, ENGINE=engine, ROLES=roles)
        if not torch.equal(x, y):
            bad += 1
            print(f"launch {k}: wrong copy for {rows}x{cols} {engine} roles={roles} "
                  f"{(BM, BN, ST)}")
            if bad > 5:
                break
    torch.cuda.synchronize()
    print(f"{launches} launches, {bad} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
