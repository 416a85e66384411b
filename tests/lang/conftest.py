"""The ``backend`` fixture: one suite, two backends.

Tests that use it (the differential tests and the examples) run once on the CPU
interpreter and once on the GPU; the GPU run is marked ``gpu`` and skipped where
no GPU is found. Both compare against the same numpy references.
"""

from __future__ import annotations

import pytest

from tilekit import knobs


@pytest.fixture(params=["interp", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request):  # type: ignore[no-untyped-def]
    with knobs.override(interpret=request.param == "interp"):
        yield request.param
