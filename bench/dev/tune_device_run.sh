#!/bin/sh
# tune_device_run.sh — the issue-6 device run (after `sh scripts/device.sh shell` built build-dev):
# test_gpu_tune, then per shape `twell tune` of gate_pack + ffn_infer on a cold cache (first use
# of the whole FFN) and again on the warm cache (a second process: records cached, prewarm
# compiles nothing), then the other tests the change touches. Logs and JSON into $OUT (≤ 8 files).
# SHAPES="K:N ..." and OTHER_TESTS (a ctest regex) narrow the run.
set -u
B=build-dev
OUT=${OUT:-/tmp/twell-out}
export TWELL_TEMPLATE_DIR=$PWD/templates
now() { date +%s.%N; }
el() { awk "BEGIN { printf \"%.2f\", $2 - $1 }"; }
t=$(now)
(cd $B && timeout 300 ctest --timeout 290 -R '^test_gpu_tune$' -V) >"$OUT/test_gpu_tune.log" 2>&1
echo "test_gpu_tune rc=$? in $(el $t $(now)) s"
for s in ${SHAPES:-2048:5632 4096:11008 1024:4096 8192:28672}; do
    K=${s%:*} N=${s#*:} D=/tmp/tune-cold-$K-$N
    rm -rf "$D"
    for run in cold warm; do
        t=$(now)
        TWELL_CACHE_DIR=$D timeout 100 $B/twell tune --K $K --N $N --M 16384 \
            --ops gate_pack,ffn_infer --quiet --json "$OUT/tune_${K}_${N}_$run.json" \
            >>"$OUT/tune.log" 2>&1
        rc=$?
        echo "twell tune K=$K N=$N $run: rc=$rc wall $(el $t $(now)) s" | tee -a "$OUT/tune.log"
    done
    rm -f "$OUT/tune_${K}_${N}_warm.json" # the warm run's numbers are in tune.log
done
t=$(now)
(cd $B && timeout 150 ctest --timeout 140 --output-on-failure \
    -R "${OTHER_TESTS:-test_gpu_ffn_infer|test_tune_cli|test_autotune|test_gate_pack_cfg|test_gpu_gate_pack\$}") \
    >"$OUT/ctest.log" 2>&1
echo "other tests rc=$? in $(el $t $(now)) s"
echo "==== summary"
grep -E "tests passed|Passed|Failed|\*\*\*" "$OUT/ctest.log" | tail -8
grep -E "# (ffn )?K=.*(tuned|exhaustive)|# first use|# second process|# TWELL_TUNE|# T=64|plan ffn M=256|FAILED|ERROR|# WARNING|tests passed" \
    "$OUT/test_gpu_tune.log" | cut -c1-420
grep -E "^(gate_pack|ffn_infer) |^prewarm|^total|^twell tune" "$OUT/tune.log"
