"""One portfolio for the AOT tests, compiled once per session: softmax and vector_add
(examples/), three buckets each (softmax: a ragged 4097-column row, an aligned 1024-column
row, a misaligned base with padded rows; add: ragged n, a misaligned operand, float16),
for sm_80 and sm_90a: 12 variants, about 10 s on two cores."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tilekit.aot import build, calls

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "examples" / "softmax.py")
VECTOR_ADD = str(ROOT / "examples" / "vector_add.py")
ARCHS = ("sm_80", "sm_90a")
CALLS = (
    "softmax: X=f32[64,4097] Y=f32[64,4097] N=4097",
    "softmax: X=f32[64,1024] Y=f32[64,1024] N=1024",
    "softmax: X=f32[64,4097]{4100,1}@4 Y=f32[64,4097] N=4097",
    "add: X=f32[100003] Y=f32[100003] Out=f32[100003] n=i32 BLOCK=1024",
    "add: X=f32[4096] Y=f32[4096]@4 Out=f32[4096] n=i32 BLOCK=1024",
    "add: X=f16[4096] Y=f16[4096] Out=f16[4096] n=i32 BLOCK=512",
    "add: X=f32[4096] Y=f32[4096] Out=f32[4096] n=i32 BLOCK=1024",  # the first one's bucket
)


def declared() -> list[build.Declared]:
    return [build.Declared(calls.parse_compact(text), f"--call {i}")
            for i, text in enumerate(CALLS, 1)]


@dataclass(frozen=True)
class Built:
    path: Path
    report: build.Report
    cache_dir: str


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("aot")
    path = root / "examples.tkp"
    report = build.build([SOFTMAX, VECTOR_ADD], declared(), path, ARCHS, workers=1,
                         show_progress=False, cache_dir=str(root / "cache"))
    return Built(path, report, str(root / "cache"))
