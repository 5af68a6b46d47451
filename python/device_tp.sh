#!/bin/sh
# python/device_tp.sh — tensor parallelism on a lent machine with 2 or more GPUs (no network,
# python3 with torch): builds libtwellrt, runs the NCCL tests of test_parallel.py (2 GPUs: shards,
# torch.compile, CUDA graphs, the Hugging Face swap), then the scaling benchmark
# (bench/python/bench_tp.py over every GPU unless --world says otherwise), JSON and logs into $OUT.
#   sh python/device_tp.sh [all]          # tests, then benchmark (default)
#   sh python/device_tp.sh tests          # the multi-GPU tests only
#   sh python/device_tp.sh bench [args]   # the benchmark only, args to bench_tp.py
# Carry .deps/ (sh scripts/device.sh fetch); .wheels/ with pytest's wheels if the image lacks it.
set -u
OUT=${OUT:-/tmp/twell-out}
mkdir -p "$OUT"
cmd=${1:-all}
[ $# -gt 0 ] && shift
. scripts/device_env.sh
PY=$(command -v "${TWELL_PYTHON:-python3}")
B=build-dev
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTWELL_DEPS_PREFIX=/opt/deps -DTWELL_PYTHON="$PY" \
    >"$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log"; exit 1; }
cmake --build $B --target twellrt -j 16 >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
rm -f "$OUT/cmake.log" "$OUT/build.log"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader || true
export TWELL_LIBRARY=$PWD/$B/libtwellrt.so PYTHONPATH=$PWD/python TWELL_TEMPLATE_DIR=$PWD/templates
export TWELL_CACHE_DIR=$PWD/$B/tp-cache
tests() {
    if ! "$PY" -c 'import pytest' 2>/dev/null; then
        "$PY" -m pip install -q --no-index --find-links .wheels pytest 2>/dev/null ||
            { echo "tests: no pytest (carry .wheels/), skipped"; return 0; }
    fi
    TWELL_REQUIRE_GPU=1 timeout "${TEST_TIMEOUT:-480}" "$PY" -m pytest python/tests/test_parallel.py -q -rs \
        -p no:cacheprovider -m gpu >"$OUT/test_parallel_gpu.log" 2>&1
    echo "test_parallel (gpu, NCCL) exit $?"
    tail -5 "$OUT/test_parallel_gpu.log"
}
bench() {
    timeout "${BENCH_TIMEOUT:-540}" "$PY" bench/python/bench_tp.py --out "$OUT" "$@" >"$OUT/bench_tp.log" 2>&1
    echo "bench_tp exit $?"
    sed -n '/^== tensor-parallel/,$p' "$OUT/bench_tp.log"
    grep -E "Error|error" "$OUT/bench_tp.log" | tail -5
}
case "$cmd" in
tests) tests ;;
bench) bench "$@" ;;
all)
    tests
    bench "$@"
    ;;
*)
    echo "unknown command $cmd"
    exit 2
    ;;
esac
