"""Failures the fuzzer has found and that are not fixed yet: each has a regression test
marked ``xfail(strict=True)`` (named here), so the fuzzer counts them instead of failing,
and the day one is fixed its regression test says so (strict xfail turns red) and its line
here goes.
"""

from __future__ import annotations

import re

# (pattern of the failure's signature, the regression test that pins it down)
KNOWN: list[tuple[str, str]] = [
    (r"crash: UnboundLocalError",
     "tests/lang/test_fuzz_regressions.py::"
     "test_name_bound_only_in_code_a_return_skips_is_a_trace_error"),
]


def known(signature: str) -> str | None:
    """The regression test of a known failure with this signature, else None."""
    for pattern, test in KNOWN:
        if re.search(pattern, signature):
            return test
    return None
