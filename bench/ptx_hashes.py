"""The PTX of the benches' and examples' kernels, hashed: proof, offline, that a change
left their code alone (a refactor, or a rule that must not touch 32-bit buckets).

Each kernel is traced for the shapes its bench or example runs (arrays are ``np.zeros``,
whose pages are never touched, so 8192^3 costs no memory), with the size facts the
runtime would find for them, and compiled for sm_90a and sm_80 as a launch would. Prints
one line per kernel, ``sha256 arch name`` (of the PTX, or of the error of a config that
does not compile); ``--compare FILE`` (an earlier output) lists
the kernels whose PTX changed and exits 1 if any did. No GPU needed.

    git stash && python3 bench/ptx_hashes.py > /tmp/before.txt && git stash pop
    python3 bench/ptx_hashes.py --compare /tmp/before.txt
"""

# ruff: noqa: N806  (tensor-like names)

from __future__ import annotations

import argparse
import hashlib
import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "examples"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

ARCHS = ("sm_90a", "sm_80")
f32, bf16 = np.float32, ml_dtypes.bfloat16
Case = tuple[str, Callable[[], tuple[Any, tuple, dict]]]  # name, () -> (kernel, args, consts)


def _z(shape: tuple[int, ...], dtype: Any = f32) -> np.ndarray:
    return np.zeros(shape, dtype)


def bench_cases() -> Iterator[Case]:
    """bench/memory_bound.py, bench/matmul.py (the 8192^3 tiles) and bench/pipeline.py."""
    mb = importlib.import_module("bench.memory_bound")
    yield "add 2^28", lambda: (mb.tk_add, (_z((2**28,)),) * 3 + (2**28,), dict(BLOCK=1024))
    for M, N in [(8192, 8192), (4096, 4097)]:
        for dt in (f32, bf16):
            tag = f"{M}x{N} {np.dtype(dt).name}"
            yield f"softmax {tag}", lambda M=M, N=N, dt=dt: (
                mb.tk_softmax, (_z((M, N), dt), _z((M, N), dt)), dict(N=N))
            yield f"layer_norm {tag}", lambda M=M, N=N, dt=dt: (
                mb.tk_layer_norm, (_z((M, N), dt), _z((N,), dt), _z((N,), dt), _z((M, N), dt),
                                   1e-5), dict(N=N))
            yield f"rms_norm {tag}", lambda M=M, N=N, dt=dt: (
                mb.tk_rms_norm, (_z((M, N), dt), _z((N,), dt), _z((M, N), dt), 1e-5), dict(N=N))
    for kind, M, N, dt, R in [("softmax", 131072, 256, f32, 1), ("softmax", 65536, 512, bf16, 1),
                              ("softmax", 33554, 1000, bf16, 1), ("rms_norm", 33554, 1000, bf16, 1),
                              ("softmax", 262144, 128, bf16, 1), ("softmax", 262144, 128, bf16, 8)]:
        def rows(kind=kind, M=M, N=N, dt=dt, R=R):
            x, y = _z((M, N), dt), _z((M, N), dt)
            if kind == "rms_norm":
                return mb.tk_rms_norm, (x, _z((N,), dt), y, 1e-5), dict(N=N)
            if R > 1:
                return mb.tk_softmax_rows, (x, y), dict(R=R, N=N)
            return mb.tk_softmax, (x, y), dict(N=N)
        yield f"{kind} {M}x{N} R={R}", rows
    for BM, BN in [(64, 64), (128, 64), (64, 128), (128, 128), (256, 32), (256, 64), (32, 256)]:
        yield f"transpose 8192x8192 {BM}x{BN}", lambda BM=BM, BN=BN: (
            mb.tk_transpose, (_z((8192, 8192), bf16), _z((8192, 8192), bf16)),
            dict(BM=BM, BN=BN))
    for cols in (8192, 8200):
        yield f"copy tiles 8192x{cols}", lambda cols=cols: (
            mb.tk_copy_tiles, (_z((8192, 8448))[:, :cols], _z((8192, 8448))[:, :cols]),
            dict(BN=1024))

    mm = importlib.import_module("matmul")
    A, B, C = _z((8192, 8192), bf16), _z((8192, 8192), bf16), _z((8192, 8192))
    for BM, BN, BK in [(64, 64, 32), (128, 64, 32), (128, 128, 32), (128, 128, 64),
                       (64, 128, 32), (64, 128, 64), (128, 256, 64)]:
        tile = dict(BM=BM, BN=BN, BK=BK)
        yield f"matmul 8192^3 {BM}x{BN}x{BK}", lambda tile=tile: (
            mm.matmul, (A, B, C, 8192), tile)
        for stages in (3, 4):
            yield f"matmul_pipelined 8192^3 {BM}x{BN}x{BK} S={stages}", \
                lambda tile=tile, stages=stages: (mm.matmul_pipelined, (A, B, C, 8192),
                                                  {**tile, "STAGES": stages})

    pl = importlib.import_module("bench.pipeline")
    for engine in ("tma", "cp_async", "plain"):
        for roles in (False, True):
            for name, kern, out in (("copy", pl.tk_copy, (8192, 8192)),
                                    ("row_sum", pl.tk_row_sum, (8192,))):
                yield f"pipeline {name} {engine} roles={roles}", \
                    lambda kern=kern, out=out, engine=engine, roles=roles: (
                        kern, (_z((8192, 8192)), _z(out)),
                        dict(BM=16, BN=128, STAGES=3, ENGINE=engine, ROLES=roles))


def example_cases() -> Iterator[Case]:
    """Every example with its ``main()``'s shapes (``tests/codegen/test_offline.py``)."""
    offline = importlib.import_module("tests.codegen.test_offline")
    for name, case in sorted(offline.EXAMPLE_CASES.items()):
        def example(name=name, case=case):
            kernel_name, args, consts = case()
            return getattr(importlib.import_module(name), kernel_name), args, consts
        yield f"example {name}", example


def ptx(kernel: Any, args: tuple, consts: dict, arch: str) -> str:
    """The PTX a launch of ``kernel[...](*args, **consts)`` would compile for ``arch``."""
    from tilekit.codegen.driver import compile_module
    from tilekit.codegen.size_facts import candidate_size_facts, size_facts_holding

    module = kernel.trace(*args, **consts)
    bound = kernel.bind(args, consts, None)
    shapes = {n: np.shape(v) for n, v in bound.items() if isinstance(v, np.ndarray)}
    divisible = size_facts_holding(candidate_size_facts(module), shapes)
    return compile_module(module, arch, divisible=divisible).binary.decode()


def hashes() -> Iterator[str]:
    for name, case in [*example_cases(), *bench_cases()]:
        kernel, args, consts = case()
        for arch in ARCHS:
            try:
                text = ptx(kernel, args, consts, arch)
            except Exception as exc:  # a config the target refuses: the refusal must stay
                text = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
            yield f"{hashlib.sha256(text.encode()).hexdigest()} {arch} {name}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", type=Path, help="an earlier output: list what changed")
    opts = ap.parse_args(argv)
    before = {}
    if opts.compare:
        for line in opts.compare.read_text().splitlines():
            digest, rest = line.split(" ", 1)
            before[rest] = digest
    changed = 0
    for line in hashes():
        print(line, flush=True)
        digest, rest = line.split(" ", 1)
        if opts.compare and before.get(rest) != digest:
            changed += 1
            print(f"CHANGED: {rest}", file=sys.stderr)
    if opts.compare:
        print(f"{changed} of {len(before)} kernels changed", file=sys.stderr)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
