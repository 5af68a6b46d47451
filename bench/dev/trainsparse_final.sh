#!/bin/sh
# trainsparse final device run: A = this tree (commit $1); if its test_gpu_train fails, B = the
# tree ../trainsparse_prev (commit $2, tested in the previous run) gets the same sanitize + bench.
A=$1; B=$2; ROOT=$(cd .. && pwd)
one() { # dir commit
    cd "$ROOT/$1" || exit 1
    export TWELL_COMMIT=$2
    sh scripts/device.sh shell "cd build-dev && timeout 170 ctest -R test_gpu_train --output-on-failure > \$OUT/test_$2.log 2>&1; echo \$? > \$OUT/rc_$2; cat Testing/Temporary/LastTest.log >> \$OUT/test_$2.log" 2>&1 | tail -3
    rc=$(cat $OUT/rc_$2); rm -f $OUT/rc_$2
    echo "== $2 test_gpu_train rc=$rc"
    grep -E "PASSED|FAILED|legacy vs|Failure|fail" $OUT/test_$2.log | sort | uniq | head -12
    return $rc
}
san_bench() { # commit
    SAN_TESTS=test_gpu_train timeout 150 sh scripts/device.sh sanitize 2>&1 | tail -4
    TWELL_TRAIN_PROFILE=1 timeout 200 build-dev/twell bench --op train --M 16384 --nnz 29,56,110 --dist uniform,skewed --reps 10 --out $OUT > $OUT/bench_$1.log 2>&1
    echo "== bench $1 rc=$?"
    grep -E "^train" $OUT/bench_$1.log
    awk '/^# breakdown M=16384 (uniform|skewed) nnz=29 /{p=1} /^train/{p=0} p' $OUT/bench_$1.log | head -50
}
if one trainsparse "$A"; then san_bench "$A"; else echo "== A failed: fallback to $B"; one trainsparse_prev "$B"; san_bench "$B"; fi
