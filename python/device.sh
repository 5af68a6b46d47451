#!/bin/sh
# python/device.sh — the PyTorch package on the lent GPU machine (no network, python3 with torch):
# builds libtwellrt, then runs the model benchmark and/or the package's tests through ctest.
#   sh python/device.sh bench [bench_model args]   # bench/python/bench_model.py, JSON into $OUT
#   sh python/device.sh tests                      # ctest -R test_python (gpu tests included)
#   sh python/device.sh all [bench_model args]     # both, benchmark first
#   sh python/device.sh diag [bench_model args]    # forward diagnostics (TWELL_PDL=1 and 0), tests
#   sh python/device.sh hf [bench_hf args]         # bench/python/bench_hf.py (Hugging Face models),
#                                                  # records and log into $OUT, then the plot
# Carry .deps/ (sh scripts/device.sh fetch) and, when the image's python has no pytest, .wheels/
# with pytest's wheels (pip download pytest -d .wheels).
set -u
OUT=${OUT:-/tmp/twell-out}
mkdir -p "$OUT"
cmd=${1:-all}
[ $# -gt 0 ] && shift
. scripts/device_env.sh
PY=$(command -v "${TWELL_PYTHON:-python3}")
"$PY" -c 'import pytest' 2>/dev/null || "$PY" -m pip install -q --no-index --find-links .wheels pytest
B=build-dev
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTWELL_DEPS_PREFIX=/opt/deps -DTWELL_PYTHON="$PY" \
    >"$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log"; exit 1; }
cmake --build $B --target twellrt -j 16 >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
rm -f "$OUT/cmake.log" "$OUT/build.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
"$PY" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
bench() {
    TWELL_CACHE_DIR=$PWD/$B/bench-cache TWELL_LIBRARY=$PWD/$B/libtwellrt.so PYTHONPATH=$PWD/python \
        timeout "${BENCH_TIMEOUT:-300}" "$PY" bench/python/bench_model.py --json "$OUT/bench_model.json" "$@" \
        >"$OUT/bench_model.log" 2>&1
    echo "bench_model exit $?"
    grep -v "^  *[0-9]*:" "$OUT/bench_model.log" | tail -40
}
diag() { # forward diagnostics, with and without programmatic dependent launch
    for pdl in 1 0; do
        TWELL_PDL=$pdl TWELL_CACHE_DIR=$PWD/$B/bench-cache TWELL_LIBRARY=$PWD/$B/libtwellrt.so PYTHONPATH=$PWD/python \
            timeout "${BENCH_TIMEOUT:-300}" "$PY" bench/python/bench_model.py --diag "$@" >"$OUT/diag_pdl$pdl.log" 2>&1
        echo "== TWELL_PDL=$pdl: exit $?"
        grep -E "diag|overhead|   [0-9 .]+ ms|mean over|Error|error" "$OUT/diag_pdl$pdl.log" | tail -45
    done
}
hf() { # BENCH_TIMEOUT bounds the run; bench_hf.json is rewritten per record, so a cut run keeps its records
    TWELL_CACHE_DIR=$PWD/$B/bench-cache TWELL_LIBRARY=$PWD/$B/libtwellrt.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 \
        timeout "${BENCH_TIMEOUT:-300}" "$PY" bench/python/bench_hf.py --out "$OUT" "$@" >"$OUT/bench_hf.log" 2>&1
    echo "bench_hf exit $?"
    "$PY" bench/python/plot_hf.py "$OUT" >/dev/null 2>&1 || echo "plot_hf failed"
    # the progress lines: a result per measurement, the checks, errors and skips
    grep -E " -> |active/token|ERROR|FAILED|skipped|check \(|done:" "$OUT/bench_hf.log" | tail -60
}
tests() {
    (cd $B && TWELL_REQUIRE_GPU=1 timeout "${TEST_TIMEOUT:-300}" ctest -R test_python --output-on-failure) \
        >"$OUT/ctest_python.log" 2>&1
    grep -E "passed|failed|xfail|XFAIL|FAILED|Error|tests passed|Skipped|Passed|Failed" "$OUT/ctest_python.log" | tail -30
}
case "$cmd" in
bench) bench "$@" ;;
hf) hf "$@" ;;
tests) tests ;;
diag)
    diag "$@"
    tests
    ;;
all)
    bench "$@"
    tests
    ;;
*)
    echo "unknown command $cmd"
    exit 2
    ;;
esac
