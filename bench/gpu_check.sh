#!/usr/bin/env bash
# The GPU leg in one device call: install carried wheels (.whl/, e.g. islpy), print the
# toolchain, run every `gpu`-marked test (the differential suite and the examples on the
# cuda backend, runtime interop, device ulps), then the benches named in $BENCH.
# Usage on the device: bash bench/gpu_check.sh [pytest -k expression]
set -uo pipefail
OUT=${OUT:-/tmp/tk_out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 TILEKIT_CACHE_DIR=/tmp/tk_cache
python3 - <<'PY'
import platform, llvmlite, numpy
print("python", platform.python_version(), "llvmlite", llvmlite.__version__, "numpy", numpy.__version__)
try:
    import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))
except Exception as e: print("torch:", e)
PY
KEXPR=${1:-}
ARGS=(-q -m gpu -p no:cacheprovider -rf --tb=short)
if [ -n "$KEXPR" ]; then ARGS+=(-k "$KEXPR"); fi
if python3 -c "import xdist" 2>/dev/null; then ARGS+=(-n 12); fi
timeout ${TEST_TIMEOUT:-420} python3 -m pytest "${ARGS[@]}" tests 2>&1 | tee "$OUT/gpu_tests.log" | \
  grep -E "^(FAILED|ERROR)|passed|failed|error" | sort | uniq -c | sort -rn | head -${SHOW:-60}
for b in ${BENCH:-}; do python3 "bench/$b" --out "$OUT" 2>&1 | tail -40; done
