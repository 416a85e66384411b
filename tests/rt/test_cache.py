"""The disk cache: keys that miss when any input changes, entries that are verified on
read (a bad one is rebuilt), a warm cache that compiles nothing in a second process, and
two processes racing on a cold key. Compiles are counted (``cache.stats()``), with a fake
compile function (hand-written PTX), so no code generator or GPU is needed."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tilekit import knobs
from tilekit.codegen.artifact import ParamSlot, SlotKind
from tilekit.rt import cache, cache_key, gpu
from tilekit.rt.launcher import specialize_arguments

from .ptx_kernels import add, fake_compile

ROOT = Path(__file__).resolve().parents[2]


def add_module(n: int = 1000, dtype=np.float32, offset: int = 0, block: int = 128):
    x = np.zeros(n + offset, dtype)[offset:]
    args = (x, x.copy(), x.copy(), n)
    spec, _ = specialize_arguments(add, add.bind(args, {"BLOCK": block}, None), None)
    return add.specialize(spec), spec


@pytest.fixture
def cache_dir(tmp_path: Path):
    with knobs.override(cache_dir=str(tmp_path / "cache")):
        cache.reset_stats()
        yield tmp_path / "cache"


def test_second_lookup_hits_the_disk_and_compiles_nothing(cache_dir: Path) -> None:
    module, spec = add_module()
    first = gpu.compile_cached(module, spec, "sm_90a", compile_fn=fake_compile)
    assert cache.stats()["compiles"] == 1 and first.image.startswith(b"\x7fELF")
    second = gpu.compile_cached(module, spec, "sm_90a", compile_fn=fake_compile)
    assert cache.stats()["compiles"] == 1 and cache.stats()["disk_hits"] == 1
    assert second.kernel == first.kernel and second.image == first.image
    assert len(list(cache.entries())) == 1


def test_each_key_input_changes_the_key() -> None:
    tools = (("tilekit", "1"), ("llvmlite", "0.50"), ("llvm", "22"), ("nvjitlink", "13.5"),
             ("cuda_driver", "13000"))
    base = cache_key.CacheKey.of("k", "ir", "spec", "sm_90a", tools)
    variants = [cache_key.CacheKey.of("k", "ir2", "spec", "sm_90a", tools),
                cache_key.CacheKey.of("k", "ir", "spec2", "sm_90a", tools),
                cache_key.CacheKey.of("k", "ir", "spec", "sm_80", tools)]
    for i, (name, _) in enumerate(tools):
        changed = tuple((n, v + "x" if j == i else v) for j, (n, v) in enumerate(tools))
        variants.append(cache_key.CacheKey.of("k", "ir", "spec", "sm_90a", changed))
        assert name in variants[-1].text
    digests = {base.digest} | {v.digest for v in variants}
    assert len(digests) == 1 + len(variants)


def test_the_toolchain_is_in_the_key() -> None:
    names = dict(cache_key.toolchain())
    assert {"tilekit", "llvmlite", "llvm", "nvjitlink", "cuda_driver"} <= set(names)


def test_ir_specialization_and_arch_changes_miss(cache_dir: Path) -> None:
    module, spec = add_module()
    gpu.compile_cached(module, spec, "sm_90a", compile_fn=fake_compile)
    gpu.compile_cached(module, spec, "sm_80", compile_fn=fake_compile)  # arch
    module_b, spec_b = add_module(block=256)  # constexpr: other IR
    gpu.compile_cached(module_b, spec_b, "sm_90a", compile_fn=fake_compile)
    module_c, spec_c = add_module(offset=1)  # alignment fact only
    assert spec_c != spec and module_c.kernel.aligned16 == frozenset({"Y", "Out"})
    gpu.compile_cached(module_c, spec_c, "sm_90a", compile_fn=fake_compile)
    assert cache.stats()["compiles"] == 4 and len(list(cache.entries())) == 4


def test_source_locations_are_in_the_key(cache_dir: Path) -> None:
    module, spec = add_module()
    key = gpu.cache_key(module, spec, "sm_90a")
    assert "ptx_kernels.py:" in key.text  # locations printed with the IR


def _corrupt_and_reload(cache_dir: Path, corrupt) -> None:  # type: ignore[no-untyped-def]
    module, spec = add_module()
    gpu.compile_cached(module, spec, "sm_90a", compile_fn=fake_compile)
    (path,) = cache.entries()
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(corrupt(data, module, spec)))
    entry = gpu.compile_cached(module, spec, "sm_90a", compile_fn=fake_compile)
    assert cache.stats()["compiles"] == 2 and cache.stats()["bad_entries"] == 1
    assert entry.kernel.name == "vector_add"
    # the rebuilt entry was written back and is valid
    assert cache.load(gpu.cache_key(module, spec, "sm_90a")) is not None


def test_truncated_entry_is_rebuilt(cache_dir: Path) -> None:
    _corrupt_and_reload(cache_dir, lambda d, m, s: d[: len(d) // 2])


def test_empty_entry_is_rebuilt(cache_dir: Path) -> None:
    _corrupt_and_reload(cache_dir, lambda d, m, s: b"")


def test_bit_flipped_entry_is_rebuilt(cache_dir: Path) -> None:
    def flip(data: bytearray, m, s) -> bytearray:  # type: ignore[no-untyped-def]
        data[len(data) - 100] ^= 0x04  # inside the cubin
        return data

    _corrupt_and_reload(cache_dir, flip)


def test_wrong_format_version_is_rebuilt(cache_dir: Path) -> None:
    def version(data: bytearray, m, s) -> bytearray:  # type: ignore[no-untyped-def]
        data[8:12] = (cache.FORMAT_VERSION + 1).to_bytes(4, "little")
        return data

    _corrupt_and_reload(cache_dir, version)


def test_entry_of_another_key_is_rebuilt(cache_dir: Path) -> None:
    def other(data: bytearray, module, spec) -> bytes:  # type: ignore[no-untyped-def]
        key = gpu.cache_key(module, spec, "sm_80")  # valid file, wrong key echoed inside
        return cache.encode(key, cache.Entry(fake_compile(module, "sm_80"), b"cubin"))

    _corrupt_and_reload(cache_dir, other)


def test_tensor_map_slots_round_trip(cache_dir: Path) -> None:
    """A TENSOR_MAP slot's box and swizzle come back from the disk (format 2)."""
    module, spec = add_module()
    maps = (ParamSlot(SlotKind.TENSOR_MAP, "X", "uint8", box=(8, 64), swizzle="B128"),
            ParamSlot(SlotKind.TENSOR_MAP, "Y", "uint8", box=(1, 2, 256), swizzle="NONE"))

    def with_maps(module, arch, divisible=frozenset()):  # type: ignore[no-untyped-def]
        kernel = fake_compile(module, arch, divisible)
        return kernel._replace(params=(*kernel.params[:-1], *maps, kernel.params[-1]))

    built = gpu.compile_cached(module, spec, "sm_90a", compile_fn=with_maps)
    loaded = gpu.compile_cached(module, spec, "sm_90a", compile_fn=with_maps)
    assert cache.stats()["disk_hits"] == 1 and loaded.kernel == built.kernel
    assert loaded.kernel.params[-3:-1] == maps
    data = cache.entry_path(gpu.cache_key(module, spec, "sm_90a")).read_bytes()
    header_len = cache._PREFIX.unpack_from(data)[2]
    header = json.loads(data[cache._PREFIX.size:cache._PREFIX.size + header_len])
    assert header["kernel"]["params"][-3:-1] == [["tensor_map", "X", "uint8", -1, [8, 64], "B128"],
                                                 ["tensor_map", "Y", "uint8", -1, [1, 2, 256],
                                                  "NONE"]]


def test_an_entry_of_the_previous_format_is_rebuilt(cache_dir: Path) -> None:
    """Format 1 wrote a slot as [kind, arg, dtype, axis]: such an entry, even under the
    current key's name, is a bad entry and is rebuilt; the format is in the key too."""
    module, spec = add_module()
    key = gpu.cache_key(module, spec, "sm_90a")
    assert ("cache_format", str(cache.FORMAT_VERSION)) in cache_key.toolchain()
    assert cache.FORMAT_VERSION == 2
    kernel = fake_compile(module, "sm_90a")
    old = cache._kernel_to_json(kernel)
    old["params"] = [slot[:4] for slot in old["params"]]
    header = json.dumps({"key": key.text, "digest": key.digest, "kernel": old,
                         "binary_len": len(kernel.binary), "image_len": 5},
                        sort_keys=True).encode()
    payload = header + kernel.binary + b"cubin"
    for version in (1, cache.FORMAT_VERSION):  # the old number, or a file renumbered
        data = cache._PREFIX.pack(cache.MAGIC, version, len(header), len(payload),
                                  hashlib.sha256(payload).digest()) + payload
        with pytest.raises(cache.BadEntry, match="format version 1" if version == 1 else
                           "malformed header"):
            cache.decode(key, data)
    cache.entry_path(key).parent.mkdir(parents=True)
    cache.entry_path(key).write_bytes(data)
    entry = gpu.compile_cached(module, spec, "sm_90a", compile_fn=fake_compile)
    assert cache.stats()["bad_entries"] == 1 and cache.stats()["compiles"] == 1
    assert entry.kernel == kernel and cache.load(key) is not None


def test_unwritable_cache_still_compiles(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with knobs.override(cache_dir=str(blocker)):
        cache.reset_stats()
        module, spec = add_module()
        entry = gpu.compile_cached(module, spec, "sm_90a", compile_fn=fake_compile)
    assert entry.image.startswith(b"\x7fELF") and cache.stats()["compiles"] == 1


def test_clear_and_size(cache_dir: Path) -> None:
    module, spec = add_module()
    gpu.compile_cached(module, spec, "sm_90a", compile_fn=fake_compile)
    n, total = cache.size()
    assert n == 1 and total > 1000
    assert cache.clear() == 1 and cache.size() == (0, 0)


# --- across processes ---------------------------------------------------------------------

_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
from tilekit.rt import cache, gpu
from tests.rt.test_cache import add_module
from tests.rt.ptx_kernels import fake_compile
module, spec = add_module()
gpu.compile_cached(module, spec, "sm_90a", compile_fn=fake_compile)
print(json.dumps(cache.stats()))
"""


def _run_process(cache_dir: Path) -> dict[str, int]:
    env = {**os.environ, "TILEKIT_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", _SCRIPT.format(root=str(ROOT))], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_with_a_warm_cache_compiles_nothing(tmp_path: Path) -> None:
    first = _run_process(tmp_path)
    assert first["compiles"] == 1
    second = _run_process(tmp_path)
    assert second["compiles"] == 0 and second["disk_hits"] == 1


def _race(cache_dir: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    import time

    os.environ["TILEKIT_CACHE_DIR"] = cache_dir

    def slow_compile(module, arch, divisible):  # type: ignore[no-untyped-def]
        time.sleep(0.3)  # both processes are compiling at once
        return fake_compile(module, arch, divisible)

    module, spec = add_module()
    barrier.wait(timeout=60)
    entry = gpu.compile_cached(module, spec, "sm_90a", compile_fn=slow_compile)
    results.put((cache.stats()["compiles"], entry.image.startswith(b"\x7fELF")))


def test_two_processes_racing_on_a_cold_key_leave_one_valid_entry(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert outcomes == [(1, True), (1, True)]  # both compiled (cold), both got a cubin
    files = sorted(p.name for p in (tmp_path / "kernels").iterdir())
    assert len(files) == 1 and files[0].endswith(cache.SUFFIX)  # no temporaries left
    with knobs.override(cache_dir=str(tmp_path)):
        module, spec = add_module()
        assert cache.load(gpu.cache_key(module, spec, "sm_90a")) is not None


def test_a_warm_start_imports_no_compiler(tmp_path: Path) -> None:
    """A new process whose disk cache holds the kernel launches it (libcuda faked:
    ``warm_start``) without importing llvmlite, islpy, sympy, the layout library or code
    generation: the toolchain's versions in the cache key come from the stamp the first
    process left (``cache_key.installed_tools``); nor ``cuda.bindings`` or ``cuda.pathfinder``
    (30-45 ms): the driver calls libcuda through ctypes."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TILEKIT_CACHE_DIR", None)

    def run(mode: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "tests.rt.warm_start", mode, str(tmp_path)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
        return json.loads(line[len("RESULT "):])

    cold = run("cold")
    assert cold["stats"]["compiles"] == 1 and "llvmlite" in cold["modules"]
    warm = run("warm")
    assert warm["stats"]["disk_hits"] == 1 and warm["stats"]["compiles"] == 0
    assert warm["modules"] == []
    assert {"cuInit", "cuDevicePrimaryCtxRetain", "cuModuleLoadData", "cuModuleGetFunction",
            "cuLaunchKernel"} <= set(warm["driver_calls"])  # driver.py's own code ran


def test_the_toolchain_stamp_follows_the_installation(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The stamp answers while the installation's signature is unchanged; another
    signature asks the tools again (and rewrites it)."""
    asked = []

    def now() -> dict[str, str]:
        asked.append(1)
        return {"compiler": "c", "llvmlite": "l", "llvm": "v", "nvjitlink": "n"}

    monkeypatch.setattr(cache_key, "_installed_tools_now", now)
    signature = ["one"]
    monkeypatch.setattr(cache_key, "installation_signature", lambda: signature[0])
    with knobs.override(cache_dir=str(tmp_path)):
        for expected_asks, sig in ((1, "one"), (1, "one"), (2, "two"), (2, "two")):
            cache_key.installed_tools.cache_clear()  # as in a new process
            signature[0] = sig
            assert cache_key.installed_tools()["llvm"] == "v"
            assert len(asked) == expected_asks
    cache_key.installed_tools.cache_clear()


def test_the_installation_signature_sees_a_changed_compiler_source(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ir = tmp_path / "ir"
    ir.mkdir()
    (ir / "a.py").write_text("x = 1\n")
    for folder in ("layout", "codegen"):
        (tmp_path / folder).mkdir()
    monkeypatch.setattr(cache_key, "__file__", str(tmp_path / "rt" / "cache_key.py"))
    first = cache_key.installation_signature()
    assert cache_key.installation_signature() == first
    (ir / "a.py").write_text("x = 22\n")
    assert cache_key.installation_signature() != first
