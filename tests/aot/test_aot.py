"""Building, inspecting and loading a portfolio of two examples (tests/aot/conftest.py):
what the manifest holds, the same bytes from one or two worker processes, a fresh process
that launches every bucket from the portfolio without importing a compiler (libcuda
faked, counted with ``cache.stats()["portfolio_hits"]``), strict mode's error, and the arch
and IR hash in the key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from examples.softmax import softmax
from tilekit import cli, knobs
from tilekit.aot import build, calls, portfolio, registry
from tilekit.errors import LaunchError, PortfolioError
from tilekit.rt import cache, gpu, link

from .conftest import ARCHS, CALLS, ROOT, SOFTMAX, VECTOR_ADD, Built, declared


@pytest.fixture(autouse=True)
def clean_registry():  # type: ignore[no-untyped-def]
    registry.clear()
    yield
    registry.clear()


def test_the_manifest_holds_every_declared_variant(built: Built) -> None:
    found = portfolio.read(built.path)
    assert found.kernels == ["add", "softmax"]
    assert built.report.variants == 12 and built.report.duplicates == 2
    for name in ("add", "softmax"):
        mine = [v for v in found.variants if v.key.kernel == name]
        assert len(mine) == 6 and {v.key.arch for v in mine} == set(ARCHS)
    for v in found.variants:
        assert v.compiled.target == v.key.arch and v.compiled.binary_kind == "ptx"
        assert v.compiled.binary.lstrip().startswith(b"//")  # PTX text
        assert v.toolchain["tilekit"] and v.toolchain["llvm"]
        if link.available():
            assert v.image.startswith(b"\x7fELF")  # the linked cubin
        assert calls.buckets_of(softmax if v.key.kernel == "softmax" else _add(),
                                v.call)[0] is not None
    ragged = [v for v in found.variants if v.key.kernel == "softmax"
              and "N=constexpr<int:4097>" in v.key.spec]
    assert {v.key.size_facts for v in ragged} == {"X:1:4097,Y:1:4097"}
    assert any("aligned16=0" in v.key.spec for v in ragged)  # the misaligned base


def _add():  # type: ignore[no-untyped-def]
    from examples.vector_add import add

    return add


def test_two_worker_processes_give_the_same_bytes(built: Built, tmp_path: Path) -> None:
    """-j 2: the variants are compiled in two spawned processes (their disk cache is the
    fixture's, so this costs process start-up, not compiles) and the file is byte for byte
    the -j 1 one."""
    out = tmp_path / "j2.tkp"
    report = build.build([SOFTMAX, VECTOR_ADD], declared()[::-1], out, ARCHS, workers=2,
                         show_progress=False, cache_dir=built.cache_dir)
    assert os.getpid() not in report.workers and len(report.workers) >= 1
    assert out.read_bytes() == built.path.read_bytes()


def test_equal_buckets_are_compiled_once() -> None:
    """Calls that differ only in what no bucket fact depends on (vector_add's length) are
    one variant per arch; the kept call is the first in sorted order."""
    jobs, report = build.plan([VECTOR_ADD], declared()[3:], ARCHS, cache_dir="unused")
    assert len(jobs) == 6 and report.duplicates == 2
    assert jobs == sorted(jobs, key=lambda j: j.key)
    kept = [j for j in jobs if j.call["args"]["Y"].get("align") is None and
            j.call["args"]["X"]["tensor"] == "float32"]
    assert {j.call["args"]["X"]["shape"][0] for j in kept} == {100003}


def test_plan_errors_name_the_declaration(tmp_path: Path) -> None:
    with pytest.raises(PortfolioError, match="unknown arch 'sm_75'"):
        build.plan([SOFTMAX], declared()[:1], ["sm_75"])
    with pytest.raises(PortfolioError, match="defines no kernel `nope`") as info:
        build.plan([SOFTMAX], declared()[:1], ARCHS, ["nope"])
    assert "kernels: softmax" in str(info.value)
    with pytest.raises(PortfolioError, match="--call 4: the call is of kernel `add`"):
        build.plan([SOFTMAX], declared()[3:4], ARCHS)
    no_arch = build.Declared(calls.parse_compact(CALLS[0]), "--call 1")
    with pytest.raises(PortfolioError, match="names no arch and none was given"):
        build.plan([SOFTMAX], [no_arch])
    with pytest.raises(PortfolioError, match="no module file"):
        build.plan([tmp_path / "missing.py"], [no_arch], ARCHS)


def test_a_trace_error_names_the_kernels_line(tmp_path: Path) -> None:
    module = tmp_path / "bad_kernel.py"
    module.write_text("import tilekit as tk\n\n@tk.kernel\ndef k(X, B: tk.constexpr):\n"
                      "    tk.static_assert(B <= 64, 'B too big')\n"
                      "    tk.store(X, tk.arange(B), tk.zeros((B,), tk.float32))\n")
    call = build.Declared(calls.parse_compact("k: X=f32[128] B=128"), "--call 1")
    with pytest.raises(Exception) as info:
        build.plan([module], [call], ["sm_80"])
    assert f"{module}:5" in str(info.value) and "B too big" in str(info.value)


def test_compile_failures_are_listed_and_nothing_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "compile_job", lambda job: {"error": f"boom {job.arch}"})
    out = tmp_path / "x.tkp"
    with pytest.raises(PortfolioError) as info:
        build.build([SOFTMAX], declared()[:1], out, ARCHS, workers=1, show_progress=False)
    text = str(info.value)
    assert "2 of 2 variants failed to compile; no portfolio was written" in text
    assert "softmax for sm_80, declared at --call 1:\nboom sm_80" in text
    assert not out.exists()


# --- inspect -------------------------------------------------------------------------------


def test_inspect_lists_and_verifies(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["aot", "inspect", str(built.path)]) == 0
    out = capsys.readouterr().out
    assert "2 kernels, 12 variants" in out
    assert "kernel add (" in out and "kernel softmax (" in out and "archs sm_80, sm_90a" in out
    assert out.count("      bucket: ") == 12 and "divisible: X:1:4097,Y:1:4097" in out
    assert "toolchain: " in out and "llvm " in out
    assert "verified: the manifest and all" in out


def test_inspect_in_a_subprocess_fails_on_a_tampered_file(built: Built, tmp_path: Path) -> None:
    bad = tmp_path / "tampered.tkp"
    with zipfile.ZipFile(built.path) as zf, zipfile.ZipFile(bad, "w") as out:
        for info in zf.infolist():
            data = zf.read(info)
            out.writestr(info.filename, data if info.filename.endswith(".json") or
                         data[:1] == b"\x7f" else data.replace(b".target", b".tArget", 1))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ok = subprocess.run([sys.executable, "-m", "tilekit.cli", "aot", "inspect",
                         str(built.path)], capture_output=True, text=True, env=env,
                        timeout=120)
    assert ok.returncode == 0 and "12 variants" in ok.stdout
    failed = subprocess.run([sys.executable, "-m", "tilekit.cli", "aot", "inspect", str(bad)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert failed.returncode == 1
    assert "does not match its sha256" in failed.stdout and "FAILED" in failed.stdout
    assert "Traceback" not in failed.stdout + failed.stderr


# --- loading -------------------------------------------------------------------------------


def run_child(mode: str, path: Path, cache_dir: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("TILEKIT_PORTFOLIO", "TILEKIT_CACHE_DIR", "TILEKIT_RECORD"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "-m", "tests.aot.load_child", mode, str(path),
                          str(cache_dir)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_a_fresh_process_launches_prebuilt_kernels_without_a_compiler(
        built: Built, tmp_path: Path) -> None:
    """TILEKIT_PORTFOLIO, four launches in four buckets, an empty disk cache: four
    portfolio hits, nothing compiled, no compiler module (llvmlite, islpy, sympy, the layout
    library, code generation) and no CUDA bindings imported; the images loaded are the
    portfolio's cubins. The kernels were found by their source fingerprint: nothing was
    traced and the front end (the tracer) was never imported."""
    result = run_child("env", built.path, tmp_path)
    stats = result["stats"]
    assert stats["portfolio_hits"] == 4 and stats["compiles"] == 0
    assert stats["disk_hits"] == 0 and stats["misses"] == 0
    assert result["modules"] == []  # "llvmlite" among the watched ones
    assert result["extra_modules"] == []  # load_child.NOT_ON_THE_HIT_PATH: tensor maps, ...
    assert result["cuda_structs"] == 0  # driver.structs: made by the first launch that needs one
    assert result["traced"] == 0 and not result["front_end"]
    assert len(result["images"]) == 4
    if link.available():
        assert set(result["images"]) == {b"\x7fELF".hex()}


def test_strict_mode_lists_the_nearest_buckets(built: Built, tmp_path: Path) -> None:
    result = run_child("strict", built.path, tmp_path)
    assert result["stats"]["portfolio_hits"] == 4 and result["stats"]["compiles"] == 0
    assert result["modules"] == []  # the refused call did not start a compile
    assert result["extra_modules"] == []
    error = result["error"]
    assert error.startswith(f"{ROOT / 'tests' / 'aot' / 'load_child.py'}:")  # the caller's line
    assert f"kernel `softmax` is in the strict portfolio {built.path}" in error
    assert "N=constexpr<int:2000>" in error and "Nearest buckets it has:" in error
    nearest = [line for line in error.splitlines() if line.startswith("  1. ")]
    assert nearest and nearest[0].startswith("  1. sm_90a;")
    assert "differs in: N int:" in error
    assert "strict=False" in error and "tilekit aot" in error


def find(module, spec, arch, divisible):  # type: ignore[no-untyped-def]
    return registry.find(module, gpu.spec_text(spec), gpu.size_facts_text(divisible), arch)


def test_the_arch_is_part_of_the_key(built: Built, tmp_path: Path) -> None:
    """A portfolio holding only sm_90a variants serves an sm_90a device, not an sm_80 one;
    with both, each arch gets its own binary."""
    found = portfolio.read(built.path)
    only90 = tmp_path / "sm90.tkp"
    portfolio.write(only90, [v for v in found.variants if v.key.arch == "sm_90a"], "x")
    registry.load_portfolio(only90)
    spec, divisible = calls.buckets_of(softmax, calls.parse_compact(CALLS[0]))
    module = softmax.specialize(spec)
    cache.reset_stats()
    assert find(module, spec, "sm_80", divisible) is None
    entry = find(module, spec, "sm_90a", divisible)
    assert entry is not None and entry.kernel.target == "sm_90a"
    assert cache.stats()["portfolio_hits"] == 1
    registry.clear()
    registry.load_portfolio(built.path)
    assert find(module, spec, "sm_80", divisible).kernel.target == "sm_80"


def test_an_altered_binary_is_refused_when_its_variant_is_first_hit(
        built: Built, tmp_path: Path) -> None:
    """``load_portfolio`` verifies the archive and the manifest; a variant's binary when
    that variant is first hit: a cubin altered after the build is a ``PortfolioError``
    then (no entry returned, so nothing loaded, and no hit counted), and the other variants
    are served."""
    spec, divisible = calls.buckets_of(softmax, calls.parse_compact(CALLS[0]))
    module = softmax.specialize(spec)
    want = portfolio.key_of(module, gpu.spec_text(spec), gpu.size_facts_text(divisible), "sm_90a")
    target = next(v for v in portfolio.read(built.path).variants if v.key == want)
    member = list(target.members())[-1]  # the cubin (the PTX without nvJitLink)
    bad = tmp_path / "altered.tkp"
    with zipfile.ZipFile(built.path) as zf, zipfile.ZipFile(bad, "w") as out:
        for info in zf.infolist():
            data = zf.read(info)
            if info.filename == member:
                data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
            out.writestr(info, data)
    registry.load_portfolio(bad)
    cache.reset_stats()
    with pytest.raises(PortfolioError, match=f"archive member '{member}' does not match its "
                                             "sha256"):
        find(module, spec, "sm_90a", divisible)
    assert cache.stats()["portfolio_hits"] == 0
    entry = find(module, spec, "sm_80", divisible)
    assert entry is not None and entry.kernel.target == "sm_80"
    assert entry.image or entry.kernel.binary  # what the launch loads


def test_a_miss_outside_a_strict_portfolio_compiles(built: Built) -> None:
    registry.load_portfolio(built.path)
    spec, divisible = calls.buckets_of(softmax, calls.parse_compact(
        "softmax: X=f32[8,100] Y=f32[8,100] N=100"))
    assert find(softmax.specialize(spec), spec, "sm_90a", divisible) is None
    registry.clear()
    registry.load_portfolio(built.path, strict=True)
    with pytest.raises(LaunchError, match="is in the strict portfolio"):
        find(softmax.specialize(spec), spec, "sm_90a", divisible)


def test_the_runtime_asks_the_registry_before_the_disk_cache(
        built: Built, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpu._prebuilt`` serves a hit, and ``compile_cached`` is not called for it."""
    registry.load_portfolio(built.path)
    spec, divisible = calls.buckets_of(softmax, calls.parse_compact(CALLS[1]))
    module = softmax.specialize(spec)
    entry = gpu._prebuilt(module, spec, "sm_90a", divisible, None)
    assert entry is not None and entry.kernel.name == "softmax"
    with knobs.override(jitter=True):
        assert gpu._prebuilt(module, spec, "sm_90a", divisible, None) is None  # compile


def test_a_bad_portfolio_in_the_environment_names_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.tkp"
    bad.write_bytes(b"nope")
    monkeypatch.setenv("TILEKIT_PORTFOLIO", str(bad))
    spec, divisible = calls.buckets_of(softmax, calls.parse_compact(CALLS[1]))
    with pytest.raises(PortfolioError) as info:
        gpu._prebuilt(softmax.specialize(spec), spec, "sm_90a", divisible, None)
    assert str(bad) in str(info.value) and "TILEKIT_PORTFOLIO" in str(info.value)


def test_the_ir_hash_ignores_where_the_kernel_is(tmp_path: Path) -> None:
    """The same kernel in another file, moved down by three lines, has the same IR hash;
    an edit of what it computes changes it."""
    source = Path(SOFTMAX).read_text()
    shutil.copy(ROOT / "examples" / "_common.py", tmp_path / "_common.py")
    (tmp_path / "moved.py").write_text("\n\n\n" + source)
    (tmp_path / "edited.py").write_text(source.replace("tk.exp(z)", "tk.exp2(z)"))
    call = calls.parse_compact(CALLS[0])

    def hash_of(kern) -> str:  # type: ignore[no-untyped-def]
        spec, _ = calls.buckets_of(kern, call)
        return portfolio.ir_hash(kern.specialize(spec))

    moved = build.kernels_of(build.import_module_file(tmp_path / "moved.py"))["softmax"]
    edited = build.kernels_of(build.import_module_file(tmp_path / "edited.py"))["softmax"]
    assert moved.loc.line == softmax.loc.line + 3
    assert hash_of(moved) == hash_of(softmax) != hash_of(edited)


@pytest.mark.gpu
def test_on_the_gpu_a_portfolio_launch_matches_the_jit(tmp_path: Path) -> None:
    """On a GPU: a fresh process loads a portfolio built for its device and launches softmax
    from it (no compile, no llvmlite), and the result equals the JIT's (compiled in the
    same process after the registry is cleared) bit for bit."""
    from tilekit.rt import driver

    arch = driver.device_props(0).arch
    path = tmp_path / "gpu.tkp"
    build.build([SOFTMAX], [build.Declared(calls.parse_compact(
        "softmax: X=f32[1000,4097] Y=f32[1000,4097] N=4097"), "--call 1")], path, [arch],
        workers=1, show_progress=False, cache_dir=str(tmp_path / "build-cache"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TILEKIT_CACHE_DIR=str(tmp_path / "empty"))
    out = subprocess.run([sys.executable, "-m", "tests.aot.gpu_child", str(path)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(next(x for x in out.stdout.splitlines()
                             if x.startswith("RESULT "))[len("RESULT "):])
    assert result["portfolio_hits"] == 1 and not result["llvmlite_before_jit"]
    assert result["equal"], result
    # The time from import to the first launch is bench/aot_start.py's to show: under a
    # test run other processes share the machine.
