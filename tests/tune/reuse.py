"""A second process: launch ``kernels.accumulate`` once with a timer that fails if called,
and print ``RESULT {json}`` with the tuner's counters, the chosen config and whether the
output is right.

    python3 -m tests.tune.reuse CACHE_DIR N
"""

from __future__ import annotations

import json
import os
import sys


def main(cache_dir: str, n: int) -> dict[str, object]:
    os.environ["TILEKIT_CACHE_DIR"] = cache_dir
    os.environ["TILEKIT_INTERPRET"] = "1"
    import numpy as np

    from tests.tune import kernels
    from tilekit.tune import stats

    kernels.TIMER.fail = True
    x = np.arange(n, dtype=np.float32)
    out = np.ones(n, np.float32)
    kernels.accumulate[kernels.grid(n)](x, out, n)
    chosen = [d.chosen.to_json() for d in kernels.accumulate.decisions.values()]
    return {"stats": stats(), "chosen": chosen, "correct": bool(np.array_equal(out, x + 1))}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], int(sys.argv[2]))))
