"""Failures the fuzzer has found and that are not fixed yet: each has a regression test
marked ``xfail(strict=True)`` (named here), so the fuzzer counts them instead of failing,
and the day one is fixed its regression test says so (strict xfail turns red) and its line
here goes.
"""

from __future__ import annotations

import re

# (pattern of the failure's signature, the regression test that pins it down)
KNOWN: list[tuple[str, str]] = []


def known(signature: str) -> str | None:
    """The regression test of a known failure with this signature, else None."""
    for pattern, test in KNOWN:
        if re.search(pattern, signature):
            return test
    return None
