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
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser):  # type: ignore[no-untyped-def]
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files of printed IR instead of comparing")
