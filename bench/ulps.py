"""Measured accuracy of the transcendentals on the GPU: max ulps against float64.

Runs ``Y = tk.<fn>(X)`` compiled for the GPU over float32 inputs (random over each
function's useful range plus special values: the same inputs as the host tests,
``tests/codegen/test_scalar_ops.py::math_inputs``) and prints the largest error in
float32 ulps next to the documented bound (docs/numerics.md). Writes JSON.

    python3 bench/ulps.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
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
    from bench.common import environment, write_json

    result = {"bench": "ulps", **environment(), "gpu": driver.device_props(0).name, "rows": rows}
    write_json("ulps", result, Path(args.out) if args.out else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
