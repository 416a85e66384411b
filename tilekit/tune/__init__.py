"""tilekit.tune: the autotuner (``@tk.autotune``), see ``docs/autotune.md``.

    @tk.autotune(configs=[{"BLOCK": 512}, {"BLOCK": 1024}], key=["n"])
    @tk.kernel
    def add(X, Y, Out, n, BLOCK: tk.constexpr): ...

    add[lambda meta: tk.cdiv(n, meta["BLOCK"])](x, y, out, n)

``tuner`` decides and launches; ``probe`` compiles and prunes; ``timing`` measures;
``store`` keeps results on disk and the log; ``calls`` writes a launch as the abstract
call that ``tilekit aot`` reads.
"""

from tilekit.tune.calls import describe_call
from tilekit.tune.config import Config
from tilekit.tune.probe import Report, prune_reasons
from tilekit.tune.store import read_log, tune_dir
from tilekit.tune.timing import CudaEventTimer, Timer
from tilekit.tune.tuner import Autotuner, autotune, reset_stats, stats

__all__ = ["Autotuner", "Config", "CudaEventTimer", "Report", "Timer", "autotune",
           "describe_call", "prune_reasons", "read_log", "reset_stats", "stats", "tune_dir"]
