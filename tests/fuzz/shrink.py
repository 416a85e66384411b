"""Minimizing a failing program through its choices (for the device runner and triage).

A program drawn by ``generate.RandomDraw`` is a list of small ints; replaying a shorter or
smaller list gives a simpler program (every choice's 0 is its simplest option, and a list
that runs out reads as zeros). ``shrink`` tries, as hypothesis does on its own choice
sequence, to delete runs of choices and to lower single ones, keeping each change under
which the program still fails the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def _key(choices: list[int]) -> tuple[int, list[int]]:
    return len(choices), choices


def shrink(choices: list[int], fails: Callable[[list[int]], bool], deadline: float,
           max_tries: int = 2000) -> tuple[list[int], int]:
    """The smallest variant of ``choices`` found for which ``fails`` still holds, and how
    many variants were tried. Stops at ``deadline`` (``time.monotonic()``)."""
    best = list(choices)
    tries = 0

    def attempt(candidate: list[int]) -> bool:
        nonlocal best, tries
        if tries >= max_tries or time.monotonic() > deadline:
            return False
        if _key(candidate) >= _key(best):
            return False
        tries += 1
        try:
            ok = fails(candidate)
        except Exception:
            ok = False
        if ok:
            best = candidate
        return ok

    improved = True
    while improved and tries < max_tries and time.monotonic() < deadline:
        improved = False
        # cut the tail
        for keep in (len(best) // 4, len(best) // 2, 3 * len(best) // 4):
            if attempt(best[:keep]):
                improved = True
        # delete runs of choices (removes statements and sub-expressions)
        for width in (16, 8, 4, 2, 1):
            i = len(best) - width
            while i >= 0:
                if attempt(best[:i] + best[i + width:]):
                    improved = True
                i -= width
        # lower single choices
        for i in range(len(best)):
            if i >= len(best) or best[i] == 0:
                continue
            for smaller in (0, best[i] // 2, best[i] - 1):
                if smaller < best[i] and attempt(best[:i] + [smaller] + best[i + 1:]):
                    improved = True
                    break
    return best, tries
