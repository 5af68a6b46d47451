#!/bin/sh
# Lead's final device calls of session 3, on the merged tree (run through scripts/device.sh, which
# builds build-dev first):
#   sh scripts/device.sh shell 'PART=tests sh bench/dev/final_s3.sh'
#       every ctest test (gpu ones included, test_install left out as in device.sh all), then
#       compute-sanitizer (memcheck + racecheck) on the small cases of the kernels this session
#       changed (SAN_TESTS, default: fused inference and training)
#   sh scripts/device.sh shell 'PART=bench sh bench/dev/final_s3.sh'
#       scripts/bench_issues.sh all: the tables behind the issue-5 and issue-7 targets
# Logs and JSON records go to $OUT; a short summary is printed last.
set -u
B=build-dev
OUT=${OUT:-/tmp/twell-out}
mkdir -p "$OUT"
case ${PART:-tests} in
tests)
    t0=$(date +%s)
    (cd $B && ctest -j4 --timeout ${TEST_TIMEOUT:-400} --output-on-failure -E test_install) \
        >"$OUT/ctest.log" 2>&1
    echo "ctest wall $(($(date +%s) - t0)) s"
    SAN_TESTS=${SAN_TESTS:-"test_gpu_ffn_infer test_gpu_train"} sh scripts/device.sh sanitize
    grep -E "Test +#|tests passed|tests failed" "$OUT/ctest.log" | sed 's/  */ /g' | tail -45
    ;;
bench)
    sh scripts/bench_issues.sh all
    ;;
*)
    echo "PART=tests|bench"
    exit 2
    ;;
esac
