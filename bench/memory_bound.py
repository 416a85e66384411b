"""Memory-bound kernels, side by side: tilekit vs torch vs Triton, in one run.

Bandwidth counts each input read once and each output written once, next to
torch's device-to-device copy measured in the same run: "x copy" divides by a copy of
the same number of bytes (what the hardware does for a transfer of that size), "x peak"
by a 1 GiB copy. Fresh random inputs,
outputs poisoned (NaN) and checked against a float64 reference before timing,
medians of CUDA-event timings. Prints a table and writes JSON.

    python3 bench/memory_bound.py [--out DIR] [--quick]
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilekit as tk  # noqa: E402
from bench.common import (  # noqa: E402
    cuda_events_median,
    environment,
    require_gpu,
    write_json,
)

# --- tilekit kernels --------------------------------------------------------------------------

@tk.kernel
def tk_add(X, Y, Out, n, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    mask = offs < n
    tk.store(Out, offs, tk.load(X, offs, mask=mask) + tk.load(Y, offs, mask=mask), mask=mask)


LOG2E = 1.4426950408889634


@tk.kernel
def tk_softmax(X, Y, N: tk.constexpr):
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load().to(tk.float32)
    # exp(z) as exp2(z * log2 e), and one reciprocal per row: what Triton's tl.exp and
    # its division compile to, written out (tk.exp and `/` are the accurate ones).
    e = tk.exp2((x - tk.max(x, axis=1, keepdims=True)) * LOG2E)
    Y.tile((1, N), (row, 0)).store((e * (1.0 / tk.sum(e, axis=1, keepdims=True))).to(Y.dtype))


@tk.kernel
def tk_softmax_rows(X, Y, R: tk.constexpr, N: tk.constexpr):
    """R rows per program: how to write a softmax of many short rows (a block per row of
    128 elements cannot keep enough bytes in flight, docs/memory_bound.md)."""
    i = tk.program_id(0)
    x = X.tile((R, N), (i, 0)).load().to(tk.float32)
    e = tk.exp2((x - tk.max(x, axis=1, keepdims=True)) * LOG2E)
    Y.tile((R, N), (i, 0)).store((e * (1.0 / tk.sum(e, axis=1, keepdims=True))).to(Y.dtype))


@tk.kernel
def tk_layer_norm(X, W, B, Y, eps, N: tk.constexpr):
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load().to(tk.float32)
    mean = tk.sum(x, axis=1, keepdims=True) / N
    xc = x - mean
    rstd = tk.rsqrt(tk.sum(xc * xc, axis=1, keepdims=True) / N + eps)
    w = W.tile((N,), (0,)).load().to(tk.float32)
    b = B.tile((N,), (0,)).load().to(tk.float32)
    Y.tile((1, N), (row, 0)).store((xc * rstd * w[None, :] + b[None, :]).to(Y.dtype))


@tk.kernel
def tk_rms_norm(X, W, Y, eps, N: tk.constexpr):
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load().to(tk.float32)
    rstd = tk.rsqrt(tk.sum(x * x, axis=1, keepdims=True) / N + eps)
    w = W.tile((N,), (0,)).load().to(tk.float32)
    Y.tile((1, N), (row, 0)).store((x * rstd * w[None, :]).to(Y.dtype))


@tk.kernel
def tk_copy_tiles(X, Y, BN: tk.constexpr):
    i, j = tk.program_id(0), tk.program_id(1)
    Y.tile((1, BN), (i, j)).store(X.tile((1, BN), (i, j)).load())


@tk.kernel
def tk_transpose(X, Y, BM: tk.constexpr, BN: tk.constexpr):
    i, j = tk.program_id(0), tk.program_id(1)
    t = X.tile((BM, BN), (i, j)).load()
    Y.tile((BN, BM), (j, i)).store(t.T)


# --- Triton kernels (tutorial style) -----------------------------------------------------------

def triton_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def add(X, Y, Out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(Out + offs, tl.load(X + offs, mask=m) + tl.load(Y + offs, mask=m), mask=m)

    @triton.jit
    def softmax(X, Y, stride, N, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(X + row * stride + cols, mask=m, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(Y + row * stride + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty),
                 mask=m)

    @triton.jit
    def layer_norm(X, W, B, Y, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(X + row * stride + cols, mask=m, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        xc = tl.where(m, x - mean, 0.0)
        rstd = 1 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
        w = tl.load(W + cols, mask=m).to(tl.float32)
        b = tl.load(B + cols, mask=m).to(tl.float32)
        tl.store(Y + row * stride + cols, (xc * rstd * w + b).to(Y.dtype.element_ty), mask=m)

    @triton.jit
    def rms_norm(X, W, Y, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(X + row * stride + cols, mask=m, other=0.0).to(tl.float32)
        rstd = 1 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(W + cols, mask=m).to(tl.float32)
        tl.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=m)

    @triton.jit
    def transpose(X, Y, M, N, BM: tl.constexpr, BN: tl.constexpr):
        i, j = tl.program_id(0), tl.program_id(1)
        r = i * BM + tl.arange(0, BM)
        c = j * BN + tl.arange(0, BN)
        m = (r[:, None] < M) & (c[None, :] < N)
        t = tl.load(X + r[:, None] * N + c[None, :], mask=m)
        tl.store(Y + c[None, :] * M + r[:, None], t, mask=m)

    return triton, dict(add=add, softmax=softmax, layer_norm=layer_norm, rms_norm=rms_norm,
                        transpose=transpose)


# --- timing -----------------------------------------------------------------------------------

def median_ms(torch, fn, reps: int = 30, warmup: int = 5) -> float:
    return cuda_events_median(fn, reps, warmup)


def rel_err(torch, got, ref) -> float:
    g = got.double()
    if torch.isnan(g).any():
        return float("nan")
    return float((g - ref).norm() / ref.norm().clamp_min(1e-30))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="also write the JSON into this folder")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    torch = require_gpu()
    dev = torch.device("cuda")
    torch.manual_seed(int(time.time()))
    reps = 10 if args.quick else 30
    triton, T = triton_kernels()
    rows_out = []

    # Copy bandwidth (bytes read + written), two references: the peak (1 GiB read, 1 GiB
    # written) and, per case, a copy moving the same number of bytes as the kernel, since
    # a short kernel pays launch, ramp-up and drain that a long copy hides (a 4096 x 4097
    # float32 copy reaches about 0.8x of the peak on our H100).
    def copy_bandwidth(nbytes: int) -> float:
        src = torch.randn(max(1, nbytes // 8), device=dev)
        dst = torch.empty_like(src)
        copy_ms = median_ms(torch, lambda: dst.copy_(src), reps)
        return 2 * src.numel() * 4 / copy_ms / 1e6  # GB/s

    copy_bw = copy_bandwidth(2**31)

    def record(name, nbytes, ms_tk, ms_torch, ms_triton, err_tk, err_triton):
        bw = lambda ms: nbytes / ms / 1e6 if ms and not math.isnan(ms) else float("nan")  # noqa: E731
        same = copy_bandwidth(nbytes)
        row = dict(case=name, bytes=nbytes, tilekit_ms=ms_tk, torch_ms=ms_torch,
                   triton_ms=ms_triton, tilekit_gbs=bw(ms_tk), torch_gbs=bw(ms_torch),
                   triton_gbs=bw(ms_triton), copy_gbs=copy_bw, copy_same_bytes_gbs=same,
                   tilekit_vs_copy=bw(ms_tk) / same, triton_vs_copy=bw(ms_triton) / same,
                   tilekit_vs_peak_copy=bw(ms_tk) / copy_bw,
                   tilekit_vs_torch=ms_torch / ms_tk if ms_tk else float("nan"),
                   tilekit_vs_triton=ms_triton / ms_tk if ms_tk else float("nan"),
                   err_tilekit=err_tk, err_triton=err_triton)
        rows_out.append(row)
        print(f"{name:34s} tk {row['tilekit_gbs']:7.0f} GB/s ({row['tilekit_vs_copy']:.2f}x copy,"
              f" {row['tilekit_vs_peak_copy']:.2f}x peak; copy {same:.0f})"
              f"  triton {row['triton_gbs']:7.0f} ({row['triton_vs_copy']:.2f}x)  torch "
              f"{row['torch_gbs']:7.0f}  tk/torch {row['tilekit_vs_torch']:.2f} "
              f"tk/triton {row['tilekit_vs_triton']:.2f}  err {err_tk:.1e}", flush=True)

    def guarded(name, fn):
        try:
            fn()
        except Exception as exc:  # one broken case must not hide the others
            print(f"{name:34s} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}",
                  flush=True)
            rows_out.append(dict(case=name, error=f"{type(exc).__name__}: {exc}"[:500]))

    # vector add, 2^28 float32
    def vec_add():
        n = 2**28
        x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
        out = torch.full_like(x, float("nan"))
        tk_add[tk.cdiv(n, 1024)](x, y, out, n, BLOCK=1024)
        err = rel_err(torch, out, x.double() + y.double())
        out_t = torch.full_like(x, float("nan"))
        T["add"][(triton.cdiv(n, 1024),)](x, y, out_t, n, BLOCK=1024)
        err_t = rel_err(torch, out_t, x.double() + y.double())
        ms = median_ms(torch, lambda: tk_add[tk.cdiv(n, 1024)](x, y, out, n, BLOCK=1024), reps)
        ms_t = median_ms(torch, lambda: T["add"][(triton.cdiv(n, 1024),)](x, y, out_t, n,
                                                                          BLOCK=1024), reps)
        ms_torch = median_ms(torch, lambda: torch.add(x, y, out=out_t), reps)
        record("vector add 2^28 f32", 3 * n * 4, ms, ms_torch, ms_t, err, err_t)

    guarded("vector add", vec_add)

    shapes = [(8192, 8192), (4096, 4097)]
    dtypes = [torch.float32, torch.bfloat16]

    def row_case(kind, M, N, dt, triton_warps=(8,), rows_per_program=1):
        """``triton_warps``: Triton runs with each and keeps its fastest (for short rows,
        where its default of 4 warps is not its best); ``rows_per_program``: tilekit's
        softmax over ``(R, N)`` tiles (``tk_softmax_rows``) instead of one row each."""
        x = (torch.randn(M, N, device=dev) * 2 + 0.5).to(dt)
        w = torch.randn(N, device=dev).to(dt)
        b = torch.randn(N, device=dev).to(dt)
        eps = 1e-5
        x64 = x.double()
        if kind == "softmax":
            ref = torch.softmax(x64, dim=1)
            run_tk = lambda y: tk_softmax[M](x, y, N=N)  # noqa: E731
            if rows_per_program > 1:
                R = rows_per_program
                run_tk = lambda y: tk_softmax_rows[tk.cdiv(M, R)](x, y, R=R, N=N)  # noqa: E731
            run_tr = lambda y, w=8: T["softmax"][(M,)](  # noqa: E731
                x, y, N, N, BLOCK=triton.next_power_of_2(N), num_warps=w)
            run_torch = lambda: torch.softmax(x, dim=1)  # noqa: E731
            nbytes = 2 * M * N * x.element_size()
        elif kind == "layer_norm":
            ref = torch.nn.functional.layer_norm(x64, (N,), w.double(), b.double(), eps)
            run_tk = lambda y: tk_layer_norm[M](x, w, b, y, eps, N=N)  # noqa: E731
            run_tr = lambda y, w_=8: T["layer_norm"][(M,)](  # noqa: E731
                x, w, b, y, N, N, eps, BLOCK=triton.next_power_of_2(N), num_warps=w_)
            run_torch = lambda: torch.nn.functional.layer_norm(x, (N,), w, b, eps)  # noqa: E731
            nbytes = 2 * M * N * x.element_size() + 2 * N * w.element_size()
        else:
            ref = x64 * torch.rsqrt((x64 * x64).mean(1, keepdim=True) + eps) * w.double()
            run_tk = lambda y: tk_rms_norm[M](x, w, y, eps, N=N)  # noqa: E731
            run_tr = lambda y, w_=8: T["rms_norm"][(M,)](  # noqa: E731
                x, w, y, N, N, eps, BLOCK=triton.next_power_of_2(N), num_warps=w_)
            run_torch = lambda: torch.nn.functional.rms_norm(x, (N,), w, eps)  # noqa: E731
            nbytes = 2 * M * N * x.element_size() + N * w.element_size()
        y = torch.full_like(x, float("nan"))
        run_tk(y)
        err = rel_err(torch, y, ref)
        ms = median_ms(torch, lambda: run_tk(y), reps)
        err_t, ms_t, best_w = float("nan"), float("inf"), None
        for w_ in triton_warps:
            yt = torch.full_like(x, float("nan"))
            run_tr(yt, w_)
            err_w = rel_err(torch, yt, ref)
            ms_w = median_ms(torch, lambda w_=w_, yt=yt: run_tr(yt, w_), reps)
            if ms_w < ms_t:
                err_t, ms_t, best_w = err_w, ms_w, w_
        ms_torch = median_ms(torch, run_torch, reps)
        name = f"{kind} {M}x{N} {str(dt).removeprefix('torch.')}"
        if rows_per_program > 1:
            name += f" ({rows_per_program} rows/program)"
        if len(triton_warps) > 1:
            name += f" [triton {best_w}w]"
        record(name, nbytes, ms, ms_torch, ms_t, err, err_t)

    for kind in ("softmax", "layer_norm", "rms_norm"):
        for M, N in shapes:
            for dt in dtypes:
                guarded(f"{kind} {M}x{N} {dt}",
                        lambda k=kind, M=M, N=N, dt=dt: row_case(k, M, N, dt))

    # Many short rows, one per program (2^25 elements): tilekit's warps follow the row
    # (occupancy._SMALL_ROW_MAX_WARPS), Triton's fastest of 1, 2 and 4 warps is kept; rows
    # of 128 also as (8, 128) tiles, the way to write them.
    f32, bf16 = torch.float32, torch.bfloat16
    small = [("softmax", 131072, 256, f32, 1), ("softmax", 65536, 512, bf16, 1),
             ("softmax", 33554, 1000, bf16, 1), ("rms_norm", 33554, 1000, bf16, 1),
             ("softmax", 262144, 128, bf16, 1), ("softmax", 262144, 128, bf16, 8)]
    for kind, M, N, dt, R in small:
        guarded(f"{kind} {M}x{N} {dt} R={R}",
                lambda k=kind, M=M, N=N, dt=dt, R=R: row_case(k, M, N, dt, (1, 2, 4), R))

    def transpose_case(M, N):
        """Each side's best of the same seven tile shapes (checked before timing)."""
        x = torch.randn(M, N, device=dev).to(torch.bfloat16)
        configs = [(64, 64), (128, 64), (64, 128), (128, 128), (256, 32), (256, 64), (32, 256)]
        best: dict[str, tuple[float, tuple[int, int]]] = {}
        errs = {}
        for BM, BN in configs:
            grid = (tk.cdiv(M, BM), tk.cdiv(N, BN))
            runs = {
                "tk": lambda y, BM=BM, BN=BN, grid=grid: tk_transpose[grid](x, y, BM=BM, BN=BN),
                "triton": lambda y, BM=BM, BN=BN, grid=grid: T["transpose"][grid](
                    x, y, M, N, BM=BM, BN=BN),
            }
            for who, run in runs.items():
                y = torch.full((N, M), float("nan"), device=dev, dtype=torch.bfloat16)
                run(y)
                errs[who] = max(errs.get(who, 0.0),
                                0.0 if torch.equal(y, x.t()) else float("nan"))
                ms = median_ms(torch, lambda run=run, y=y: run(y), reps)
                if who not in best or ms < best[who][0]:
                    best[who] = (ms, (BM, BN))
        ms_torch = median_ms(torch, lambda: x.t().contiguous(), reps)
        print(f"transpose {M}x{N}: tilekit tile {best['tk'][1]}, Triton tile "
              f"{best['triton'][1]}", flush=True)
        record(f"transpose {M}x{N} bf16", 2 * M * N * 2, best["tk"][0], ms_torch,
               best["triton"][0], errs["tk"], errs["triton"])

    for M, N in [(8192, 8192), (8191, 8193)]:
        guarded(f"transpose {M}x{N}", lambda M=M, N=N: transpose_case(M, N))

    # One kernel that branches per tile class, or separate launches? A grid of (1, 1024)
    # copy tiles over 8192 columns has no tail class (the size fact holds: no bounds
    # checks at all); over 8200 columns (of rows padded to 8448, so alignment is the same)
    # the last tile of each row is a tail, and every tile pays the one branch per access.
    # Separate launches would make the core tiles the first case's kernel and add a
    # second launch for the tails.
    tile_classes = []

    def classes_case(cols: int) -> None:
        big = torch.randn(8192, 8448, device=dev)
        x, y = big[:, :cols], torch.full((8192, 8448), float("nan"), device=dev)[:, :cols]
        grid = (8192, tk.cdiv(cols, 1024))
        tk_copy_tiles[grid](x, y, BN=1024)
        assert torch.equal(y, x)
        ms = median_ms(torch, lambda: tk_copy_tiles[grid](x, y, BN=1024), reps)
        gbs = 2 * x.numel() * 4 / ms / 1e6
        tile_classes.append(dict(cols=cols, ms=ms, gbs=gbs))
        print(f"copy tiles (1,1024) of 8192x{cols} f32 {'(tail class)' if cols % 1024 else ''}"
              f"{gbs:9.0f} GB/s ({ms * 1e3:.1f} us)", flush=True)

    for cols in (8192, 8200):
        guarded(f"tile classes {cols}", lambda cols=cols: classes_case(cols))

    result = {"bench": "memory_bound", **environment(), "gpu": torch.cuda.get_device_name(0),
              "copy_gbs": copy_bw, "rows": rows_out, "tile_classes": tile_classes}
    print(f"peak copy (torch d2d of 1 GiB, read+write): {copy_bw:.0f} GB/s on {result['gpu']};"
          " 'x copy' is against a copy of the case's own byte count")
    write_json("memory_bound", result, Path(args.out) if args.out else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
