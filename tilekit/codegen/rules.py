"""The lowering rule table: one function per op name, registered by decorator.

Adding an op touches one row here (through ``@rule``) per stage; an op without a
rule is a clear ``LoweringError`` at the user's line, never a silent gap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

RuleFn = Callable[[Any, Any], None]
RULES: dict[str, RuleFn] = {}


def rule(*names: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        for name in names:
            if name in RULES and RULES[name] is not fn:
                raise ValueError(f"two lowering rules for `{name}`")
            RULES[name] = fn
        return fn
    return register
