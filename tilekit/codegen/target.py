"""Targets as data: what code generation may assume about a GPU.

A target is a description (warp size, shared memory, vector width, the bank
model that ``tilekit.layout`` plans with, the LLVM triple and CPU), not a fork
of the lowering: the lowering asks its target's ``vendor`` module for the few
things that differ (special registers, barriers, shuffles, address spaces).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilekit.errors import LoweringError


@dataclass(frozen=True)
class Target:
    name: str  # what users and caches say: "sm_90a", "sm_80", "gfx942"
    vendor: str  # "nvptx" or "amdgpu"
    triple: str
    cpu: str
    features: str
    warp_size: int
    max_shared_bytes: int  # per block (opt-in maximum)
    max_vector_bytes: int  # widest global access per thread
    bank_target: str  # tilekit.layout.banks target name
    max_threads: int = 1024

    @property
    def is_nvidia(self) -> bool:
        return self.vendor == "nvptx"


TARGETS: dict[str, Target] = {
    "sm_90a": Target("sm_90a", "nvptx", "nvptx64-nvidia-cuda", "sm_90a", "+ptx80", 32,
                     227 * 1024, 16, "sm_90"),
    "sm_80": Target("sm_80", "nvptx", "nvptx64-nvidia-cuda", "sm_80", "+ptx80", 32,
                    163 * 1024, 16, "sm_80"),
    "gfx942": Target("gfx942", "amdgpu", "amdgcn-amd-amdhsa", "gfx942", "", 64,
                     64 * 1024, 16, "gfx942"),
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise LoweringError(f"unknown target {name!r}",
                            hints=[f"targets: {', '.join(sorted(TARGETS))}"]) from None


def nvidia_target_for(major: int, minor: int) -> Target:
    """The target to compile for a device of compute capability ``major.minor``."""
    if major >= 9:
        return TARGETS["sm_90a"] if (major, minor) == (9, 0) else TARGETS["sm_80"]
    if major == 8:
        return TARGETS["sm_80"]
    raise LoweringError(f"compute capability {major}.{minor} is not supported",
                        hints=["tilekit needs an Ampere (sm_80) or newer NVIDIA GPU"])
