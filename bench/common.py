"""What the GPU benches share: the environment header, timing, tables, JSON.

Every bench prints a table and writes ``bench/results/<name>.json`` (and a copy under
``--out DIR`` when given, e.g. ``--out $OUT`` on the device machine). The JSON holds the
environment (GPU, driver, torch, triton, tilekit commit, date, command) next to the rows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", type=Path, default=None,
                   help="also write the JSON result into this folder (e.g. $OUT)")
    return p


def require_gpu() -> Any:
    """torch, with a CUDA device; else exit with a message saying what is missing."""
    try:
        import torch
    except ImportError:
        sys.exit("this bench needs torch with CUDA (pip install torch); torch is not installed")
    if not torch.cuda.is_available():
        sys.exit("this bench needs a CUDA GPU: torch.cuda.is_available() is False here")
    return torch


def git_commit() -> str | None:
    """The tilekit commit measured: ``$TILEKIT_BENCH_COMMIT`` (set by bench/gpu_check.sh for
    a snapshot without git history), else ``git rev-parse``."""
    if os.environ.get("TILEKIT_BENCH_COMMIT"):
        return os.environ["TILEKIT_BENCH_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment() -> dict[str, Any]:
    """GPU, driver, library versions, tilekit commit, date, command (what a reader of a
    figure needs to reproduce it)."""
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "tilekit_commit": git_commit(),
    }
    try:
        import torch

        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["cuda_runtime"] = torch.version.cuda
    except ImportError:
        env["torch"] = None
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    try:
        from tilekit.rt import driver

        env["cuda_driver"] = driver.driver_version()
    except Exception:  # the header must not fail a bench
        env["cuda_driver"] = None
    return env


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def cuda_events_median(fn: Callable[[], Any], reps: int = 20, warmup: int = 3) -> float:
    """Median device time of ``fn()`` in milliseconds, one pair of CUDA events per rep
    (on torch's current stream)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return median(times)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-markdown table; floats with 3 significant decimals."""
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(name: str, data: dict[str, Any], out: Path | None = None) -> list[Path]:
    """Write ``bench/results/<name>.json`` (and ``<out>/<name>.json``); the paths."""
    text = json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
    paths = [RESULTS / f"{name}.json"]
    if out is not None:
        paths.append(Path(out) / f"{name}.json")
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return paths


def print_header(env: dict[str, Any]) -> None:
    shown = ", ".join(f"{k} {v}" for k, v in env.items() if k not in ("command",) and v)
    print(f"# {shown}")
