"""The autotuner's whole flow on the interpreter, with scripted timings (``ScriptedTimer``)
and, for pruning, scripted compile reports: what it chooses, what it leaves in the
arrays, what it stores and reuses (in a second process too), what it logs, and what it
says when a config cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tilekit as tk
from tilekit import knobs
from tilekit.errors import LaunchError, LoweringError
from tilekit.tune import Report, autotune, read_log, reset_stats, stats, tune_dir

from .kernels import CONFIGS, TIMER, ScriptedTimer, accumulate, grid

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path: Path):
    with knobs.override(cache_dir=str(tmp_path / "cache"), interpret=True):
        reset_stats()
        accumulate.forget()
        TIMER.__init__()
        yield tmp_path / "cache"
    accumulate.forget()


def launch(n: int = 100, seed: int = 0, tuned=accumulate) -> tuple[np.ndarray, ...]:
    """One tuned launch of Out += X; (x, Out before, Out after)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    out = rng.standard_normal(n).astype(np.float32)
    before = out.copy()
    tuned[grid(n)](x, out, n)
    return x, before, out


def chosen(tuned=accumulate) -> list[dict]:
    return [d.chosen.to_json() for d in tuned.decisions.values()]


def records(cache: Path) -> list[Path]:
    return sorted((cache / "tune").glob("*.json"))


# --- the choice -------------------------------------------------------------------------------


def test_picks_the_config_with_the_smallest_median(cache: Path) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    launch()
    assert chosen() == [{"BLOCK": 32}]
    assert TIMER.timed == ["BLOCK=16", "BLOCK=32", "BLOCK=64"]
    assert stats()["tunings"] == 1 and stats()["timings"] == 3


@pytest.mark.parametrize("script, expected", [
    ({"BLOCK=16": 2.0, "BLOCK=32": 1.0, "BLOCK=64": 1.0}, 32),
    ({"BLOCK=16": 1.0, "BLOCK=32": 1.0, "BLOCK=64": 1.0}, 16),
    ({"BLOCK=16": 5.0, "BLOCK=32": 4.0, "BLOCK=64": 4.0}, 32),
])
def test_ties_go_to_the_earlier_config(cache: Path, script: dict, expected: int) -> None:
    TIMER.script = script
    launch()
    assert chosen() == [{"BLOCK": expected}]


def test_the_median_not_the_mean_decides(cache: Path) -> None:
    class Noisy(ScriptedTimer):
        def measure(self, config, run, warmup, rep):  # BLOCK=16: one outlier
            run()
            return {"BLOCK=16": [1.0, 1.0, 50.0], "BLOCK=32": [2.0, 2.0, 2.0],
                    "BLOCK=64": [3.0, 3.0, 3.0]}[config.label]

    tuned = autotune(configs=CONFIGS, key=["n"], timer=Noisy())(accumulate.kernel)
    launch(tuned=tuned)
    assert chosen(tuned) == [{"BLOCK": 16}]


def test_arrays_end_as_after_one_launch_of_the_choice(cache: Path) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    x, before, out = launch()
    assert TIMER.runs == 3 * (1 + 3)  # the kernel did run many times while timing
    np.testing.assert_array_equal(out, before + x)


def test_without_restoring_the_timing_runs_show(cache: Path) -> None:
    """The counter-test of the one above: restore=None leaves every timing run's update."""
    timer = ScriptedTimer()
    tuned = autotune(configs=CONFIGS, key=["n"], timer=timer, warmup=1, rep=3,
                     restore=None)(accumulate.kernel)
    x, before, out = launch(tuned=tuned)
    assert timer.runs == 12
    np.testing.assert_allclose(out, before + 13 * x, rtol=1e-5, atol=1e-5)


def test_restore_by_name(cache: Path) -> None:
    tuned = autotune(configs=CONFIGS, key=["n"], timer=ScriptedTimer(),
                     restore=["Out"])(accumulate.kernel)
    x, before, out = launch(tuned=tuned)
    np.testing.assert_array_equal(out, before + x)


def test_the_grid_function_sees_the_chosen_config(cache: Path) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 2.0, "BLOCK=64": 1.0}
    seen: list[int] = []

    def g(meta: dict) -> tuple[int]:
        seen.append(meta["BLOCK"])
        return (tk.cdiv(1000, meta["BLOCK"]),)

    x = np.ones(1000, np.float32)
    out = np.zeros(1000, np.float32)
    accumulate[g](x, out, 1000)
    assert seen[-1] == 64 and set(seen) == {16, 32, 64}
    np.testing.assert_array_equal(out, x)  # every element: the grid covered n


# --- the key and the memory -------------------------------------------------------------------


def test_the_same_key_is_decided_once(cache: Path) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    launch(seed=0)
    x, before, out = launch(seed=1)  # other values, same n
    assert TIMER.timed == ["BLOCK=16", "BLOCK=32", "BLOCK=64"]
    assert stats()["tunings"] == 1 and stats()["disk_hits"] == 0
    np.testing.assert_array_equal(out, before + x)


def test_another_key_value_is_a_new_tuning(cache: Path) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    launch(n=100)
    TIMER.script = {"BLOCK=16": 1.0, "BLOCK=32": 3.0, "BLOCK=64": 2.0}
    launch(n=200)
    assert stats()["tunings"] == 2
    assert chosen() == [{"BLOCK": 32}, {"BLOCK": 16}]
    assert len(records(cache)) == 2


OFFSET = 1.0


def test_a_changed_global_is_a_new_tuning(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The globals a kernel reads are part of its tuning key: once one changed, the
    kernel is another (another IR), tuned again rather than given the old choice."""

    @autotune(configs=CONFIGS, key=["n"], timer=TIMER, warmup=1, rep=3)
    @tk.kernel
    def shifted(X: tk.Tensor, Out: tk.Tensor, n, BLOCK: tk.constexpr):
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        tk.store(Out, offs, tk.load(X, offs, mask=offs < n) + OFFSET, mask=offs < n)

    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    x, _, out = launch(n=77, tuned=shifted)
    np.testing.assert_array_equal(out, x + np.float32(1))
    monkeypatch.setattr(sys.modules[__name__], "OFFSET", 2.0)
    TIMER.script = {"BLOCK=16": 1.0, "BLOCK=32": 3.0, "BLOCK=64": 2.0}
    x, _, out = launch(n=77, tuned=shifted, seed=1)
    np.testing.assert_array_equal(out, x + np.float32(2))
    assert stats()["tunings"] == 2 and stats()["disk_hits"] == 0
    assert chosen(shifted) == [{"BLOCK": 32}, {"BLOCK": 16}]


def test_a_dimension_outside_the_key_is_the_same_tuning(cache: Path) -> None:
    tuned = autotune(configs=CONFIGS, key=[], timer=ScriptedTimer())(accumulate.kernel)
    launch(n=100, tuned=tuned)
    launch(n=200, tuned=tuned)
    assert stats()["tunings"] == 1


def test_a_tensor_in_the_key_is_keyed_by_dtype_and_shape(cache: Path) -> None:
    tuned = autotune(configs=CONFIGS, key=["X"], timer=ScriptedTimer())(accumulate.kernel)
    launch(n=100, tuned=tuned)
    launch(n=100, tuned=tuned, seed=3)
    assert stats()["tunings"] == 1
    launch(n=101, tuned=tuned)
    assert stats()["tunings"] == 2
    keys = [d.key["key"] for d in tuned.decisions.values()]
    assert keys == [{"X": {"dtype": "float32", "shape": [100]}},
                    {"X": {"dtype": "float32", "shape": [101]}}]


# --- on disk ----------------------------------------------------------------------------------


def test_a_new_tuner_reads_the_stored_choice(cache: Path) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    launch()
    accumulate.forget()
    TIMER.fail = True
    x, before, out = launch()
    assert stats()["disk_hits"] == 1 and stats()["tunings"] == 1
    assert chosen() == [{"BLOCK": 32}]
    np.testing.assert_array_equal(out, before + x)


def test_a_second_process_reuses_the_record_without_timing(cache: Path) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}  # not the first
    launch(n=100)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.tune.reuse", str(cache), "100"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(s for s in done.stdout.splitlines() if s.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["stats"]["timings"] == 0 and result["stats"]["tunings"] == 0
    assert result["stats"]["disk_hits"] == 1
    assert result["chosen"] == [{"BLOCK": 32}] and result["correct"]


def _rewrite(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def _resign(doc: dict) -> None:
    import hashlib

    from tilekit.tune.store import _canonical

    doc["sha256"] = hashlib.sha256(_canonical(doc["payload"]).encode()).hexdigest()


CORRUPTIONS = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "flipped byte": lambda p: p.write_bytes(p.read_bytes().replace(b'"chosen": 1',
                                                                   b'"chosen": 0')),
    "not json": lambda p: p.write_bytes(b"\x00\xff garbage"),
    "other format": lambda p: _rewrite(p, lambda d: (d["payload"].update(format=99),
                                                     _resign(d))),
    "other key": lambda p: _rewrite(p, lambda d: (d["payload"].update(key="{}"),
                                                  _resign(d))),
    "choice out of range": lambda p: _rewrite(p, lambda d: (d["payload"].update(chosen=7),
                                                            _resign(d))),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_bad_record_is_a_miss_that_tunes_again(cache: Path, corruption: str) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    launch()
    [path] = records(cache)
    CORRUPTIONS[corruption](path)
    accumulate.forget()
    x, before, out = launch()
    assert stats()["bad_records"] == 1 and stats()["tunings"] == 2
    assert chosen() == [{"BLOCK": 32}]
    np.testing.assert_array_equal(out, before + x)
    assert "stored record not used" in accumulate.tuning_report()
    accumulate.forget()  # the record was rewritten whole
    launch()
    assert stats()["disk_hits"] == 1 and stats()["tunings"] == 2


def test_changed_configs_tune_again(cache: Path) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0, "BLOCK=128": 0.5}
    launch()
    more = autotune(configs=[*CONFIGS, {"BLOCK": 128}], key=["n"],
                    timer=TIMER)(accumulate.kernel)
    launch(tuned=more)
    assert stats()["bad_records"] == 1 and stats()["tunings"] == 2
    assert chosen(more) == [{"BLOCK": 128}]
    assert len(records(cache)) == 1  # same key: the record was replaced


def test_no_temporary_files_are_left(cache: Path) -> None:
    launch()
    assert sorted(p.name for p in (cache / "tune").iterdir() if p.name.startswith(".")) == []


# --- the log ----------------------------------------------------------------------------------


def test_each_decision_logs_an_abstract_call(cache: Path, tmp_path: Path) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    extra = tmp_path / "mine.jsonl"
    tuned = autotune(configs=CONFIGS, key=["n"], timer=TIMER, log=extra)(accumulate.kernel)
    launch(n=100, tuned=tuned)
    launch(n=100, tuned=tuned)  # no new decision: no new line
    [line] = read_log()
    assert read_log(extra) == [line]
    assert line["config"] == {"BLOCK": 32}
    assert line["timings_ms"] == {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    call = line["call"]
    assert call["kernel"]["name"] == "accumulate"
    assert call["kernel"]["module"].endswith("tests/tune/kernels.py")
    assert "arch" not in call  # the interpreter has none
    args = call["args"]
    assert args["BLOCK"] == {"constexpr": 32}
    assert args["n"] == {"scalar": "int32", "value": 100}
    for name in ("X", "Out"):
        desc = args[name]
        assert (desc["tensor"], desc["shape"], desc["strides"]) == ("float32", [100], [1])
        assert desc["align"] in (4, 8, 16, 32, 64, 128, 256)
    text = (tune_dir() / "log.jsonl").read_text()
    assert text.count("\n") == 1 and json.loads(text) == line


def test_the_logged_call_is_the_bucket_aot_builds(cache: Path) -> None:
    calls = pytest.importorskip("tilekit.aot.calls")
    from tilekit.rt.launcher import specialize_arguments

    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    x = np.ones(100, np.float32)
    out = np.zeros(100, np.float32)
    accumulate[grid(100)](x, out, 100)
    [line] = read_log()
    spec, _ = calls.buckets_of(accumulate.kernel, line["call"])
    real, _ = specialize_arguments(accumulate.kernel, accumulate.kernel.bind(
        (x, out, 100), {"BLOCK": 32}, None), None)
    assert spec == real
    build = pytest.importorskip("tilekit.aot.build")
    [declared] = build.read_calls(tune_dir() / "log.jsonl")
    assert declared.call == line["call"]


def test_no_timer_on_the_interpreter_takes_the_first_config_and_stores_nothing(
        cache: Path) -> None:
    tuned = autotune(configs=CONFIGS, key=["n"])(accumulate.kernel)
    x, before, out = launch(tuned=tuned)
    assert chosen(tuned) == [{"BLOCK": 16}]
    assert stats()["untimed"] == 1 and stats()["timings"] == 0
    assert records(cache) == [] and read_log() == []
    np.testing.assert_array_equal(out, before + x)


# --- pruning ----------------------------------------------------------------------------------


def fake_probe(resources: dict[int, dict]):
    """A probe answering reports of an H100 (227 KB of shared memory) by BLOCK."""
    def probe(kern, bound, loc) -> Report:
        return Report("sm_90a", ("Out",), max_shared=227 * 1024,
                      **{"threads": 128, "shared_bytes": 0, "registers": 32, "local_bytes": 0,
                         "max_threads": 1024, **resources.get(bound["BLOCK"], {})})
    return probe


def test_configs_that_cannot_run_are_pruned_before_timing(cache: Path) -> None:
    timer = ScriptedTimer()
    probe = fake_probe({16: {"shared_bytes": 300_000},
                        32: {"registers": 128, "threads": 1024, "max_threads": 1024}})
    tuned = autotune(configs=CONFIGS, key=["n"], timer=timer, probe=probe)(accumulate.kernel)
    x, before, out = launch(tuned=tuned)
    assert timer.timed == ["BLOCK=64"] and chosen(tuned) == [{"BLOCK": 64}]
    report = tuned.tuning_report()
    assert "BLOCK=16  pruned: needs 300000 bytes of shared memory per block; the device " \
           "offers 232448" in report
    assert "BLOCK=32  pruned: needs 128 registers x 1024 threads = 131072, more than the " \
           "65536 registers of an SM" in report
    np.testing.assert_array_equal(out, before + x)


def test_spilling_configs_are_pruned_when_one_does_not_spill(cache: Path) -> None:
    timer = ScriptedTimer()
    timer.script = {"BLOCK=16": 1.0}  # the spilling one would win on time
    probe = fake_probe({16: {"local_bytes": 64}})
    tuned = autotune(configs=CONFIGS, key=["n"], timer=timer, probe=probe)(accumulate.kernel)
    launch(tuned=tuned)
    assert timer.timed == ["BLOCK=32", "BLOCK=64"]
    assert "spills 64 bytes per thread" in tuned.tuning_report()


def test_spilling_configs_are_timed_when_all_spill(cache: Path) -> None:
    timer = ScriptedTimer()
    probe = fake_probe({b: {"local_bytes": 8} for b in (16, 32, 64)})
    tuned = autotune(configs=CONFIGS, key=["n"], timer=timer, probe=probe)(accumulate.kernel)
    launch(tuned=tuned)
    assert timer.timed == ["BLOCK=16", "BLOCK=32", "BLOCK=64"]


def test_a_thread_limit_below_the_block_prunes(cache: Path) -> None:
    timer = ScriptedTimer()
    probe = fake_probe({16: {"threads": 512, "max_threads": 256, "registers": 200}})
    tuned = autotune(configs=CONFIGS, key=["n"], timer=timer, probe=probe)(accumulate.kernel)
    launch(tuned=tuned)
    assert "BLOCK=16" not in timer.timed
    assert "can run at most 256" in tuned.tuning_report()


def test_a_config_the_compiler_rejects_is_pruned_with_its_message(cache: Path) -> None:
    timer = ScriptedTimer()

    def probe(kern, bound, loc) -> Report:
        if bound["BLOCK"] == 64:
            raise LoweringError("tk.dot needs 300000 bytes of shared memory; sm_90a has 232448")
        return Report("sm_90a", ("Out",))

    tuned = autotune(configs=CONFIGS, key=["n"], timer=timer, probe=probe)(accumulate.kernel)
    launch(tuned=tuned)
    assert timer.timed == ["BLOCK=16", "BLOCK=32"]
    assert "BLOCK=64  pruned: does not compile: tk.dot needs 300000 bytes of shared memory" \
        in tuned.tuning_report()


@tk.kernel
def small_blocks_only(X: tk.Tensor, Out: tk.Tensor, n, BLOCK: tk.constexpr):
    tk.static_assert(BLOCK <= 32, "BLOCK must be at most 32")
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    mask = offs < n
    tk.store(Out, offs, tk.load(Out, offs, mask=mask) + tk.load(X, offs, mask=mask), mask=mask)


def test_a_config_that_does_not_trace_is_pruned(cache: Path) -> None:
    timer = ScriptedTimer()
    timer.script = {"BLOCK=64": 0.1}
    tuned = autotune(configs=CONFIGS, key=["n"], timer=timer)(small_blocks_only)
    x, before, out = launch(tuned=tuned)
    assert timer.timed == ["BLOCK=16", "BLOCK=32"]
    assert "BLOCK=64  pruned: does not compile: static assertion failed: BLOCK must be at " \
           "most 32" in tuned.tuning_report()
    np.testing.assert_array_equal(out, before + x)


def test_the_users_prune_function(cache: Path) -> None:
    timer = ScriptedTimer()
    seen = []

    def prune(config: dict, args: dict):
        seen.append((config["BLOCK"], args["n"]))
        return "more blocks than elements" if config["BLOCK"] > args["n"] else None

    tuned = autotune(configs=CONFIGS, key=["n"], timer=timer, prune=prune)(accumulate.kernel)
    launch(n=20, tuned=tuned)
    assert timer.timed == ["BLOCK=16"] and (64, 20) in seen
    assert "BLOCK=32  pruned: more blocks than elements" in tuned.tuning_report()


def test_every_config_pruned_says_why_for_each(cache: Path) -> None:
    probe = fake_probe({16: {"shared_bytes": 300_000}, 32: {"shared_bytes": 400_000},
                        64: {"registers": 255, "threads": 512}})
    tuned = autotune(configs=CONFIGS, key=["n"], timer=ScriptedTimer(),
                     probe=probe)(accumulate.kernel)
    x = np.ones(100, np.float32)
    out = np.zeros(100, np.float32)
    with pytest.raises(LaunchError) as info:
        tuned[grid(100)](x, out, 100)  # <-- all pruned
    err = info.value
    assert "every config of autotuned kernel `accumulate` was pruned" in err.message
    assert err.loc is not None and err.loc.file == __file__
    assert err.loc.line == line_of("all pruned")
    assert err.hints[0].startswith("BLOCK=16: needs 300000 bytes of shared memory")
    assert err.hints[1].startswith("BLOCK=32: needs 400000 bytes of shared memory")
    assert err.hints[2].startswith("BLOCK=64: needs 255 registers x 512 threads")
    assert not out.any()  # nothing ran


def test_dump_prints_each_decision(cache: Path, capsys: pytest.CaptureFixture) -> None:
    TIMER.script = {"BLOCK=16": 3.0, "BLOCK=32": 1.0, "BLOCK=64": 2.0}
    with knobs.override(dump=frozenset({"tune"})):
        launch()
    err = capsys.readouterr().err
    assert "autotune accumulate" in err and "BLOCK=32  1.0000 ms  <- chosen" in err


# --- errors at the user's line ----------------------------------------------------------------

_LINES = Path(__file__).read_text().splitlines()


def line_of(tag: str) -> int:
    hits = [i + 1 for i, text in enumerate(_LINES) if text.rstrip().endswith(f"# <-- {tag}")]
    assert len(hits) == 1, tag
    return hits[0]


def _decorate(case: str):
    kern = accumulate.kernel
    if case == "not a constexpr":
        return autotune(configs=[{"n": 4}], key=["n"])(kern)  # <-- not a constexpr
    if case == "unknown parameter":
        return autotune(configs=[{"BLOK": 4}])(kern)  # <-- unknown parameter
    if case == "empty":
        return autotune(configs=[])(kern)  # <-- empty
    if case == "different names":
        return autotune(configs=[{"BLOCK": 4}, {}])(kern)  # <-- different names
    if case == "unknown key":
        return autotune(configs=CONFIGS, key=["m"])(kern)  # <-- unknown key
    if case == "tuned key":
        return autotune(configs=CONFIGS, key=["BLOCK"])(kern)  # <-- tuned key
    if case == "key string":
        return autotune(configs=CONFIGS, key="n")(kern)  # <-- key string
    if case == "restore":
        return autotune(configs=CONFIGS, restore=["BLOCK"])(kern)  # <-- restore
    if case == "not a kernel":
        return autotune(configs=CONFIGS)(lambda: None)  # <-- not a kernel
    if case == "duplicate":
        return autotune(configs=[{"BLOCK": 4}, {"BLOCK": 4}])(kern)  # <-- duplicate
    raise AssertionError(case)


@pytest.mark.parametrize("case, words", [
    ("not a constexpr", "sets `n`, which is not a tk.constexpr parameter of kernel "
                        "`accumulate`"),
    ("unknown parameter", "sets `BLOK`, which is not a parameter of kernel `accumulate`"),
    ("empty", "gives nothing to choose from"),
    ("different names", "config 1 is empty"),
    ("unknown key", "names `m`, which is not a parameter of kernel `accumulate`"),
    ("tuned key", "names `BLOCK`, which the configs tune"),
    ("key string", "must be a list of parameter names"),
    ("restore", "names `BLOCK`, which is not an array parameter"),
    ("not a kernel", "decorates a tilekit kernel, got function"),
    ("duplicate", "config 1 repeats config 0 (BLOCK=4)"),
])
def test_bad_decorators_name_the_decorator_line(case: str, words: str) -> None:
    with pytest.raises(LaunchError) as info:
        _decorate(case)
    err = info.value
    assert words in err.message
    assert err.loc is not None and err.loc.file == __file__
    assert err.loc.line == line_of(case)
    assert str(err).splitlines()[1].strip() == _LINES[err.loc.line - 1].strip()


def test_configs_naming_different_constexprs_are_refused() -> None:
    @tk.kernel
    def two(X: tk.Tensor, A: tk.constexpr, B: tk.constexpr):
        pass

    with pytest.raises(LaunchError, match=r"config 1 sets `B`, but config 0 sets `A`"):
        autotune(configs=[{"A": 1}, {"B": 2}])(two)


def test_passing_a_tuned_constexpr_names_the_call(cache: Path) -> None:
    x = np.ones(8, np.float32)
    with pytest.raises(LaunchError) as info:
        accumulate[grid(8)](x, x.copy(), 8, BLOCK=16)  # <-- passes BLOCK
    err = info.value
    assert "`BLOCK` of kernel `accumulate` is chosen by @tk.autotune" in err.message
    assert err.loc.line == line_of("passes BLOCK")
    assert any("accumulate.kernel[grid]" in h for h in err.hints)


def test_missing_arguments_get_the_kernels_message(cache: Path) -> None:
    x = np.ones(8, np.float32)
    with pytest.raises(LaunchError, match="bad arguments for kernel `accumulate`") as info:
        accumulate[grid(8)](x, x.copy())  # <-- missing n
    assert info.value.loc.line == line_of("missing n")
