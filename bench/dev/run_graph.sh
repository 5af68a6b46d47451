#!/bin/sh
# Device script for issue 13's CUDA-graph capture and AUTO-over-M work (branch h/graph). Run from
# the repo root on the GPU machine, carrying .deps:   PART=measure|verify sh bench/dev/run_graph.sh
#   measure  build; test_gpu_graph; the crossover sweep: twell bench --path sparse and --path dense,
#            eager and graph mode, M 1..16384 x 29/56/110/280/1126 active per row (uniform); then
#            every gpu ctest test and memcheck of test_gpu_graph small, side by side
#   verify   build; every gpu ctest test beside memcheck and racecheck of test_gpu_graph small;
#            twell bench --path auto, eager and graph, M 1..65536 x 0.5-20% active (K 2048,
#            N 5632) and M 1..16384 x 0.5-5% (K 4096, N 11008)
# Steps are bounded (timeout) so the call ends inside the device's 600 s; logs and JSON go to
# $OUT (8 files at most come back); a summary is printed last.
set -u
OUT=${OUT:-/tmp/graph-out}
PART=${PART:-measure}
mkdir -p "$OUT"
. scripts/device_env.sh
B=build-dev
t0=$(date +%s)
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTWELL_DEPS_PREFIX=/opt/deps >"$OUT/build.log" 2>&1 &&
    cmake --build $B -j 16 >>"$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
rm -f "$OUT/build.log"
echo "built in $(($(date +%s) - t0)) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
# one kernel cache for the direct runs (the ctest tests keep their own)
export TWELL_CACHE_DIR=$PWD/$B/cache-graph TWELL_TEMPLATE_DIR=$PWD/templates TWELL_REQUIRE_GPU=1
san() { # tool test arg
    if timeout ${SAN_TIMEOUT:-200} compute-sanitizer --tool "$1" --error-exitcode 9 ./$B/"$2" $3 \
        >"$OUT/san_$1.log" 2>&1; then
        echo "$1 $2 $3: clean ($(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/san_$1.log" | tail -1))"
    else
        echo "$1 $2 $3: FAILED (rc $?)"
        grep -E "=========|FAILED|Invalid|race" "$OUT/san_$1.log" | head -20
    fi
}
bench() { # label args...
    l=$1
    shift
    timeout ${BENCH_TIMEOUT:-150} ./$B/twell bench --op ffn_infer --out "$OUT" "$@" >"$OUT/bench_$l.log" 2>&1
    echo "bench $l: rc $? ($(grep -c ok "$OUT/bench_$l.log") ok lines)"
}
case "$PART" in
measure)
    t=$(date +%s)
    timeout 150 ./$B/test_gpu_graph >"$OUT/graph.log" 2>&1
    echo "test_gpu_graph: rc $? in $(($(date +%s) - t)) s"
    grep -E "^# |FAILED|PASSED|Error|error" "$OUT/graph.log" | head -60
    S="--M 1,8,64,256,1000,4096,16384 --nnz 29,56,110,280,1126 --dist uniform --mode both"
    S="$S --reps 10 --warmup 2 --check-rows 32"
    bench sparse $S --path sparse
    bench dense $S --path dense
    (cd $B && ctest -L gpu -E test_gpu_graph -j 4 --timeout 240 >"$OUT/ctest.log" 2>&1) &
    ct=$!
    san memcheck test_gpu_graph small
    wait $ct
    grep -E "tests passed|Passed|Failed|\*\*\*|Not Run" "$OUT/ctest.log" | tail -20
    ;;
verify)
    (cd $B && ctest -L gpu -j 4 --timeout 280 >"$OUT/ctest.log" 2>&1) &
    ct=$!
    san memcheck test_gpu_graph small
    san racecheck test_gpu_graph small
    wait $ct
    grep -E "Test #|tests passed|Failed|\*\*\*|Not Run" "$OUT/ctest.log" | tail -14
    grep -hE "FAILED|Error" $B/Testing/Temporary/LastTest.log | head -10
    A="--M 1,8,64,256,1000,4096,16384,65536 --nnz 29,56,110,280,1126 --dist uniform --mode both"
    BENCH_TIMEOUT=200 bench auto $A --path auto --reps 10 --warmup 2 --check-rows 32
    L="--K 4096 --N 11008 --M 1,64,256,1000,4096,16384 --nnz 55,110,220,550 --dist uniform"
    BENCH_TIMEOUT=120 bench auto7b $L --path auto --mode both --reps 10 --warmup 2 --check-rows 16
    for l in auto auto7b; do
        echo "== $l: op M nnz variant ours base ratio check"
        grep -E "^ffn_infer" "$OUT/bench_$l.log" | awk '{print $1, $3, $9, $11, $12, $13, $14, $18}'
    done
    ;;
esac
echo "total $(($(date +%s) - t0)) s"
