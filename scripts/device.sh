#!/bin/sh
# Builds and runs twellrt on the lent GPU machine (Ubuntu, CUDA, no apt, no network).
# Carry .deps/ (made here by `sh scripts/device.sh fetch`; `sh scripts/device.sh stamp` before each
# call records the commit for the results) with the call; then on the device:
#   sh scripts/device.sh test            # build + all tests (gpu ones included, TEST_JOBS=8 at once), logs to $OUT
#   sh scripts/device.sh sanitize        # compute-sanitizer memcheck/racecheck on small gpu cases
#   sh scripts/device.sh bench [args]    # `twell bench` with args, JSON into $OUT
#   sh scripts/device.sh all [bench args] # test + sanitize + bench in one call (one lease)
#   sh scripts/device.sh shell 'cmd'     # set up, then run cmd
set -eu
cmd=${1:-test}
[ $# -gt 0 ] && shift
stamp() { # the commit (and whether the tree differs from it) the device's records will name
    mkdir -p .deps && git describe --always --dirty --abbrev=7 >.deps/commit
}
if [ "$cmd" = fetch ]; then # on the development machine: download the packages to carry
    mkdir -p .deps/py && (cd .deps && apt-get download liblua5.4-0 liblua5.4-dev libcmocka0 libcmocka-dev)
    pip download -q pytest -d .deps/py # pure-Python wheels for the package's tests there
    stamp
    exit 0
fi
if [ "$cmd" = stamp ]; then # on the development machine, before every device call
    stamp
    exit 0
fi
OUT=${OUT:-/tmp/twell-out}
mkdir -p "$OUT"
# This machine has a GPU: a gpu test that cannot get one fails instead of skipping.
export TWELL_REQUIRE_GPU=1
. scripts/device_env.sh
B=build-dev
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTWELL_DEPS_PREFIX=/opt/deps $TWELL_PYTHON_ARG >"$OUT/cmake.log" 2>&1 ||
    { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build $B -j 16 >"$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
rm -f "$OUT/cmake.log" "$OUT/build.log" # built: keep the 8 returned files for results
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
run_tests() {
    (cd $B && ctest --output-on-failure -j ${TEST_JOBS:-8} --timeout ${TEST_TIMEOUT:-300} "$@") >"$OUT/ctest.log" 2>&1 || true
    grep -E "tests passed|Passed|Failed|\*\*\*|Skipped|Not Run" "$OUT/ctest.log" | tail -60
    # the per-case lines of the gpu tests (worst ulp, max_rel_err, variant) for the record
    grep -hE "^# |FAILED|\[  FAILED|fail" $B/Testing/Temporary/LastTest.log 2>/dev/null |
        grep -E "M=|cuda:|simt|sm90|FAIL" | head -80 >"$OUT/gpu_cases.log" || true
}
# Small cases only: the sanitizers slow kernels down 10-100x. test_gpu_gate_pack, test_gpu_ffn_small,
# test_gpu_ffn_infer, test_gpu_train, test_gpu_train_dense, test_gpu_train_heavy,
# test_gpu_packed_valid (malformed packed input on every route: memory safety) and
# test_gpu_nonfinite (NaN and Inf through the routes) take `small`;
# test_gpu_fault (its loops are small) runs whole, memcheck only; test_gpu_soak small (8 threads,
# 3 s) memcheck only. SAN_TESTS="t1 t2" picks a subset.
run_sanitize() {
    for t in ${SAN_TESTS:-test_gpu_driver test_gpu_gate_pack test_gpu_ffn_infer test_gpu_ffn_dense \
        test_gpu_ffn_small test_gpu_train test_gpu_train_dense test_gpu_train_heavy test_gpu_fault \
        test_gpu_packed_valid test_gpu_nonfinite test_gpu_soak}; do
        [ -x "$B/$t" ] || { echo "sanitize: $t not built"; continue; }
        arg=""; [ $t != test_gpu_driver ] && [ $t != test_gpu_fault ] && arg=small
        tools="memcheck racecheck"
        case $t in test_gpu_driver | test_gpu_fault | test_gpu_soak) tools=memcheck ;; esac
        # racecheck instruments only our kernels (every one is named twell_*): cuBLASLt's own
        # kernels are not ours to fix, and excluding them by name (kns=nvjet) still made CUDA 13's
        # racecheck fail with an internal error at the first cuBLASLt matmul
        excl=""
        # test_gpu_driver provokes driver errors on purpose (bad image, OOM, unknown kernel), and
        # test_gpu_train's CPU reference asks the driver about host pointers (INVALID_VALUE by
        # design): report memory errors only, not API return codes
        api=explicit
        case $t in test_gpu_driver | test_gpu_train | test_gpu_train_dense | test_gpu_train_heavy) api=no ;; esac
        for tool in $tools; do
            [ $tool = racecheck ] && excl="--kernel-name kns=twell_" || excl=""
            log="$OUT/san_${t}_$tool.log"
            if (cd $B && TWELL_CACHE_DIR=$PWD/test-cache/san TWELL_TEMPLATE_DIR=$PWD/../templates \
                compute-sanitizer --tool $tool --report-api-errors $api --error-exitcode 9 $excl ./$t $arg) >"$log" 2>&1; then
                echo "$tool $t $arg: clean ($(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1))"
            else
                echo "$tool $t $arg: FAILED (rc $?)"; tail -25 "$log"
            fi
            cat "$log" >>"$OUT/sanitize.log"; rm -f "$log" # $OUT returns 8 files at most
        done
    done
}
case "$cmd" in
test)
    run_tests "$@"
    ;;
sanitize)
    run_sanitize
    ;;
bench)
    $B/twell bench --out "$OUT" "$@"
    ;;
all)
    run_tests -E test_install
    run_sanitize
    # bounded so a slow kernel cannot eat the whole call; the JSON is rewritten per record
    timeout ${BENCH_TIMEOUT:-300} $B/twell bench --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log"
    ;;
shell)
    sh -c "$*"
    ;;
*)
    echo "unknown command $cmd"; exit 2 ;;
esac
