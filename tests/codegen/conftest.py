"""Fixtures shared by the code generation tests."""

from __future__ import annotations

import pytest

from tilekit import knobs
from tilekit.rt import cache


@pytest.fixture
def on_gpu(tmp_path):
    """A GPU test's own empty disk cache (so every variant compiles), the interpreter off,
    and fresh cache counters."""
    with knobs.override(cache_dir=str(tmp_path), interpret=False):
        cache.reset_stats()
        yield
