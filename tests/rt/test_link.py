"""nvJitLink turns PTX into cubins for sm_90a and sm_80 with no GPU present."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tilekit.errors import LoweringError
from tilekit.rt import link

from .ptx_kernels import assert_positive_ptx, vector_add_ptx

pytestmark = pytest.mark.skipif(not link.available(), reason="nvJitLink is not installed")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_links_ptx_offline(arch: str, dtype: str) -> None:
    cubin = link.link_ptx(vector_add_ptx(dtype=dtype), arch, "vector_add")
    assert cubin.startswith(b"\x7fELF") and b"vector_add" in cubin


def test_archs_give_different_cubins() -> None:
    assert link.link_ptx(vector_add_ptx(), "sm_80") != link.link_ptx(vector_add_ptx(), "sm_90a")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cubin_is_for_the_requested_arch(arch: str, tmp_path: Path) -> None:
    cuobjdump = shutil.which("cuobjdump") or _wheel_tool("cuobjdump")
    if cuobjdump is None:
        pytest.skip("cuobjdump is not installed")
    path = tmp_path / "k.cubin"
    path.write_bytes(link.link_ptx(assert_positive_ptx(), arch))
    out = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"code for {arch}\n" in out.stdout and "assert_positive" in out.stdout


def _wheel_tool(name: str) -> str | None:
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
    except ImportError:
        return None
    try:
        return find_nvidia_binary_utility(name)
    except Exception:
        return None


def test_bad_ptx_is_a_lowering_error_with_the_linker_log() -> None:
    bad = vector_add_ptx().replace("add.f32 %f3, %f1, %f2;", "add.f32 %f3, %f1, %nope;")
    with pytest.raises(LoweringError) as info:
        link.link_ptx(bad, "sm_90a", "vector_add")
    assert "vector_add" in str(info.value) and "nope" in str(info.value)


def test_unknown_arch_is_a_lowering_error() -> None:
    with pytest.raises(LoweringError, match="sm_12345"):
        link.link_ptx(vector_add_ptx(), "sm_12345")


def test_version() -> None:
    assert link.version() is not None and link.version().count(".") == 1


def test_version_comes_from_the_first_wheel_on_the_path(tmp_path, monkeypatch) -> None:
    """``version`` reads the wheel's ``.dist-info`` folder name (no importlib.metadata, no
    library load): the first path entry with one wins, as ``import`` would; other
    distributions whose names start alike do not count."""
    first, second = tmp_path / "a", tmp_path / "b"
    (first / "nvidia_nvjitlink_cu12-12.4.127.dist-info").mkdir(parents=True)
    (first / "nvidia_nvjitlink-12.9.41.dist-info").mkdir()
    (second / "nvidia_nvjitlink-13.0.88.dist-info").mkdir(parents=True)
    monkeypatch.setattr("sys.path", [str(tmp_path / "missing"), str(first), str(second)])
    link.version.cache_clear()
    try:
        assert link.version() == "12.9"
        monkeypatch.setattr("sys.path", [str(second), str(first)])
        link.version.cache_clear()
        assert link.version() == "13.0"
    finally:
        link.version.cache_clear()


# --- nvJitLink's own cache -----------------------------------------------------------------


class _FakeLinker:
    """nvJitLink's calls as ``link_ptx`` makes them, recording each handle's options; an
    older linker refuses ``-no-cache`` (``knows_no_cache=False``)."""

    class nvJitLinkError(Exception):
        pass

    class InputType:
        PTX = 1

    def __init__(self, knows_no_cache: bool) -> None:
        self.knows_no_cache, self.created = knows_no_cache, []

    def create(self, count, options):
        if not self.knows_no_cache and link.NO_CACHE in options:
            raise self.nvJitLinkError("ERROR_UNRECOGNIZED_OPTION")
        if options[0] not in ("-arch=sm_80", "-arch=sm_90a"):
            raise self.nvJitLinkError("ERROR_UNRECOGNIZED_OPTION")
        self.created.append(list(options))
        return len(self.created)

    def add_data(self, *args):
        pass

    def complete(self, handle):
        pass

    def get_linked_cubin_size(self, handle):
        return 4

    def get_linked_cubin(self, handle, buf):
        buf[:] = b"\x7fELF"

    def destroy(self, handle):
        pass


@pytest.fixture
def fake_linker(monkeypatch):
    def install(knows_no_cache: bool) -> _FakeLinker:
        fake = _FakeLinker(knows_no_cache)
        monkeypatch.setattr(link, "_nvjitlink", lambda: fake)
        monkeypatch.setattr(link, "_refuses_no_cache", False)
        return fake
    return install


def test_links_without_nvjitlinks_own_cache(fake_linker) -> None:
    fake = fake_linker(knows_no_cache=True)
    assert link.link_ptx(vector_add_ptx(), "sm_90a") == b"\x7fELF"
    assert fake.created == [["-arch=sm_90a", link.NO_CACHE]]


def test_a_linker_without_the_option_links_as_before(fake_linker) -> None:
    fake = fake_linker(knows_no_cache=False)
    assert link.link_ptx(vector_add_ptx(), "sm_90a") == b"\x7fELF"
    assert link.link_ptx(vector_add_ptx(), "sm_80") == b"\x7fELF"
    assert fake.created == [["-arch=sm_90a"], ["-arch=sm_80"]]  # asked once with it


def test_an_unknown_arch_is_not_taken_for_a_refused_option(fake_linker) -> None:
    fake = fake_linker(knows_no_cache=True)
    with pytest.raises(LoweringError, match="sm_12345"):
        link.link_ptx(vector_add_ptx(), "sm_12345")
    assert not link._refuses_no_cache
    assert link.link_ptx(vector_add_ptx(), "sm_90a") == b"\x7fELF"
    assert fake.created[-1] == ["-arch=sm_90a", link.NO_CACHE]
