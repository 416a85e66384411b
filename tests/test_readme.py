"""The README's Python examples run as written (so the README stays true)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / f"readme_{index}.py"
    path.write_text(BLOCKS[index])  # a real file, so tracebacks and source lines work
    exec(compile(BLOCKS[index], str(path), "exec"), {"__name__": "readme"})
