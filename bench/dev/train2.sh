#!/bin/sh
# Issue 7 (session 3, h/train2): one device call = build, test_gpu_train, the sparse and dense
# training benches at 29..85 active per row (the AUTO crossover), skewed 29, memcheck on
# `test_gpu_train small`, test_gpu_train_dense, and uniform 29 with the previous twell_train_udt
# (templates from OLD_TEMPLATES, same binary) for the slice-sum comparison; each step bounded so
# the whole stays inside BUDGET seconds. Everything lands in $OUT/r.tgz (8 files come back).
#   TWELL_COMMIT=<sha> BUDGET=400 sh bench/dev/train2.sh
T0=$(date +%s); END=$((T0 + ${BUDGET:-400}))
left() { l=$((END - $(date +%s) - ${1:-0})); [ $l -lt 5 ] && l=5; echo $l; }
lim() { t=$(left "$2"); [ $t -gt "$1" ] && t=$1; echo $t; }
R=/tmp/r; mkdir -p $R
sh scripts/device.sh shell "echo built" 2>&1 | tail -2
echo "== built after $(($(date +%s) - T0)) s"
. scripts/device_env.sh
B="--op train --M 16384 --reps 10"
t=$(lim 120 200)
(cd build-dev && timeout $t ./test_gpu_train > $R/test.log 2>&1; echo "== test_gpu_train rc=$? (limit $t s, at $(($(date +%s) - T0)) s)")
grep -E "^\[  FAILED|^\[  PASSED|Failure" $R/test.log | cut -c1-150 | sort | uniq -c | head -8
grep -E "vs fp64" $R/test.log | sort -k7 -g | tail -2
t=$(lim 90 120)
TWELL_TRAIN_PROFILE=1 timeout $t build-dev/twell bench $B --path sparse --nnz 29,45,56,70,85 --dist uniform --out $R/sparse > $R/bench_sparse.log 2>&1
echo "== bench sparse rc=$? (limit $t s, at $(($(date +%s) - T0)) s)"
t=$(lim 60 70)
timeout $t build-dev/twell bench $B --path dense --nnz 29,45,56,70,85 --dist uniform --out $R/dense > $R/bench_dense.log 2>&1
echo "== bench dense rc=$? (limit $t s, at $(($(date +%s) - T0)) s)"
t=$(lim 30 55)
TWELL_TRAIN_PROFILE=1 timeout $t build-dev/twell bench $B --path sparse --nnz 29 --dist skewed --out $R/skewed > $R/bench_skewed.log 2>&1
echo "== bench skewed rc=$? (limit $t s, at $(($(date +%s) - T0)) s)"
t=$(lim 60 30)
(cd build-dev && TWELL_CACHE_DIR=$PWD/test-cache/san TWELL_TEMPLATE_DIR=$PWD/../templates timeout $t \
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 ./test_gpu_train small > $R/memcheck.log 2>&1
 echo "== memcheck rc=$? (limit $t s): $(grep -E 'ERROR SUMMARY' $R/memcheck.log | tail -1)"
 grep -E "PASSED|FAILED" $R/memcheck.log | tail -2)
t=$(lim 50 5)
(cd build-dev && timeout $t ./test_gpu_train_dense > $R/test_dense.log 2>&1; echo "== test_gpu_train_dense rc=$? (limit $t s)"; grep -E "^\[  (PASSED|FAILED)" $R/test_dense.log | head -4)
if [ -d "${OLD_TEMPLATES:-old_templates}" ]; then
    t=$(lim 40 3)
    TWELL_TEMPLATE_DIR=$PWD/${OLD_TEMPLATES:-old_templates} TWELL_TRAIN_PROFILE=1 timeout $t build-dev/twell bench $B --path sparse --nnz 29 --dist uniform --out $R/old > $R/bench_old.log 2>&1
    echo "== bench old udt rc=$? (limit $t s, at $(($(date +%s) - T0)) s)"
fi
for f in sparse dense skewed old; do
    [ -f $R/bench_$f.log ] || continue
    echo "== $f"; grep -E "^train " $R/bench_$f.log | cut -c1-150
    grep -E "CHECK FAILED" $R/bench_$f.log | cut -c1-300
    awk '/^# breakdown M=/{p=1} /^train/{p=0} p' $R/bench_$f.log | grep -E "^# breakdown|_sum|ent_s|phase_a" | head -30
done
grep -ho '"check": "[^"]*' $R/sparse/*.json $R/skewed/*.json 2>/dev/null | grep -o "dW vs fp64[^;]*;[^;]*;" | sort -u | head -12
tar czf $OUT/r.tgz -C /tmp r
