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
