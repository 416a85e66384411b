"""Kernels the GPU tests and their second process tune with the default timer (CUDA
events): a softmax that handles ``ROWS`` rows per program (``ROWS=1`` is
``examples/softmax.py``'s kernel, the default config), and the example's matmul.

    python3 -m tests.tune.gpu_kernels CACHE_DIR

launches the softmax once (bf16, 4096x4097, torch) and prints ``RESULT {json}``: the
tuner's counters, the chosen config, the first call's seconds and whether it is right.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import tilekit as tk
from tilekit.tune import autotune

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from examples import softmax as softmax_kernels  # noqa: E402

SOFTMAX_CONFIGS = [{"ROWS": 1}, {"ROWS": 2}, {"ROWS": 4}]
softmax_rows = autotune(configs=SOFTMAX_CONFIGS, key=["X"], rep=30)(softmax_kernels.softmax_rows)


def softmax_grid(rows: int):
    return lambda meta: (tk.cdiv(rows, meta["ROWS"]),)


def main(cache_dir: str, rows: int = 4096, cols: int = 4097) -> dict[str, object]:
    os.environ["TILEKIT_CACHE_DIR"] = cache_dir
    import torch

    from tilekit.tune import stats

    torch.manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    t0 = time.perf_counter()
    softmax_rows[softmax_grid(rows)](x, y, N=cols)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    ref = torch.softmax(x.float(), dim=1)
    err = float((y.float() - ref).abs().max())
    return {"stats": stats(), "seconds": seconds, "max_error": err,
            "chosen": [d.chosen.to_json() for d in softmax_rows.decisions.values()]}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print("RESULT " + json.dumps(main(sys.argv[1])))
