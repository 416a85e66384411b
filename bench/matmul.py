"""Matmul, side by side: tilekit vs cuBLAS (torch) vs Triton, in one run (issue 9).

bf16 inputs, fresh random for every shape, f32 accumulation everywhere; TFLOP/s count
2*M*N*K. What each side writes:

* tilekit: every matmul kernel of ``examples/matmul.py`` (``matmul`` today; any other one
  it exports later, e.g. a pipelined one, whose name holds "matmul" and whose parameters
  are ``(A, B, C, K, BM, BN, BK, ...)``), each its best over a few tiles (BM, BN, BK)
  and, for a kernel that takes ``STAGES``, stage counts (3, 4 and 6), named in the table;
  C float32. A config that does not compile or fit (shared memory, registers) is skipped
  with the reason printed; one over 3x slower than the best so far keeps a rough time.
  Each runs on one program per block of C, but for two, which have rows of their own:
  ``matmul_persistent`` on ``persistent_grid`` programs (one per SM, at most one per
  block; ``--set PROGRAMS=N`` fixes N), its label saying ``P=N``; and ``matmul_split_k``,
  on the skinny shapes only (M <= 128), launched with its reduction by ``run_split_k``
  (both kernels are timed, the workspace allocated once), ``SPLIT_K`` picked by
  ``split_k_for``: 1 when C's blocks alone fill the SMs (the config is then skipped:
  that is ``matmul_pipelined`` plus a copy), else as few slices as give every SM a
  program, ``cdiv(SMs, blocks)``, but no more than leave 8 K steps per slice
  (``--set SPLIT_K=N`` fixes N); its label says ``SPLIT_K=N``. ``--kernels`` takes a
  kernel's name with or without its ``matmul_`` (``persistent``, ``split_k``).
* cuBLAS: ``torch.matmul`` (bf16 out, what users get) and, where this torch has
  ``torch.mm(..., out_dtype=torch.float32)``, f32 out (the same output as tilekit's).
* Triton: the tutorial-style matmul (grouped program order) under ``@triton.autotune``
  over the usual configs, written here; its output dtype is ``--triton-out`` (float32 by
  default, as tilekit's). Without Triton its columns are empty.

Every result is checked before it is timed: the output is poisoned (NaN), written once,
and compared with a float64 reference, max |out - ref| / max |ref| below 1e-2 for a bf16
output and 1e-4 for a float32 one; a wrong result prints WRONG and is not timed.
Times are medians of CUDA-event timings; a call shorter than 1 ms is timed in batches (the
host's launch cost then overlaps the device's work), and the repetitions of a slow call
are cut so that each measurement takes about half a second. The ratios divide tilekit's
TFLOP/s by the other's (above 1: tilekit is faster). Prints a table and writes
``bench/results/matmul.json``.

    python3 bench/matmul.py [--out DIR] [--quick] [--shapes MxNxK,...] [--tiles BMxBNxBK,...]
                            [--kernels NAME,...] [--set NAME=VALUE] [--tk-out {bf16,f32}]
                            [--triton-out {bf16,f32}] [--no-triton] [--seed N]
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import argparse
import importlib
import inspect
import itertools
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

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

Shape = tuple[int, int, int]  # (M, N, K): C[M, N] = A[M, K] @ B[K, N]
Tile = tuple[int, int, int]  # (BM, BN, BK)

# The shapes. The misaligned one runs last: its rows of 8092 bf16 are not 16-byte
# multiples, and a fault there (a misaligned vector access) would poison the CUDA context
# for every shape after it.
SHAPES: list[Shape] = [(8192, 8192, 8192), (4096, 4096, 4096), (4113, 4096, 4096),
                       (16, 8192, 8192), (128, 8192, 8192), (8155, 8192, 8092)]
QUICK_SHAPES: list[Shape] = [(4096, 4096, 4096), (4113, 4096, 4096), (16, 8192, 8192)]

TILES: list[Tile] = [(64, 64, 32), (128, 64, 32), (128, 128, 32), (128, 128, 64), (64, 128, 32),
                     (64, 128, 64), (128, 256, 64)]
# Also tried when M <= 128: a BM of 64 or more computes mostly masked rows there.
SKINNY_TILES: list[Tile] = [(16, 128, 64), (32, 128, 64), (16, 256, 64)]
# Values tried for the constexprs beyond BM, BN, BK that a kernel takes without a default
# (``matmul_pipelined``'s stage count), every tile with each; ``--set NAME=VALUE`` fixes one.
SWEEPS: dict[str, tuple[int, ...]] = {"STAGES": (3, 4, 6)}  # 6: skinny M wants depth
QUICK_SWEEPS: dict[str, tuple[int, ...]] = {"STAGES": (3,)}

# M up to this is skinny: the SKINNY_TILES are tried and split-K runs.
SKINNY_M = 128
# ``--set`` names that choose how a kernel is launched rather than a constexpr.
LAUNCH_SETTINGS = ("PROGRAMS", "SPLIT_K")

# Triton's configs: (BM, BN, BK, stages, warps), the tutorial's CUDA list and two more
# for small M.
TRITON_CONFIGS = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (64, 256, 32, 4, 4),
                  (128, 128, 64, 4, 8), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
                  (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2),
                  (32, 64, 32, 5, 2), (32, 128, 64, 4, 4), (16, 128, 128, 4, 4)]

# max |out - ref| / max |ref| allowed, by output dtype: bf16 rounding alone is 2^-9 of an
# element; f32 accumulation over K <= 8192 stays near 1e-6.
TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-2, "float32": 1e-4}

# tilekit's C dtype (``--tk-out``)
TK_OUT = "float32"

BATCH_MS = 1.0  # calls shorter than this are timed in batches
MIN_REPS = 5
# A tilekit config slower than this many times the best so far keeps its rough time (the
# median of two calls): a slow config at 8192^3 would otherwise cost seconds.
ROUGH_FACTOR = 3.0


# --- parsing the options ----------------------------------------------------------------------

def parse_triples(text: str) -> list[tuple[int, int, int]]:
    """"8192x8192x8192,16x8192x8192" -> [(8192, 8192, 8192), (16, 8192, 8192)]."""
    out = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"{item!r} is not AxBxC (three positive ints)")
        out.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return out


def parse_setting(text: str) -> tuple[str, int]:
    """"STAGES=3" -> ("STAGES", 3): a constexpr for kernels that take more than BM, BN, BK."""
    name, _, value = text.partition("=")
    try:
        return name.strip(), int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=INT") from None


def label(t: Sequence[int]) -> str:
    return "x".join(str(v) for v in t)


def config_label(tile: Sequence[int], extra: dict[str, int]) -> str:
    """"128x128x32" or "128x128x32 STAGES=3"."""
    return " ".join([label(tile), *(f"{k}={v}" for k, v in extra.items())])


def tiles_for(shape: Shape, tiles: list[Tile], skinny: bool) -> list[Tile]:
    """The tiles tried on ``shape``: the list, plus the skinny ones when M is small."""
    extra = [t for t in SKINNY_TILES if t not in tiles] if skinny and shape[0] <= SKINNY_M \
        else []
    return tiles + extra


# --- checks ----------------------------------------------------------------------------------

def tolerance(dtype_name: str) -> float:
    return TOLERANCE.get(dtype_name, 1e-2)


def dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def max_relative_error(got: Any, ref: Any, ref_max: float) -> float:
    """max |got - ref| / max |ref| (``ref`` float64); NaN when ``got`` kept a NaN of the
    poisoning, i.e. an element was never written."""
    return float((got.double() - ref).abs().max()) / max(ref_max, 1e-30)


def verdict(err: float, dtype: str) -> tuple[bool, str]:
    """Whether an error passes for an output of ``dtype``, and the words for it."""
    tol = tolerance(dtype)
    ok = math.isfinite(err) and err <= tol
    return ok, f"err {err:.1e}" + ("" if ok else f" WRONG (tolerance {tol:.0e})")


def short(exc: BaseException) -> str:
    """One line saying why: a TilekitError's message (without the source excerpt), else the
    exception's first line."""
    text = getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__}: {(text.splitlines() or [''])[0]}"[:240]


# --- timing ----------------------------------------------------------------------------------

def measure(fn: Callable[[], Any], budget_ms: float, max_reps: int,
            cutoff_ms: float = math.inf) -> float:
    """Median milliseconds of one ``fn()`` (already run once: warm). Calls shorter than
    ``BATCH_MS`` are timed in batches, so that the device, not the host's launch, sets the
    time; the repetitions are cut so that one measurement takes about ``budget_ms``. A call
    slower than ``cutoff_ms`` returns its first estimate (two calls)."""
    once = cuda_events_median(fn, reps=2, warmup=0)
    if once > cutoff_ms:
        return once
    batch = max(1, math.ceil(BATCH_MS / max(once, 1e-3)))
    reps = int(min(max_reps, max(MIN_REPS, budget_ms / (once * batch))))
    if batch == 1:
        return cuda_events_median(fn, reps, warmup=1)

    def many() -> None:
        for _ in range(batch):
            fn()

    return cuda_events_median(many, reps, warmup=1) / batch


def tflops(shape: Shape, ms: float | None) -> float | None:
    M, N, K = shape
    return 2 * M * N * K / ms / 1e9 if ms else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


# --- tilekit ---------------------------------------------------------------------------------

Kernels = dict[str, tuple[Any, list[dict[str, int]]]]  # name -> (kernel, extra constexprs)


def tilekit_matmuls(only: Sequence[str] | None, settings: dict[str, int],
                    sweeps: dict[str, tuple[int, ...]]) -> tuple[Kernels, list[str]]:
    """The matmul kernels of ``examples/matmul.py`` this bench can call, each with the
    values of its constexprs beyond BM, BN, BK to try (``--set``'s value, else the sweep's;
    one with a default keeps it), and a note for each kernel left out."""
    from tilekit.lang.kernel import ParamKind

    module = importlib.import_module("examples.matmul")
    found: Kernels = {}
    notes: list[str] = []
    for name, obj in vars(module).items():
        if not isinstance(obj, tk.JITKernel) or "matmul" not in name:
            continue
        if only and name not in only and name.removeprefix("matmul_") not in only:
            continue
        consts = [p for p in obj.params if p.kind is ParamKind.CONSTEXPR]
        others = [p for p in obj.params if p.kind is not ParamKind.CONSTEXPR]
        names = {p.name for p in consts}
        if len(others) != 4 or not {"BM", "BN", "BK"} <= names:
            notes.append(f"tilekit `{name}` left out: its parameters "
                         f"({', '.join(p.name for p in obj.params)}) are not "
                         "(A, B, C, K, BM, BN, BK, ...)")
            continue
        values: dict[str, tuple[int, ...]] = {}
        missing = []
        for p in consts:
            if p.name in ("BM", "BN", "BK"):
                continue
            if p.name in settings:
                values[p.name] = (settings[p.name],)
            elif p.default is inspect.Parameter.empty:
                if p.name in sweeps:
                    values[p.name] = sweeps[p.name]
                else:
                    missing.append(p.name)
        if missing:
            notes.append(f"tilekit `{name}` left out: it needs {', '.join(missing)} "
                         f"(pass --set {missing[0]}=VALUE)")
            continue
        found[name] = (obj, [dict(zip(values, combo))
                             for combo in itertools.product(*values.values())])
    if only:
        known = {*found, *(n.removeprefix("matmul_") for n in found)}
        notes += [f"tilekit `{n}`: examples/matmul.py has no such kernel" for n in only
                  if n not in known and not any(f"`{n}`" in note or f"`matmul_{n}`" in note
                                                for note in notes)]
    return found, notes


def resources(kern: Any, args: tuple[Any, ...], consts: dict[str, int]) -> tuple[dict, str | None]:
    """What a config compiles to (threads, shared memory, registers, spills), asked of the
    autotuner's probe (it compiles and loads, so the launch after compiles nothing), and why
    it cannot run on this device, if so. Empty when the probe itself fails: the launch
    then says what is wrong."""
    try:
        from tilekit.tune.probe import probe_gpu, prune_reasons

        report = probe_gpu(kern, kern.bind(args, dict(consts), None), None)
    except Exception:  # the launch reports a compile failure with the kernel's line
        return {}, None
    found = dict(threads=report.threads, shared_bytes=report.shared_bytes,
                 registers=report.registers, spill_bytes=report.local_bytes)
    return found, prune_reasons({0: report}).get(0)


def describe(res: dict) -> str:
    """" (128 thr, 32 KiB smem, 168 regs)", or "" when the probe said nothing."""
    if not res:
        return ""
    parts = [f"{res['threads']} thr" if res.get("threads") else "",
             f"{res['shared_bytes'] / 1024:.0f} KiB smem" if res.get("shared_bytes") else "",
             f"{res['registers']} regs" if res.get("registers") else "",
             f"SPILLS {res['spill_bytes']} B" if res.get("spill_bytes") else ""]
    return " (" + ", ".join(p for p in parts if p) + ")"


class Launch(NamedTuple):
    """How one config runs: ``run()`` computes C; ``args`` are the kernel's own arguments
    (for the resource probe); ``choices`` are the launch's choices beyond the constexprs
    (named in the label); ``skip`` says why it does not run on this shape, if so."""

    run: Callable[[], None]
    args: tuple[Any, ...]
    choices: dict[str, int]
    skip: str | None = None


def applies(name: str, shape: Shape) -> bool:
    """Whether a kernel has a row for ``shape``: split-K for the skinny shapes only."""
    return name != "matmul_split_k" or shape[0] <= SKINNY_M


def launch_for(torch: Any, name: str, kern: Any, shape: Shape, consts: dict[str, int],
               a: Any, b: Any, c: Any, settings: dict[str, int], sms: int) -> Launch:
    """One program per block of C; ``matmul_persistent`` on ``persistent_grid`` programs;
    ``matmul_split_k`` with its workspace and reduction (``run_split_k``), SPLIT_K by
    ``split_k_for`` (or ``--set``)."""
    M, N, K = shape
    BM, BN, BK = consts["BM"], consts["BN"], consts["BK"]
    ex = importlib.import_module("examples.matmul")
    if name == "matmul_persistent":
        programs = settings.get("PROGRAMS") or ex.persistent_grid(M, N, BM, BN, sms)
        return Launch(lambda: kern[programs](a, b, c, K, **consts), (a, b, c, K),
                      dict(P=programs))
    if name == "matmul_split_k":
        split = settings.get("SPLIT_K") or ex.split_k_for(M, N, K, BM, BN, BK, sms)
        workspace = torch.empty(split, M, N, device=a.device, dtype=torch.float32)
        steps = torch.zeros(ex.split_k_steps(K, BK, split), device=a.device, dtype=torch.int32)
        skip = None if split > 1 else ("SPLIT_K=1: the blocks fill the SMs (that is "
                                       "matmul_pipelined plus a copy)")
        return Launch(lambda: ex.run_split_k(a, b, c, BM, BN, BK, consts["STAGES"], split,
                                             workspace, steps),
                      (a, b, workspace, steps), dict(SPLIT_K=split), skip)
    grid = (tk.cdiv(M, BM), tk.cdiv(N, BN))
    return Launch(lambda: kern[grid](a, b, c, K, **consts), (a, b, c, K), {})


def run_tilekit(torch: Any, name: str, kern: Any, extras: list[dict[str, int]], shape: Shape,
                tiles: list[Tile], a: Any, b: Any, ref: Any, ref_max: float,
                timing: dict[str, Any], settings: dict[str, int], sms: int) -> dict[str, Any]:
    """Every config (tile, and extra constexprs) of one tilekit kernel on one shape: checked,
    then timed; the best."""
    M, N, K = shape
    c = torch.empty(M, N, device=a.device, dtype=getattr(torch, TK_OUT))
    configs = []
    for tile, extra in itertools.product(tiles, extras):
        BM, BN, BK = tile
        consts = dict(BM=BM, BN=BN, BK=BK, **extra)
        launch = launch_for(torch, name, kern, shape, consts, a, b, c, settings, sms)
        entry: dict[str, Any] = dict(tile=list(tile), constexprs=consts, launch=launch.choices,
                                     label=config_label(tile, {**extra, **launch.choices}))
        configs.append(entry)
        head = f"  tilekit {name} {entry['label']}"
        if launch.skip:
            entry["skipped"] = launch.skip
            print(f"{head}: skipped, {launch.skip}", flush=True)
            continue
        res, why = resources(kern, launch.args, consts)
        entry["resources"] = res
        if why:
            entry["skipped"] = why
            print(f"{head}: skipped, {why}", flush=True)
            continue
        run = launch.run

        try:
            c.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
        except Exception as exc:  # a tile that does not compile or launch is skipped, and said
            entry.update(skipped=short(exc), detail=str(exc)[:2000])
            print(f"{head}: skipped, {short(exc)}", flush=True)
            continue
        err = max_relative_error(c, ref, ref_max)
        ok, words = verdict(err, dtype_name(c))
        entry.update(error=err, ok=ok)
        if not ok:
            print(f"{head}: {words}{describe(res)}", flush=True)
            continue
        cutoff = ROUGH_FACTOR * min((e["ms"] for e in configs if "ms" in e), default=math.inf)
        ms = measure(run, **timing, cutoff_ms=cutoff)
        entry.update(ms=ms, tflops=tflops(shape, ms), rough=ms > cutoff)
        print(f"{head}: {ms:8.3f} ms {entry['tflops']:7.1f} TFLOP/s  {words}{describe(res)}"
              + (f" (rough: over {ROUGH_FACTOR:.0f}x the best)" if ms > cutoff else ""),
              flush=True)
    timed = [e for e in configs if "ms" in e]
    best = min(timed, key=lambda e: e["ms"]) if timed else None
    return dict(kernel=name, out_dtype=TK_OUT, configs=configs, best=best,
                wrong=any(e.get("ok") is False for e in configs))


# --- cuBLAS ----------------------------------------------------------------------------------

def run_cublas(torch: Any, shape: Shape, a: Any, b: Any, ref: Any, ref_max: float,
               timing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """torch.matmul (bf16 out) and torch.mm with out_dtype=float32 where torch has it."""
    M, N, _ = shape
    out: dict[str, dict[str, Any]] = {}
    c16 = torch.empty(M, N, device=a.device, dtype=torch.bfloat16)
    c32 = torch.empty(M, N, device=a.device, dtype=torch.float32)
    calls = {"bfloat16": lambda: torch.matmul(a, b, out=c16),
             "float32": lambda: torch.mm(a, b, out_dtype=torch.float32, out=c32)}
    for dt, call in calls.items():
        target = c16 if dt == "bfloat16" else c32
        target.fill_(float("nan"))
        try:
            got = call()
            torch.cuda.synchronize()
        except (TypeError, RuntimeError, NotImplementedError) as exc:
            if dt == "bfloat16":
                raise
            try:  # out_dtype= without out=: a fresh output each call
                call = lambda: torch.mm(a, b, out_dtype=torch.float32)  # noqa: E731
                got = call()
                torch.cuda.synchronize()
            except (TypeError, RuntimeError, NotImplementedError):
                out[dt] = dict(skipped=f"torch.mm(..., out_dtype=torch.float32): {short(exc)}")
                print(f"  cuBLAS -> {dt}: not in this torch ({short(exc)})", flush=True)
                continue
        err = max_relative_error(got, ref, ref_max)
        ok, words = verdict(err, dtype_name(got))
        entry: dict[str, Any] = dict(out_dtype=dtype_name(got), error=err, ok=ok)
        out[dt] = entry
        if ok:
            entry["ms"] = measure(call, **timing)
            entry["tflops"] = tflops(shape, entry["ms"])
            print(f"  cuBLAS -> {dt}: {entry['ms']:8.3f} ms {entry['tflops']:7.1f} TFLOP/s  "
                  f"{words}", flush=True)
        else:
            print(f"  cuBLAS -> {dt}: {words}", flush=True)
    return out


# --- Triton ----------------------------------------------------------------------------------

def triton_matmul() -> tuple[Any, Any] | None:
    """(triton, the autotuned kernel), or None when Triton is not installed. The kernel:
    one program per (BM, BN) tile of C, programs ordered in groups of GROUP tile rows (so
    that the columns of B a group reads stay in L2), rows and columns past the edge wrapped
    (their results are not stored), K masked, f32 accumulation, C in its own dtype."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_stages=s,
                             num_warps=w) for bm, bn, bk, s, w in TRITON_CONFIGS]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def matmul_kernel(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        per_group = GROUP * tiles_n
        group_first = (pid // per_group) * GROUP
        group_rows = tl.minimum(tiles_m - group_first, GROUP)
        pid_m = group_first + (pid % per_group) % group_rows
        pid_n = (pid % per_group) // group_rows

        rows = (pid_m * BM + tl.arange(0, BM)) % M
        cols = (pid_n * BN + tl.arange(0, BN)) % N
        ks = tl.arange(0, BK)
        a_ptrs = A + rows[:, None] * stride_am + ks[None, :] * stride_ak
        b_ptrs = B + ks[:, None] * stride_bk + cols[None, :] * stride_bn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            left = K - k * BK
            a = tl.load(a_ptrs, mask=ks[None, :] < left, other=0.0)
            b = tl.load(b_ptrs, mask=ks[:, None] < left, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BK * stride_ak
            b_ptrs += BK * stride_bk

        out_m = pid_m * BM + tl.arange(0, BM)
        out_n = pid_n * BN + tl.arange(0, BN)
        c_ptrs = C + out_m[:, None] * stride_cm + out_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(C.dtype.element_ty),
                 mask=(out_m[:, None] < M) & (out_n[None, :] < N))

    return triton, matmul_kernel


def triton_config_label(config: Any) -> str:
    """"BM=128, BN=256, BK=64, GROUP=8, warps=8, stages=3" for a ``triton.Config``."""
    if config is None:
        return "?"
    return ", ".join([*(f"{k}={v}" for k, v in getattr(config, "kwargs", {}).items()),
                      f"warps={getattr(config, 'num_warps', '?')}",
                      f"stages={getattr(config, 'num_stages', '?')}"])


def run_triton(torch: Any, triton_and_kernel: tuple[Any, Any], shape: Shape, a: Any, b: Any,
               out_dtype: Any, ref: Any, ref_max: float,
               timing: dict[str, Any]) -> dict[str, Any]:
    """Tune (the first call), then check a fresh result, then time the chosen config."""
    triton, kernel = triton_and_kernel
    M, N, K = shape
    c = torch.empty(M, N, device=a.device, dtype=out_dtype)

    def grid(meta: dict[str, int]) -> tuple[int]:
        return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

    def run() -> None:
        kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                     c.stride(0), c.stride(1))

    t0 = time.perf_counter()
    run()  # autotunes for (M, N, K) and the dtypes
    torch.cuda.synchronize()
    tune_s = time.perf_counter() - t0
    chosen = triton_config_label(getattr(kernel, "best_config", None))
    c.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    err = max_relative_error(c, ref, ref_max)
    ok, words = verdict(err, dtype_name(c))
    entry: dict[str, Any] = dict(out_dtype=dtype_name(c), config=chosen, tune_s=tune_s,
                                 error=err, ok=ok)
    if ok:
        entry["ms"] = measure(run, **timing)
        entry["tflops"] = tflops(shape, entry["ms"])
        print(f"  Triton -> {dtype_name(c)}: {entry['ms']:8.3f} ms {entry['tflops']:7.1f} "
              f"TFLOP/s  {words}  ({chosen}; tuned in {tune_s:.1f} s)", flush=True)
    else:
        print(f"  Triton -> {dtype_name(c)}: {words} ({chosen})", flush=True)
    return entry


# --- one shape -------------------------------------------------------------------------------

def run_shape(torch: Any, shape: Shape, kernels: Kernels,
              tiles: list[Tile], triton_and_kernel: tuple[Any, Any] | None,
              triton_out: Any, timing: dict[str, Any], settings: dict[str, int],
              sms: int) -> dict[str, Any]:
    M, N, K = shape
    dev = torch.device("cuda")
    print(f"{label(shape)} ({2 * M * N * K / 1e9:.0f} GFLOP)", flush=True)
    a = torch.randn(M, K, device=dev).to(torch.bfloat16)
    b = torch.randn(K, N, device=dev).to(torch.bfloat16)
    ref = a.double() @ b.double()  # exact products of bf16 values, f64 sums
    ref_max = float(ref.abs().max())
    result: dict[str, Any] = dict(shape=list(shape), gflop=2 * M * N * K / 1e9, tilekit={})

    def guarded(what: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return run()
        except Exception as exc:  # one side failing must not hide the others
            print(f"  {what}: FAILED {short(exc)}", flush=True)
            return dict(error_text=short(exc), detail=str(exc)[:2000])

    for name, (kern, extras) in kernels.items():
        if not applies(name, shape):
            continue
        result["tilekit"][name] = guarded(f"tilekit {name}", lambda n=name, k=kern, e=extras: (
            run_tilekit(torch, n, k, e, shape, tiles, a, b, ref, ref_max, timing, settings,
                        sms)))
    result["cublas"] = guarded("cuBLAS", lambda: run_cublas(torch, shape, a, b, ref, ref_max,
                                                           timing))
    if triton_and_kernel is not None:
        result["triton"] = guarded("Triton", lambda: run_triton(
            torch, triton_and_kernel, shape, a, b, triton_out, ref, ref_max, timing))
    return result


def table_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per shape and tilekit kernel (one per shape when no kernel ran)."""
    rows = []
    for r in results:
        shape = tuple(r["shape"])
        cublas = r.get("cublas", {})
        sides = {"cublas_bf16": cublas.get("bfloat16", {}), "cublas_f32": cublas.get("float32", {}),
                 "triton": r.get("triton", {})}
        bf16, f32, triton = (side.get("tflops") for side in sides.values())
        for name, tk_result in (r.get("tilekit") or {"-": None}).items():
            tk_result = tk_result or {}
            best = tk_result.get("best")
            tk_tflops = best["tflops"] if best else None
            wrong = [e["label"] for e in tk_result.get("configs", []) if e.get("ok") is False]
            if best:
                what = f"{name} {best['label']}"
            elif "error_text" in tk_result:
                what = f"{name} FAILED"
            elif not tk_result:
                what = "-"
            else:
                what = name if wrong else f"{name} (no config ran)"
            if wrong:
                what += f" (WRONG: {', '.join(wrong)})"
            rows.append(dict(shape=label(shape), tilekit=what,
                             tilekit_ms=best["ms"] if best else None, tilekit_tflops=tk_tflops,
                             cublas_bf16_tflops=bf16, cublas_f32_tflops=f32,
                             triton_tflops=triton, tk_vs_cublas=ratio(tk_tflops, bf16),
                             tk_vs_cublas_f32=ratio(tk_tflops, f32),
                             tk_vs_triton=ratio(tk_tflops, triton),
                             wrong=[side for side, e in sides.items() if e.get("ok") is False],
                             error=r.get("error_text")))
    return rows


def main() -> int:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help=f"shapes {', '.join(label(s) for s in QUICK_SHAPES)} and fewer repeats")
    p.add_argument("--shapes", type=parse_triples, default=None,
                   help="MxNxK,... instead of the issue's shapes")
    p.add_argument("--tiles", type=parse_triples, default=None,
                   help=f"tilekit tiles BMxBNxBK,... (default {','.join(map(label, TILES))}, "
                        f"plus {','.join(map(label, SKINNY_TILES))} when M <= 128)")
    p.add_argument("--kernels", default=None,
                   help="the tilekit kernels of examples/matmul.py to run, NAME,... with or "
                        "without matmul_ (e.g. pipelined,persistent,split_k; default: every "
                        "matmul kernel it exports)")
    p.add_argument("--set", dest="settings", type=parse_setting, action="append", default=[],
                   metavar="NAME=VALUE",
                   help="a constexpr for tilekit kernels that take more than BM, BN, BK "
                        "(e.g. STAGES=3: only that value, instead of the sweep "
                        f"{' '.join(f'{k}={v}' for k, v in SWEEPS.items())}), or a launch "
                        "choice: PROGRAMS=N for matmul_persistent, SPLIT_K=N for "
                        "matmul_split_k; repeatable")
    p.add_argument("--tk-out", choices=["bf16", "f32"], default="f32",
                   help="tilekit's output dtype, C (default f32; bf16 is what "
                        "torch.matmul, the tk/cuBLAS column, writes)")
    p.add_argument("--triton-out", choices=["bf16", "f32"], default="f32",
                   help="Triton's output dtype (default f32, as tilekit's)")
    p.add_argument("--no-triton", action="store_true", help="leave Triton out")
    p.add_argument("--seed", type=int, default=None, help="torch's seed (default: the time)")
    args = p.parse_args()

    torch = require_gpu()
    global TK_OUT
    TK_OUT = "bfloat16" if args.tk_out == "bf16" else "float32"
    env = environment()
    print_header(env)
    seed = args.seed if args.seed is not None else int(time.time())
    torch.manual_seed(seed)
    shapes = args.shapes or (QUICK_SHAPES if args.quick else SHAPES)
    timing = dict(budget_ms=200.0 if args.quick else 500.0, max_reps=10 if args.quick else 20)
    only = [n.strip() for n in args.kernels.split(",")] if args.kernels else None
    sweeps = QUICK_SWEEPS if args.quick else SWEEPS
    launch_settings = {k: v for k, v in args.settings if k in LAUNCH_SETTINGS}
    kernels, notes = tilekit_matmuls(only, dict(args.settings), sweeps)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    triton_and_kernel = None if args.no_triton else triton_matmul()
    if triton_and_kernel is None:
        notes.append("Triton: " + ("left out (--no-triton)" if args.no_triton
                                   else "not installed; its columns are empty"))
    triton_out = torch.float32 if args.triton_out == "f32" else torch.bfloat16
    for note in notes:
        print(f"# {note}")

    results = []
    t_run = time.perf_counter()
    for shape in shapes:
        t_shape = time.perf_counter()
        tiles = tiles_for(shape, args.tiles or TILES, skinny=args.tiles is None)
        try:
            results.append(run_shape(torch, shape, kernels, tiles, triton_and_kernel, triton_out,
                                     timing, launch_settings, sms))
        except Exception as exc:  # one broken shape must not hide the others
            print(f"{label(shape)}: FAILED {short(exc)}", flush=True)
            results.append(dict(shape=list(shape), error_text=short(exc)))
        results[-1]["wall_s"] = time.perf_counter() - t_shape
        print(f"  ({label(shape)} took {results[-1]['wall_s']:.0f} s)", flush=True)
        torch.cuda.empty_cache()

    rows = table_rows(results)
    tri = f"Triton bf16->{args.triton_out}" if triton_and_kernel else "Triton"
    print(f"\nTFLOP/s; tilekit bf16->{args.tk_out} (best tile: kernel BMxBNxBK); "
          "tk/x = tilekit's "
          "TFLOP/s / x's; tk/cuBLAS against bf16 out (torch.matmul)")
    print(format_table(
        ["shape MxNxK", "tilekit best", "tk ms", "tk TFLOP/s", "cuBLAS bf16->bf16",
         "cuBLAS bf16->f32", tri, "tk/cuBLAS", "tk/Triton"],
        [[r["shape"], r["tilekit"], r["tilekit_ms"], r["tilekit_tflops"],
          *("WRONG" if side in r["wrong"] else r[f"{side}_tflops"]
            for side in ("cublas_bf16", "cublas_f32", "triton")),
          r["tk_vs_cublas"], r["tk_vs_triton"]] for r in rows]))
    settings = dict(
        shapes=[list(s) for s in shapes], tiles=[list(t) for t in args.tiles or TILES],
        skinny_tiles=None if args.tiles else [list(t) for t in SKINNY_TILES],
        sweeps=sweeps, set=dict(args.settings), sms=sms, triton_out=args.triton_out,
        tk_out=args.tk_out,
        triton_configs=[list(c) for c in TRITON_CONFIGS], tolerance=TOLERANCE,
        bf16_reduced_precision_reduction=(
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
        **timing)
    result = {"bench": "matmul", **env, "gpu": torch.cuda.get_device_name(0), "seed": seed,
              "settings": settings, "notes": notes, "wall_s": time.perf_counter() - t_run,
              "rows": rows, "shapes": results}
    write_json("matmul", result, args.out)
    wrong = any(t.get("wrong") for r in results for t in r.get("tilekit", {}).values())
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
