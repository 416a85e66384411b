"""Measured accuracy of the transcendentals on the GPU: max ulps against float64.

Runs ``Y = tk.<fn>(X)`` compiled for the GPU over float32 inputs (random over each
function's useful range plus special values: the same inputs as the host tests,
``tests/codegen/test_scalar_ops.py::math_inputs``) and prints the largest error in
float32 ulps next to the documented bound (docs/numerics.md). Writes JSON.

    python3 bench/ulps.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from tests.codegen.test_scalar_ops import NVPTX_ULPS, check_device_ulps
    from tilekit.rt import driver

    if not driver.status().available:
        print("ulps: no GPU; nothing to measure")
        return 1
    rows = []
    for name in NVPTX_ULPS:
        try:
            found = check_device_ulps((name,))[name]
            rows.append(dict(function=name, ulps=found, bound=NVPTX_ULPS[name]))
            print(f"{name:8s} {found:6.2f} ulp (bound {NVPTX_ULPS[name]})", flush=True)
        except AssertionError as exc:
            rows.append(dict(function=name, error=str(exc), bound=NVPTX_ULPS[name]))
            print(f"{name:8s} OVER THE BOUND: {exc}", flush=True)
    result = dict(bench="ulps", date=time.strftime("%Y-%m-%d"),
                  gpu=driver.device_props(0).name, rows=rows, command="python3 bench/ulps.py")
    text = json.dumps(result, indent=1)
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "ulps.json").write_text(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        Path(args.out, "ulps.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
