#!/usr/bin/env bash
# The GPU leg in one device call: install carried wheels (.whl/, e.g. islpy), print the
# toolchain, run every `gpu`-marked test (the differential suite and the examples on the
# cuda backend, runtime interop, device ulps), rerun one failure per test function with
# tracebacks, then the benches named in $BENCH (script names; `name.py:--quick` passes an
# option). Usage on the device: bash bench/gpu_check.sh [pytest -k expression]
# Environment: TEST_PATHS (default tests), RERUN_ONLY (a file of node ids: skip the full
# run), RERUN/ELINES (how many failures to rerun and show), TEST_TIMEOUT, PER_TEST.
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
# The native launcher (tilekit/rt/_fastlaunch.c), built in place; without it the generated
# Python dispatcher serves fast-path hits (`tilekit info` says which).
python3 setup.py -q build_ext --inplace > "$OUT/build_ext.log" 2>&1 || \
  echo "== native launcher not built (see build_ext.log): hits take the Python dispatcher"
[ -f COMMIT ] && export TILEKIT_BENCH_COMMIT=$(cat COMMIT)  # a snapshot without history
export PYTHONUNBUFFERED=1 TILEKIT_CACHE_DIR=/tmp/tk_cache HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-device}
python3 - <<'PY'
import platform, llvmlite, numpy
print("python", platform.python_version(), "llvmlite", llvmlite.__version__, "numpy", numpy.__version__)
try:
    import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))
except Exception as e: print("torch:", e)
PY
KEXPR=${1:-}
ARGS=(-v -m gpu -rf --tb=no -p no:randomly)
if [ -n "$KEXPR" ]; then ARGS+=(-k "$KEXPR"); fi
if python3 -c "import xdist" 2>/dev/null; then ARGS+=(-n ${WORKERS:-14}); fi
if python3 -c "import pytest_timeout" 2>/dev/null; then ARGS+=(--timeout=${PER_TEST:-60} --timeout-method=thread); fi
if [ -n "${RERUN_ONLY:-}" ]; then  # a list of node ids: skip the full run
  sed 's/^/[gw0] FAILED /' "$RERUN_ONLY" > "$OUT/gpu_tests.log"
else
timeout ${TEST_TIMEOUT:-400} python3 -m pytest "${ARGS[@]}" ${TEST_PATHS:-tests} > "$OUT/gpu_tests.log" 2>&1
fi
echo "== pytest exit $? ; $(grep -cE ' PASSED ' "$OUT/gpu_tests.log") passed, $(grep -cE ' FAILED ' "$OUT/gpu_tests.log") failed, $(grep -cE ' (ERROR|XPASS) ' "$OUT/gpu_tests.log") error/xpass"
tail -3 "$OUT/gpu_tests.log"
grep -E ' (FAILED|ERROR|XPASS) ' "$OUT/gpu_tests.log" | sed -E 's/.*(FAILED|ERROR|XPASS) //; s/ - .*//; s/[[:space:]]+$//' > "$OUT/failed.txt"
sed -E 's/\[.*//' "$OUT/failed.txt" | sort | uniq -c | sort -rn | head -${SHOW:-40}
# One failure per test function, rerun alone with a short traceback.
awk -F'[' '!seen[$1]++' "$OUT/failed.txt" | head -${RERUN:-25} > "$OUT/rerun.txt"
if [ -s "$OUT/rerun.txt" ]; then
  # node ids contain spaces ("(3, 5, 7)"): one argument per line; one process per test, so a
  # test that faults (and poisons its CUDA context) does not fail the others
  mkdir -p /tmp/rr && rm -f /tmp/rr/*
  tr '\n' '\0' < "$OUT/rerun.txt" | timeout ${RERUN_TIMEOUT:-200} xargs -0 -n 1 -P 10 sh -c \
    'python3 -m pytest -q -p no:randomly --tb=short -m gpu "$0" > /tmp/rr/$$.log 2>&1'
  cat /tmp/rr/*.log > "$OUT/rerun.log"
  grep -E "^E  |^(tests|tilekit|examples)/.*:[0-9]+: |^_{3,} " "$OUT/rerun.log" | \
    cut -c1-220 | head -${ELINES:-150}
fi
for b in ${BENCH:-}; do
  script=${b%%:*}; opts=""; [ "$script" != "$b" ] && opts=${b#*:}
  python3 "bench/$script" $opts --out "$OUT" 2>&1 | tail -40
done
