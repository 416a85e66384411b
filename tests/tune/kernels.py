"""Tuned kernels shared by the tests and by ``reuse.py`` (a second process must trace the
same source lines to find the same record), with a timer that returns scripted numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tilekit as tk
from tilekit.tune import Config, autotune


class ScriptedTimer:
    """Times nothing: each config's runs are made (so restoring is exercised), and the
    scripted milliseconds (by config label) are returned. ``fail``: raise if called."""

    def __init__(self) -> None:
        self.script: dict[str, float] = {}
        self.timed: list[str] = []
        self.runs = 0
        self.fail = False

    def measure(self, config: Config, run: Callable[[], None], warmup: int,
                rep: int) -> Sequence[float]:
        if self.fail:
            raise AssertionError(f"timed {config.label} although the choice was stored")
        for _ in range(warmup + rep):
            run()
            self.runs += 1
        self.timed.append(config.label)
        return [self.script.get(config.label, 1.0)] * rep


TIMER = ScriptedTimer()
CONFIGS = [{"BLOCK": 16}, {"BLOCK": 32}, {"BLOCK": 64}]


@autotune(configs=CONFIGS, key=["n"], timer=TIMER, warmup=1, rep=3)
@tk.kernel
def accumulate(X: tk.Tensor, Out: tk.Tensor, n, BLOCK: tk.constexpr):
    """Out += X: a kernel whose result shows how often it ran."""
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    mask = offs < n
    tk.store(Out, offs, tk.load(Out, offs, mask=mask) + tk.load(X, offs, mask=mask), mask=mask)


def grid(n: int) -> Callable[[dict], tuple[int]]:
    return lambda meta: (tk.cdiv(n, meta["BLOCK"]),)
