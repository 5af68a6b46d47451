#!/bin/sh
# Device script for PDL and the per-call fixed costs of the inference chain (issue 5): after
# `sh scripts/device.sh shell 'sh bench/dev/run_pdl.sh'` built everything, it times
# `twell bench --op ffn_infer` with TWELL_PDL=0 and =1 in alternating processes (same data,
# seed and GPU), then runs the inference / gate-pack / driver GPU tests (the driver test also
# with TWELL_PDL=0) and the sanitizers on their small cases. Logs and JSON (one tar) to $OUT.
set -u
OUT=${OUT:-/tmp/pdl-out}
mkdir -p "$OUT"
. scripts/device_env.sh
B=build-dev
export TWELL_CACHE_DIR=$PWD/$B/pdl-cache
J=/tmp/pdl-json
mkdir -p $J
U="--op ffn_infer --K 2048 --N 5632 --T 256 --C 8 --dtype bf16 --reps 20"
bench() { # tag pdl args...
    tag=$1 p=$2
    shift 2
    echo "== $tag TWELL_PDL=$p" >>"$OUT/bench.log"
    TWELL_PDL=$p timeout 120 $B/twell bench $U --out $J/$tag-pdl$p "$@" >>"$OUT/bench.log" 2>&1 ||
        echo "bench $tag pdl=$p: rc $?" >>"$OUT/bench.log"
}
t0=$(date +%s)
# warm the JIT cache first (both processes then load the same cubins)
TWELL_PDL=1 $B/twell bench $U --path sparse --M 4096 --nnz 29 --dist uniform --reps 2 --out /tmp/warm >/dev/null 2>&1
echo "== warm-up $(($(date +%s) - t0)) s" >>"$OUT/bench.log"
# (--path takes one value: auto and sparse are separate processes)
for p in 0 1; do bench uni-auto $p --path auto --M 4096,16384,65536 --nnz 29 --dist uniform; done
for p in 0 1; do bench uni-sparse $p --path sparse --M 4096,16384,65536 --nnz 29 --dist uniform; done
for p in 0 1; do bench skw-auto $p --path auto --M 16384 --nnz 29 --dist skewed; done
echo "== benches $(($(date +%s) - t0)) s" >>"$OUT/bench.log"
tar -C $J -cf "$OUT/json.tar" .
s0=$(date +%s)
(cd $B && timeout 200 ctest --output-on-failure --timeout 200 -R 'test_gpu_(ffn_infer|ffn_dense|gate_pack|driver)$') >"$OUT/ctest.log" 2>&1
(cd $B && TWELL_PDL=0 ./test_gpu_driver) >>"$OUT/ctest.log" 2>&1 && echo "test_gpu_driver TWELL_PDL=0: passed" >>"$OUT/ctest.log" || echo "test_gpu_driver TWELL_PDL=0: FAILED" >>"$OUT/ctest.log"
echo "== tests $(($(date +%s) - s0)) s" >>"$OUT/ctest.log"
s0=$(date +%s)
SAN_TESTS="${SAN_TESTS:-test_gpu_driver test_gpu_gate_pack test_gpu_ffn_infer test_gpu_ffn_dense}" \
    timeout ${SAN_BUDGET:-120} sh scripts/device.sh sanitize >"$OUT/san_summary.log" 2>&1
echo "== sanitize $(($(date +%s) - s0)) s" >>"$OUT/san_summary.log"
echo "=============== summary"
grep -E "tests passed|Passed|Failed|FAILED|PDL|chain|TWELL_PDL" "$OUT/ctest.log" | tail -20
grep -E "^# PDL|AUTO sparse counts" $B/Testing/Temporary/LastTest.log 2>/dev/null | head -4
cat "$OUT/san_summary.log"
cat "$OUT/bench.log" | cut -c1-150 | head -120
