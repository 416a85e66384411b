"""The ``tilekit`` command: ``--help`` with an example on every sub-command, ``cache
prune`` (least recently used first, under a size cap), ``info`` without a GPU, ``aot``
end to end, and bad input answered with a clear message and status 1, never a
traceback."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import pytest

from tilekit import cli, knobs
from tilekit.aot import portfolio, registry
from tilekit.codegen.artifact import CompiledKernel, ParamSlot, SlotKind
from tilekit.rt import cache, device_arrays, driver
from tilekit.rt.cache_key import CacheKey

from .conftest import SOFTMAX

COMMANDS = ["", "info", "env", "cache", "cache list", "cache clear", "cache prune", "aot",
            "aot build", "aot inspect"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_everywhere(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main([*command.split(), "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tilekit") and "\nexample:\n  tilekit " in out


def test_layout_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tilekit.layout.pictures_cli")
    with pytest.raises(SystemExit) as info:
        cli.main(["layout", "--help"])
    assert info.value.code == 0 and "usage: tilekit layout" in capsys.readouterr().out


@pytest.mark.parametrize("text,size", [("500MB", 500 << 20), ("1.5G", 3 << 29), ("0", 0),
                                       ("2GiB", 2 << 30), ("10 kb", 10 << 10), ("7b", 7)])
def test_sizes(text: str, size: int) -> None:
    assert cli.parse_size(text) == size


def test_a_bad_size_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="cannot read the size '5 parsecs'"):
        cli.parse_size("5 parsecs")
    with pytest.raises(SystemExit) as info:
        cli.main(["cache", "prune", "--max-size", "lots"])
    assert info.value.code == 2 and "e.g. 500MB" in capsys.readouterr().err


def _entry(i: int) -> tuple[CacheKey, cache.Entry]:
    key = CacheKey.of(f"k{i}", f"ir {i}", "spec", "sm_90a", (("tilekit", "t"),))
    kernel = CompiledKernel(f"k{i}", "sm_90a", "ptx", b"x" * 1000, 4, 32, 0,
                            (ParamSlot(SlotKind.STATUS, "", "uint64"),))
    return key, cache.Entry(kernel, b"")


def test_prune_keeps_the_most_recently_used_under_the_cap(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Five entries used at t = 0..4 s ago; entry 0 (the oldest) is then loaded, which
    makes it the newest. A cap of three entries removes entries 1 and 2."""
    with knobs.override(cache_dir=str(tmp_path)):
        keys = []
        now = time.time()
        for i in range(5):
            key, entry = _entry(i)
            cache.store(key, entry)
            os.utime(cache.entry_path(key), (now - 100 + i, now - 100 + i))
            keys.append(key)
        assert cache.load(keys[0]) is not None  # a hit: now the most recent
        size = cache.entry_path(keys[0]).stat().st_size
        assert cli.main(["cache", "prune", "--max-size", f"{3 * size}B"]) == 0
        out = capsys.readouterr().out
        kept = {p.name for p in cache.entries()}
    assert kept == {keys[i].filename for i in (0, 3, 4)}
    assert out.index(keys[1].filename) < out.index(keys[2].filename)  # oldest first
    assert "pruned 2 cached kernels" in out and "now holds 3" in out


def test_prune_under_the_cap_removes_nothing(tmp_path: Path) -> None:
    with knobs.override(cache_dir=str(tmp_path)):
        cache.store(*_entry(0))
        assert cache.prune(1 << 20) == [] and cache.size()[0] == 1
        assert len(cache.prune(0)) == 1 and cache.size() == (0, 0)


def test_info_without_a_gpu_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    status = driver.GpuStatus(False, "no CUDA driver on this machine: libcuda cannot be "
                                     "loaded")
    monkeypatch.setattr(driver, "status", lambda: status)
    monkeypatch.delenv("TILEKIT_INTERPRET", raising=False)
    assert device_arrays.choose_backend(False).kind is device_arrays.BackendKind.INTERPRETER
    with knobs.override(cache_dir=str(tmp_path), portfolio=()):
        assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "backend: interpreter — kernels run on the CPU interpreter (no CUDA driver" in out
    assert "GPU: none found (no CUDA driver on this machine" in out
    assert "portfolios (TILEKIT_PORTFOLIO): none" in out


def test_aot_end_to_end_from_a_recorded_run(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A calls file as TILEKIT_RECORD writes it (another kernel's line is skipped) and a
    JSON --call; one variant, compiled in this process; then inspected and loaded."""
    recorded = tmp_path / "calls.jsonl"
    call = {"kernel": {"module": "examples/softmax.py", "name": "softmax"},
            "args": {"X": {"tensor": "float32", "shape": [8, 100], "strides": [100, 1],
                           "align": 256},
                     "Y": {"tensor": "float32", "shape": [8, 100]}, "N": {"constexpr": 100}},
            "arch": "sm_80"}
    other = {"kernel": {"module": "x.py", "name": "other"}, "args": {}, "arch": "sm_80"}
    recorded.write_text(json.dumps(call) + "\n" + json.dumps(other) + "\n")
    out = tmp_path / "one.tkp"
    with knobs.override(cache_dir=str(tmp_path / "cache")):
        code = cli.main(["aot", SOFTMAX, "--kernel", "softmax", "--calls", str(recorded),
                         "--call", json.dumps(call), "-o", str(out), "-j", "1", "-q"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"wrote {out}: 1 variant (1 duplicate declarations merged); 1 calls of other " \
           "kernels skipped" in captured.out
    assert cli.main(["aot", "inspect", str(out)]) == 0
    assert "1 kernel, 1 variant" in capsys.readouterr().out
    registry.clear()
    try:
        found = registry.load_portfolio(out)
        assert [v.key.arch for v in found.variants] == ["sm_80"]
        assert registry.loaded() == [(str(out), 1, False)]
    finally:
        registry.clear()


@pytest.mark.parametrize("argv,message", [
    (["aot", "missing.py", "--call", "k: X=f32[8]", "--arch", "sm_80", "-o", "x.tkp"],
     "no module file missing.py"),
    (["aot", SOFTMAX, "--call", "softmax: X=f32[8,8] Y=f32[8,8] N=8", "--arch", "sm_70",
      "-o", "x.tkp"], "unknown arch 'sm_70'"),
    (["aot", SOFTMAX, "--call", "softmax: X=f32[8,8] Y=f32[8,8]", "--arch", "sm_80",
      "-o", "x.tkp"], "does not describe `N`"),
    (["aot", SOFTMAX, "--call", "{bad json", "--arch", "sm_80", "-o", "x.tkp"],
     "--call 1 is not valid JSON"),
    (["aot", SOFTMAX, "--arch", "sm_80", "-o", "x.tkp"], "no call was given"),
    (["aot", "inspect", "nope.tkp"], "cannot read portfolio nope.tkp"),
])
def test_bad_input_is_one_clear_message(argv: list[str], message: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    text = captured.err + captured.out
    assert message in text and "Traceback" not in text
    assert not (tmp_path / "x.tkp").exists()


def test_a_portfolio_file_is_not_a_cache_entry(tmp_path: Path) -> None:
    """``cache.write_atomically`` (shared by both) leaves the cache's suffix to the cache."""
    portfolio.write(tmp_path / "a.tkp", [], "x")
    assert [p.name for p in tmp_path.iterdir()] == ["a.tkp"]
    assert portfolio.read(tmp_path / "a.tkp").variants == ()
