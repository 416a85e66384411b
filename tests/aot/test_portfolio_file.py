"""The portfolio file: round trip, deterministic bytes, atomic writes, and every kind of
damaged or altered file refused with a ``PortfolioError`` that names the file and the
fault. Synthetic variants (no compiler)."""

from __future__ import annotations

import io
import json
import os
import stat
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tilekit.aot import portfolio
from tilekit.aot.portfolio import VariantKey
from tilekit.codegen.artifact import AssertSite, CompiledKernel, ParamSlot, SlotKind
from tilekit.errors import PortfolioError

SPEC = "X:tensor<float32,rank=1,index=int32,aligned16=1,unit_inner=1,strides16=1>"


def variant(i: int, arch: str = "sm_90a", image: bool = True) -> portfolio.Variant:
    key = VariantKey("k", f"{i % 2:064x}", f"{SPEC};B=constexpr<int:{i}>", "X:0:128", arch)
    params = (ParamSlot(SlotKind.POINTER, "X", "uint64"),
              ParamSlot(SlotKind.TENSOR_MAP, "X", "uint64", -1, (64, 8), "SWIZZLE_128B"),
              ParamSlot(SlotKind.STATUS, "", "uint64"))
    compiled = CompiledKernel("k", arch, "ptx", f".version 8.0 // {i}".encode(), 4, 32, 1024,
                              params, (AssertSite("x > 0", "m.py", 3, 4),), ("X",), True)
    call = {"kernel": {"module": "m.py", "name": "k"}, "args": {"B": {"constexpr": i}},
            "arch": arch}
    return portfolio.Variant(key, "m.py", "X:0:128", call, {"tilekit": "0.1", "llvm": "22"},
                             compiled, b"\x7fELF" + bytes([i]) * 300 if image else b"")


VARIANTS = [variant(1), variant(2), variant(1, "sm_80"), variant(3, image=False)]


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "p.tkp"
    portfolio.write(path, VARIANTS, "0.1")
    found = portfolio.read(path)
    assert found.format == portfolio.FORMAT and found.tilekit_version == "0.1"
    assert sorted(found.variants, key=lambda v: v.key) == sorted(VARIANTS, key=lambda v: v.key)
    assert found.kernels == ["k"]


def test_the_same_variants_give_the_same_bytes() -> None:
    assert portfolio.encode(VARIANTS, "0.1") == portfolio.encode(VARIANTS[::-1], "0.1")
    assert portfolio.encode(VARIANTS, "0.1") != portfolio.encode(VARIANTS[1:], "0.1")


def test_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.tkp"
    portfolio.write(path, VARIANTS[:1], "0.1")
    before = path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644

    def fail(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        portfolio.write(path, VARIANTS, "0.1")
    assert path.read_bytes() == before  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == ["p.tkp"]  # no temporary left


def test_a_variant_twice_is_not_written() -> None:
    with pytest.raises(PortfolioError, match="the same variant twice"):
        portfolio.encode([VARIANTS[0], VARIANTS[0]], "0.1")


# --- damaged and altered files -------------------------------------------------------------


def entries(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def rezip(items: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names
        with zipfile.ZipFile(buf, "w") as zf:
            for name, blob in items:
                zf.writestr(zipfile.ZipInfo(name), blob)
    return buf.getvalue()


def edit_manifest(change: Callable[[dict], object]) -> Callable[[bytes], bytes]:
    def apply(data: bytes) -> bytes:
        items = entries(data)
        manifest = json.loads(items[0][1])
        change(manifest)
        return rezip([("manifest.json", json.dumps(manifest).encode()), *items[1:]])
    return apply


def first_variant(m: dict) -> dict:
    return m["kernels"][0]["variants"][0]


def flip_member_byte(data: bytes) -> bytes:
    """Flip one byte inside the stored data of the first binary member."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        info = zf.infolist()[1]
    raw = bytearray(data)
    name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28],
                                         "little"), \
        int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + info.compress_size // 2] ^= 0x40
    return bytes(raw)


def add_member(name: str) -> Callable[[bytes], bytes]:
    return lambda data: rezip([*entries(data), (name, b"#!/bin/sh\necho pwned\n")])


def rename_member(data: bytes) -> bytes:
    """Rename a binary member and its manifest entry consistently: still not a name
    tilekit gives."""
    items = entries(data)
    manifest = json.loads(items[0][1])
    row = first_variant(manifest)
    old = row["binary"]["member"]
    row["binary"]["member"] = "binaries/other.ptx"
    return rezip([("manifest.json", json.dumps(manifest).encode())]
                 + [("binaries/other.ptx" if n == old else n, b) for n, b in items[1:]])


def setitem(path: tuple, value: object) -> Callable[[dict], object]:
    def change(m: dict) -> None:
        target = m
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
    return change


CASES: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "truncated": (lambda d: d[:len(d) // 2], "not a zip archive, or truncated"),
    "garbage": (lambda d: b"\x00not a zip at all" * 40, "not a zip archive, or truncated"),
    "empty": (lambda d: b"", "not a zip archive, or truncated (0 bytes)"),
    "flipped byte in a member": (flip_member_byte, "is corrupt"),
    "newer format": (edit_manifest(setitem(("format",), portfolio.FORMAT + 1)),
                     f"format version {portfolio.FORMAT + 1} is newer than this tilekit"),
    "format 0": (edit_manifest(setitem(("format",), 0)), "unknown format version 0"),
    "format as text": (edit_manifest(setitem(("format",), "1")), "unknown format version '1'"),
    "edited sha256": (edit_manifest(lambda m: first_variant(m)["binary"].update(
        sha256="0" * 64)), "does not match its sha256 in the manifest"),
    "edited size": (edit_manifest(lambda m: first_variant(m)["binary"].update(size=3)),
                    "the manifest says 3"),
    "../evil member": (add_member("../evil"), "'../evil' has a `..` component"),
    "nested ../ member": (add_member("binaries/../../evil.sh"), "a `..` component"),
    "absolute member": (add_member("/etc/evil"), "'/etc/evil' has an absolute path"),
    "backslash member": (add_member("..\\evil"), "has a backslash"),
    "extra member": (add_member("binaries/extra.ptx"), "'binaries/extra.ptx' is not in the "
                                                       "manifest"),
    "missing member": (lambda d: rezip(entries(d)[:-1]), "is missing"),
    "member twice": (lambda d: rezip([*entries(d), entries(d)[-1]]), "appears twice"),
    "no manifest": (lambda d: rezip(entries(d)[1:]), "no manifest.json in the archive"),
    "manifest not JSON": (lambda d: rezip([("manifest.json", b"{oops"), *entries(d)[1:]]),
                          "manifest.json is not valid JSON"),
    "wrong type": (edit_manifest(lambda m: first_variant(m).update(spec=3)),
                   "kernels[0].variants[0].spec must be str, got int"),
    "no kernels": (edit_manifest(lambda m: m.pop("kernels")), "manifest has no `kernels`"),
    "duplicate variant": (edit_manifest(lambda m: m["kernels"][0]["variants"].append(
        first_variant(m))), "repeats a variant"),
    "edited id": (edit_manifest(lambda m: first_variant(m).update(id="0" * 20)),
                  "id is not the id of its key"),
    "edited key": (edit_manifest(lambda m: first_variant(m).update(arch="gfx942")),
                   "id is not the id of its key"),
    "renamed member": (rename_member, "names the members 'binaries/other.ptx'"),
    "malformed kernel": (edit_manifest(lambda m: first_variant(m)["kernel"].update(
        params="x")), "kernel is malformed"),
    "toolchain not text": (edit_manifest(lambda m: first_variant(m).update(
        toolchain={"llvm": 22})), "toolchain must map names to version strings"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_file_is_refused_with_the_reason(case: str, tmp_path: Path) -> None:
    damage, reason = CASES[case]
    path = tmp_path / "bad.tkp"
    path.write_bytes(damage(portfolio.encode(VARIANTS, "0.1")))
    with pytest.raises(PortfolioError) as info:
        portfolio.read(path)
    message = str(info.value)
    assert message.startswith(f"error: portfolio {path}: "), message
    assert reason in message, message
    assert "\nhint: " in message  # what to do


def test_an_untouched_rezip_is_accepted(tmp_path: Path) -> None:
    """The damage helpers change only what they say: a plain rezip still reads."""
    path = tmp_path / "ok.tkp"
    path.write_bytes(rezip(entries(portfolio.encode(VARIANTS, "0.1"))))
    assert len(portfolio.read(path).variants) == len(VARIANTS)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PortfolioError, match=r"cannot read portfolio .*nope\.tkp"):
        portfolio.read(tmp_path / "nope.tkp")


# --- lazy reading (what tilekit.load_portfolio does) ----------------------------------------


def read_all_binaries(path: Path) -> portfolio.Portfolio:
    found = portfolio.read(path, lazy=True)
    for name in sorted(found.binaries.expected):
        found.binaries.member(name)
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_lazy_read_refuses_every_bad_file_with_the_same_reason(case: str,
                                                                 tmp_path: Path) -> None:
    """``read(lazy=True)`` checks the archive and the manifest at once and a binary when
    it is asked for: every bad file is refused with the same reason as by ``read``, at the
    latest when its damaged binary is asked for."""
    damage, reason = CASES[case]
    path = tmp_path / "bad.tkp"
    path.write_bytes(damage(portfolio.encode(VARIANTS, "0.1")))
    with pytest.raises(PortfolioError) as info:
        read_all_binaries(path)
    message = str(info.value)
    assert message.startswith(f"error: portfolio {path}: ") and reason in message, message


def replace_member(data: bytes, suffix: str, change: Callable[[bytes], bytes]) -> bytes:
    """The archive with the first member named ``*suffix`` changed (the manifest kept)."""
    items = entries(data)
    name = next(n for n, _ in items if n.endswith(suffix))
    return rezip([(n, change(b) if n == name else b) for n, b in items])


def test_a_lazy_read_checks_a_binary_when_it_is_asked_for(tmp_path: Path) -> None:
    """A cubin altered after the build (its sha256 in the manifest kept): the portfolio
    loads, the altered variant is refused when its binary is asked for, before any of its
    bytes are handed out, and the others load. What a launch gets is the cubin, or the PTX
    of a variant without one."""
    data = portfolio.encode(VARIANTS, "0.1")
    path = tmp_path / "altered.tkp"
    path.write_bytes(replace_member(data, ".cubin", lambda b: b[:-1] + b"\0"))
    found = portfolio.read(path, lazy=True)
    assert all(v.compiled.binary == b"" and v.image == b"" for v in found.variants)
    altered = next(n for n, _ in entries(data) if n.endswith(".cubin"))
    loaded, refused = [], []
    for v in found.variants:
        try:
            loaded.append(found.binaries.loadable(v))
        except PortfolioError as exc:
            assert f"archive member {altered!r} does not match its sha256" in str(exc)
            refused.append(v.key.id)
    assert refused == [altered.split("/")[1].split(".")[0]]
    originals = {v.key: v for v in VARIANTS}
    for v in loaded:
        want = originals[v.key]
        assert v.image == want.image
        assert v.compiled.binary == (b"" if want.image else want.compiled.binary)
