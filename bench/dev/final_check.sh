#!/bin/sh
# Lead's last device call of session 2 (after `sh scripts/device.sh shell` built build-dev):
# the GPU tests touched since the last full run (inference after the cuda_ffn split and the GT
# option, tuning, fault loops, dense training), then the sparse training stage-geometry variants
# not measured before (TWELL_TRAIN_STAGE=kc,stages,warps,xf), each run through test_gpu_train's
# exactness checks and `twell bench`. Logs into $OUT.
set -u
B=build-dev
OUT=${OUT:-/tmp/twell-out}
(cd $B && ctest -j4 --timeout 300 --output-on-failure \
    -R "test_gpu_ffn_infer|test_gpu_ffn_dense|test_gpu_tune|test_gpu_fault|test_gpu_gate_pack|test_gpu_driver|test_gpu_train_dense") \
    >"$OUT/ctest.log" 2>&1
grep -E "Test +#|tests passed" "$OUT/ctest.log"
V=${VARIANTS:-"64,2,4,0 32,2,4,0 32,2,8,0 64,2,8,0"}
NEW=${NEW_VARIANTS:-"32,2,4,0 32,2,8,0 64,2,8,0"} # the default's exactness ran at d381c6b
for v in $NEW; do # exactness of each new variant (bitwise legacy test, CPU reference)
    (cd $B && TWELL_TRAIN_STAGE=$v TWELL_CACHE_DIR=$PWD/test-cache/stage-$v \
        TWELL_TEMPLATE_DIR=$PWD/../templates ./test_gpu_train >"$OUT/train_$v.log" 2>&1
     echo "test_gpu_train TWELL_TRAIN_STAGE=$v rc=$?") &
done
wait
for v in $V; do
    echo "== TWELL_TRAIN_STAGE=$v" >>"$OUT/stage.log"
    TWELL_TRAIN_STAGE=$v TWELL_TRAIN_PROFILE=1 $B/twell bench --op train --path sparse --M 16384 \
        --nnz 29,56 --dist uniform --reps 10 --out "$OUT" >>"$OUT/stage.log" 2>&1
    sleep 1
done
for v in $NEW; do tail -3 "$OUT/train_$v.log" | grep -E "PASSED|FAILED" | sed "s/^/$v: /"; done
grep -E "^==|^train |fwd_ent_s|bwd_ent_s" "$OUT/stage.log" | cut -c1-160
