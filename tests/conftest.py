"""Test-wide settings: hypothesis profiles and the GPU marker.

Hypothesis runs derandomized in CI (profile ``ci``, the default) so that a red
run is reproducible; ``HYPOTHESIS_PROFILE=dev`` explores with fresh seeds.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=300)
# The device leg (bench/gpu_check.sh): every example compiles a kernel, so fewer of them.
settings.register_profile("device", derandomize=True, deadline=None, max_examples=12,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser):  # type: ignore[no-untyped-def]
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files of printed IR instead of comparing")


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Skip tests marked ``gpu`` when the CUDA driver finds no device (asked once, only
    when such a test was collected)."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import pytest

    from tilekit.rt import driver

    status = driver.status()
    if status.available:
        return
    skip = pytest.mark.skip(reason=f"no GPU: {status.reason}")
    for item in gpu_items:
        item.add_marker(skip)
