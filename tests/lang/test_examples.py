"""Every example's ``main()`` run with small, ragged (odd, prime) arguments, and with
its defaults where those are cheap. Each ``main`` checks itself against numpy and
raises ``SystemExit`` on a mismatch, which fails the test."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("backend")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

ALL = sorted(p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_"))

# Small, ragged arguments for each example: sizes that are not multiples of the
# blocks (odd, prime), blocks that are not powers of two, and one-element edges.
RAGGED: dict[str, list[dict]] = {
    "argmax": [dict(rows=7, cols=97, block=16), dict(rows=3, cols=1, block=8),
               dict(rows=5, cols=31, block=31), dict(rows=2, cols=257, block=100, seed=3)],
    "histogram": [dict(n=1, num_bins=1, block=16), dict(n=97, num_bins=7, block=32),
                  dict(n=1000, num_bins=31, block=127, seed=5)],
    "layer_norm": [dict(rows=1, cols=1, block=16), dict(rows=7, cols=97, block=32),
                   dict(rows=3, cols=257, block=100, seed=2)],
    # the pipelined kernel too (in launch order and grouped): K = 0 (no trip),
    # K < stages * BK, one stage, many trips
    "matmul": [dict(M=1, N=1, K=1), dict(M=7, N=31, K=97), dict(M=65, N=33, K=33, seed=4),
               dict(M=1, N=1, K=0), dict(M=3, N=5, K=20, stages=5),
               dict(M=65, N=33, K=33, stages=1, seed=5), dict(M=70, N=40, K=300, stages=2),
               # f16 in, C bf16 / f16, B column-major (a transposed view), groups of 2 and 3
               dict(M=130, N=70, K=45, dtype="float16", out_dtype="bfloat16", b_col_major=True,
                    group_m=2),
               dict(M=97, N=31, K=64, out_dtype="float16", group_m=3, seed=6)],
    # trip counts 1, stages - 1, stages, stages + 1 and many; tiles wider than the row;
    # tiles hanging past the last row
    "pipeline_copy": [dict(rows=1, cols=1, bm=4, bn=16), dict(rows=97, cols=31, bm=16, bn=8),
                      dict(rows=7, cols=257, bm=5, bn=64, stages=5),
                      dict(rows=31, cols=37, bm=31, bn=37, stages=2),
                      dict(rows=13, cols=300, bm=3, bn=100, stages=3, dtype="bfloat16"),
                      dict(rows=5, cols=1001, bm=2, bn=7, stages=4, dtype="int32", seed=6)],
    "pipeline_row_sum": [dict(rows=1, cols=1, bm=1, bn=16), dict(rows=7, cols=97, bm=3, bn=32),
                         dict(rows=13, cols=4097, bm=4, bn=1000, stages=6),
                         dict(rows=9, cols=257, bm=9, bn=64, stages=5, dtype="float32"),
                         dict(rows=31, cols=1000, bm=5, bn=37, stages=1, seed=8)],
    "softmax": [dict(rows=1, cols=1), dict(rows=7, cols=31), dict(rows=5, cols=4097),
                dict(rows=3, cols=127, seed=9)],
    "transpose": [dict(rows=1, cols=1), dict(rows=97, cols=31, bm=16, bn=8),
                  dict(rows=7, cols=257, bm=5, bn=64), dict(rows=31, cols=37, bm=31, bn=37)],
    "vector_add": [dict(n=1, block=16), dict(n=97, block=32), dict(n=4097, block=1000),
                   dict(n=127, block=127, seed=1)],
}

# Examples whose defaults run in well under a second on the interpreter; the
# others (softmax 1000x4097, vector_add 100k) are covered by their ragged cases.
CHEAP_DEFAULTS = ["argmax", "histogram", "layer_norm", "matmul", "pipeline_copy",
                  "pipeline_row_sum", "transpose"]


def test_every_example_has_cases():
    assert ALL, "no examples found"
    assert sorted(RAGGED) == ALL, "add ragged cases for new examples here"


@pytest.mark.parametrize("name,kwargs",
                         [(n, kw) for n in ALL for kw in RAGGED.get(n, [])],
                         ids=lambda v: v if isinstance(v, str) else
                         ",".join(f"{k}={x}" for k, x in v.items()))
def test_example_ragged(name, kwargs, capsys):
    module = importlib.import_module(name)
    module.main(**kwargs)
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize("name", CHEAP_DEFAULTS)
def test_example_defaults(name, capsys):
    module = importlib.import_module(name)
    module.main()
    assert "ok" in capsys.readouterr().out


def test_example_mismatch_is_detected(monkeypatch):
    """The harness can fail: a corrupted kernel result makes ``main`` raise SystemExit."""
    module = importlib.import_module("vector_add")
    real = module.report

    def corrupting_report(name, err, tol):
        return real(name, err + 1.0, tol)

    monkeypatch.setattr(module, "report", corrupting_report)
    with pytest.raises(SystemExit):
        module.main(n=17, block=8)
