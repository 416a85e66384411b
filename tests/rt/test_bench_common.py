"""The pure-Python parts of the GPU benches (bench/common.py), and that the benches say
clearly when there is no GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# As a package: bench/ itself on sys.path would make its matmul.py shadow examples/matmul.py
# for every later `import matmul` in the run (tests/lang/test_examples.py).
from bench import common  # noqa: E402


def test_format_table() -> None:
    text = common.format_table(["variant", "us"], [["tilekit", 6.4321], ["slow", 123.456],
                                                   ["none", None]])
    assert text.splitlines() == ["| variant | us |", "|---|---:|", "| tilekit | 6.432 |",
                                 "| slow | 123.5 |", "| none | - |"]


def test_write_json_into_results_and_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    paths = common.write_json("dispatch", {"a": 1, "t": (1, 2)}, tmp_path / "out")
    assert paths == [tmp_path / "results" / "dispatch.json", tmp_path / "out" / "dispatch.json"]
    assert all(json.loads(p.read_text()) == {"a": 1, "t": [1, 2]} for p in paths)


def test_environment_header() -> None:
    env = common.environment()
    assert {"date", "python", "tilekit_commit", "torch", "triton"} <= set(env)


@pytest.mark.parametrize("bench", ["dispatch.py", "compile.py", "matmul.py", "check_cost.py"])
def test_benches_say_why_without_a_gpu(bench: str) -> None:
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    out = subprocess.run([sys.executable, str(ROOT / "bench" / bench)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode != 0
    assert "needs" in out.stderr and ("torch" in out.stderr or "GPU" in out.stderr)


def test_regression_check_costs_stride_2_case_stays_in_bounds() -> None:
    """bench/check_cost.py's stride-2 case on the interpreter (the definition check mode
    holds the GPU to): its kernel read a stride-2 view at flat offsets, element 1 in the
    gap after element 0, and the checked GPU run stopped it with a MemoryAccessError."""
    import numpy as np

    import tilekit as tk
    from bench.check_cost import add_strided
    from tilekit import knobs

    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal(2 * 1003).astype(np.float32) for _ in range(2))
    z = np.full(2 * 1003, np.nan, np.float32)
    with knobs.override(interpret=True):
        add_strided[tk.cdiv(1003, 128)](x[::2], y[1::2], z[::2], 1003, BLOCK=128)
    assert np.array_equal(z[::2], x[::2] + y[1::2]) and np.isnan(z[1::2]).all()
