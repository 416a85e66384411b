"""Golden tests of printed IR: the traced and optimized IR of a few canonical
kernels (``tests/lang/golden/kernels.py``), compared with ``golden/*.mlir``.

A change in what the tracer or the passes produce shows up here as a text
diff. When the change is intended, refresh the files and review the diff::

    python3 -m pytest tests/lang/test_golden.py --update-golden
    git diff tests/lang/golden/

Tracing is also checked to be deterministic: tracing twice, or in a fresh
interpreter with another hash seed, prints the same text.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tilekit.ir import Module, print_module, verify
from tilekit.lang.kernel import KernelFunction

from .golden import kernels as K

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parents[2]

_f32_2d = np.zeros((4, 4), np.float32)
_f32_1d = np.zeros(4, np.float32)
_bf16_2d = np.zeros((4, 4), ml_dtypes.bfloat16)

# name -> (kernel, example arguments, keyword arguments, print locations?)
CASES: dict[str, tuple[KernelFunction, tuple, dict, bool]] = {
    "row_sum": (K.row_sum, (_f32_2d, _f32_1d, 100), {"BLOCK": 32}, False),
    "mean_var": (K.mean_var, (_f32_2d, _f32_1d, _f32_1d, 100), {"BLOCK": 32}, False),
    "matmul": (K.matmul, (_bf16_2d, _bf16_2d, _f32_2d, 100), {"BM": 64, "BN": 32, "BK": 16},
               False),
    "nested": (K.nested, (_f32_2d, _f32_1d, 3, 100), {"BLOCK": 32}, False),
    "clamp_when": (K.clamp_when, (_f32_1d, _f32_1d, 1.5), {"BLOCK": 32}, False),
    "softmax": (K.softmax, (_f32_2d, _f32_2d), {"N": 4097}, False),
    "softmax_locs": (K.softmax, (_f32_2d, _f32_2d), {"N": 4097}, True),
    "transpose": (K.transpose, (_f32_2d, _f32_2d), {"B": 16}, False),
}


def fresh_trace(kernel: KernelFunction, args: tuple, kwargs: dict) -> Module:
    """Trace from scratch (not from the kernel's specialization cache)."""
    kernel._cache.clear()
    return kernel.trace(*args, **kwargs)


def printed(name: str) -> str:
    kernel, args, kwargs, locs = CASES[name]
    return print_module(fresh_trace(kernel, args, kwargs), with_locs=locs)


def compare_or_update(name: str, text: str, update: bool) -> None:
    path = GOLDEN / f"{name}.mlir"
    if update:
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing; create it with --update-golden"
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), text.splitlines(keepends=True),
            fromfile=f"golden/{name}.mlir", tofile="traced"))
        pytest.fail(f"printed IR of `{name}` differs from the golden file "
                    f"(refresh with --update-golden if intended):\n{diff}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_ir(name: str, request: pytest.FixtureRequest) -> None:
    compare_or_update(name, printed(name), request.config.getoption("--update-golden"))


def test_every_golden_file_has_a_case() -> None:
    """A stale golden file (its case renamed or removed) fails instead of lingering."""
    assert sorted(p.stem for p in GOLDEN.glob("*.mlir")) == sorted(CASES)


def test_golden_kernels_cover_the_constructs() -> None:
    """The golden set keeps the constructs it is meant to pin."""
    texts = {name: printed(name) for name in CASES}
    loops = {n: len(re.findall(r"= for ", t)) for n, t in texts.items()}
    assert re.search(r"iter_args\(%\w+ = %\w+\) ->", texts["row_sum"])  # one carried tile
    assert re.search(r"iter_args\(%\w+ = %\w+, %\w+ = %\w+\)", texts["mean_var"])  # two
    assert loops["nested"] == 2 and "    %" in texts["nested"].split("= for ")[2]
    assert re.search(r"= when %\w+ else\(%\w+\)", texts["clamp_when"])  # rebound in `when`
    assert "tile_load" in texts["matmul"] and "tile_store" in texts["transpose"]
    assert "reduce" in texts["softmax"] and "broadcast" in texts["softmax"]


def test_locations_are_base_names() -> None:
    text = printed("softmax_locs")
    ops = [ln for ln in text.splitlines() if ln.startswith("  ") and ln.strip() != "}"]
    locs = [re.search(r"  loc\(([^)]*)\)$", ln) for ln in ops]
    assert ops and all(locs), text
    assert all(re.fullmatch(r"kernels\.py:\d+:\d+", m.group(1)) for m in locs if m), text
    assert str(ROOT) not in text


@pytest.mark.parametrize("name", sorted(CASES))
def test_tracing_is_deterministic(name: str) -> None:
    """Tracing twice prints identical text, and the golden IR verifies."""
    kernel, args, kwargs, locs = CASES[name]
    first = fresh_trace(kernel, args, kwargs)
    second = fresh_trace(kernel, args, kwargs)
    assert first is not second
    verify(first)
    assert print_module(first, with_locs=locs) == print_module(second, with_locs=locs)
    # Printing is pure: the same module prints the same text again.
    assert print_module(first, with_locs=locs) == print_module(first, with_locs=locs)


_SUBPROCESS = """
import sys
from tests.lang.test_golden import CASES, printed
sys.stdout.write("\\f".join(printed(n) for n in sorted(CASES)))
"""


def test_tracing_is_deterministic_across_processes() -> None:
    """A fresh interpreter with another hash seed (so other set/dict orders of strings
    and other object ids) prints the same IR."""
    here = "\f".join(printed(n) for n in sorted(CASES))
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    env.pop("TILEKIT_DUMP", None)
    out = subprocess.run([sys.executable, "-c", _SUBPROCESS], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == here


def _mutate(text: str) -> str:
    return text.replace("%1", "%one", 1)


def test_a_changed_ir_fails_the_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison really compares (and shows a diff)."""
    monkeypatch.setattr(sys.modules[__name__], "GOLDEN", tmp_path)
    compare_or_update("softmax", printed("softmax"), update=True)
    compare_or_update("softmax", printed("softmax"), update=False)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)differs.*-.*\+"):
        compare_or_update("softmax", _mutate(printed("softmax")), update=False)

