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
    """Median device time of ``fn()`` in milliseconds: one pair of CUDA events per rep (on
    torch's current stream), every rep queued behind a sleep kernel that holds the device
    until the host has queued them all, one synchronization at the end.

    With a synchronization after every rep, the device sat idle at each start event until
    the host had launched the kernel, so each rep also timed the host's launch: 5-7 us of a
    33 us row kernel, more for calls with more arguments, and varying with the host (the
    same 4096 x 4097 bf16 layer norm read 0.73-0.87x of copy across processes). Queued but
    not held, the host (events, launch) was barely faster than a 24 us kernel, and gaps
    remained. Held, each event pair brackets device work only; the launch itself is
    ``bench/dispatch.py``'s subject."""
    import time

    import torch

    host = []
    for _ in range(max(1, warmup)):
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(reps)]
    # long enough for the host to queue every rep (its launch time, the two records, with
    # room to spare; at most 50 ms), in cycles at 2 GHz (a slower clock only sleeps longer)
    hold_s = min(0.05, reps * (2 * median(host) + 20e-6) + 200e-6)
    torch.cuda._sleep(int(hold_s * 2e9))
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return median([start.elapsed_time(end) for start, end in pairs])


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
