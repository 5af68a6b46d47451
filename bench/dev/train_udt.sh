#!/bin/sh
# Issue 7, tiled U / dT (TWELL_TRAIN_UDT): one device call = build, test_gpu_train (CPU reference,
# both routes), the sparse training bench with U/dT per entry and tiled (same call), then
# compute-sanitizer memcheck + racecheck on `test_gpu_train small`, each step bounded so the whole
# stays inside BUDGET seconds. Run from the repo root on the device:
#   TWELL_COMMIT=<sha> BUDGET=400 sh bench/dev/train_udt.sh [test-s] [bench-s per mode]
T0=$(date +%s); END=$((T0 + ${BUDGET:-400}))
left() { l=$((END - $(date +%s) - ${1:-0})); [ $l -lt 5 ] && l=5; echo $l; }
TT=${1:-110}; BT=${2:-90}
sh scripts/device.sh shell "echo built" 2>&1 | tail -2
echo "== built after $(($(date +%s) - T0)) s"
. scripts/device_env.sh
t=$(left 200); [ $t -gt $TT ] && t=$TT
(cd build-dev && timeout $t ./test_gpu_train > $OUT/test.log 2>&1; echo "== test_gpu_train rc=$? (limit $t s)")
grep -E "^\[  FAILED|^\[  PASSED|entry vs tiled|legacy vs|Failure|U/dT tiled" $OUT/test.log | cut -c1-150 | sort | uniq -c | sort -rn | head -14
grep -E "vs fp64" $OUT/test.log | sort -k7 -g | tail -3
t=$(left 160); [ $t -gt 90 ] && t=90
(cd build-dev && timeout $t ./test_gpu_train_dense > $OUT/test_dense.log 2>&1; echo "== test_gpu_train_dense rc=$? (limit $t s)"; grep -E "^\[  (PASSED|FAILED)" $OUT/test_dense.log | head -4)
for mode in entry tiled; do
    mkdir -p $OUT/$mode
    t=$(left 40); [ $t -gt $BT ] && t=$BT
    TWELL_TRAIN_UDT=$mode TWELL_TRAIN_PROFILE=1 timeout $t build-dev/twell bench --op train --path sparse --M 16384 --nnz 29,56 --dist uniform,skewed --reps 10 --out $OUT/$mode > $OUT/bench_$mode.log 2>&1
    echo "== bench $mode rc=$? (limit $t s)"
done
for tool in memcheck racecheck; do
    t=$(left 5)
    (cd build-dev && TWELL_CACHE_DIR=$PWD/test-cache/san TWELL_TEMPLATE_DIR=$PWD/../templates timeout $t \
        compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 ./test_gpu_train small > /tmp/san.log 2>&1
     echo "== $tool rc=$? (limit $t s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san.log | tail -1)"
     grep -E "PASSED|FAILED" /tmp/san.log | tail -2; tail -c 3000 /tmp/san.log >> $OUT/sanitize_tail.log)
done
for mode in entry tiled; do
    echo "== $mode"; grep -E "^train" $OUT/bench_$mode.log | cut -c1-170
    awk '/^# breakdown M=16384 (uniform|skewed) nnz=(29|56) /{p=1} /^train/{p=0} p' $OUT/bench_$mode.log |
        grep -E "^# breakdown|ent_s|^u_|^dt_|fwd_y|bwd_dx|^dw " | head -40
done
