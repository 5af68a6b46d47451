#!/bin/sh
# Device script for the dense path of ffn_infer (issue 5): builds only what it needs, then in order
# of importance: its GPU test, `twell bench` with the dense path forced and with AUTO, SASS facts of
# the dense kernels, the sanitizers on small cases, the sparse test's small cases. Run from the repo
# root on the GPU machine, carrying .deps:  TWELL_COMMIT=<sha> sh bench/dev/run_dense.sh
# At most 8 files come back from $OUT: logs are merged accordingly.
set -u
OUT=${OUT:-/tmp/dense-out}
mkdir -p "$OUT"
. scripts/device_env.sh
B=build-dev
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTWELL_DEPS_PREFIX=/opt/deps >"$OUT/build.log" 2>&1 &&
    cmake --build $B -j 16 --target twell test_gpu_ffn_dense test_gpu_ffn_infer \
        test_dense_templates >>"$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
rm -f "$OUT/build.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
export TWELL_TEMPLATE_DIR="$PWD/templates"
CACHE="$PWD/$B/test-cache/dense"
mkdir -p "$CACHE"
step() { echo "== $* ($(date +%T))"; }

step test_gpu_ffn_dense
(cd $B && TWELL_CACHE_DIR="$CACHE" timeout ${TEST_TIMEOUT:-200} ./test_gpu_ffn_dense) \
    >"$OUT/tests.log" 2>&1
echo "rc=$?"
grep -E "^\[  FAILED|^\[  PASSED|^\[  ERROR|^\[   LINE|^# M=|max row-rel|call [0-9]|threshold|two streams|workspace" \
    "$OUT/tests.log" | head -90

# path, M list, nnz list: the dense path where it is meant to win and beyond, AUTO around the
# threshold, the sparse path near the crossover
for run in "dense 4096,16384,65536 29,110,280" "auto 4096,16384 29,56,80,110,280" \
    "sparse 4096,16384 56,80"; do
    set -- $run
    step "bench --path $1 --M $2 --nnz $3"
    sleep 1 # distinct JSON names
    timeout ${BENCH_TIMEOUT:-150} $B/twell bench --op ffn_infer --M $2 --nnz $3 --dist uniform \
        --reps ${BENCH_REPS:-10} --path $1 --out "$OUT" >>"$OUT/bench.log" 2>&1
    echo "rc=$?"
done
grep -E "^ffn_infer |CHECK FAILED|rror" "$OUT/bench.log" | cut -c1-140

step SASS
for c in "$CACHE"/*.cubin; do
    tail -c +65 "$c" >/tmp/k.cubin
    cuobjdump -sass /tmp/k.cubin >/tmp/k.sass 2>/dev/null || continue
    grep -q "twell_gemm_sm90\|twell_dense_count" /tmp/k.sass || continue
    printf "%s %s HGMMA=%s UTMALDG=%s LDL/STL=%s MEMBAR.GPU=%s STG.128=%s LDS=%s\n" \
        "$(basename "$c" | cut -c1-12)" "$(grep -o 'Function : [a-z_0-9]*' /tmp/k.sass | head -1)" \
        "$(grep -c HGMMA /tmp/k.sass)" "$(grep -c UTMALDG /tmp/k.sass)" \
        "$(grep -cE 'LDL|STL' /tmp/k.sass)" "$(grep -cE 'MEMBAR.*GPU' /tmp/k.sass)" \
        "$(grep -cE 'STG.E.128' /tmp/k.sass)" "$(grep -cE '\bLDS' /tmp/k.sass)"
done | sort -u | tee "$OUT/sass.txt" | head -30

step sanitizers
for tool in memcheck racecheck; do
    (cd $B && TWELL_CACHE_DIR="$CACHE" timeout 120 compute-sanitizer --tool $tool \
        --report-api-errors explicit --error-exitcode 9 ./test_gpu_ffn_dense small) \
        >>"$OUT/tests.log" 2>&1
    echo "$tool test_gpu_ffn_dense small: rc=$? $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/tests.log" | tail -1)"
done

step test_gpu_ffn_infer small
(cd $B && TWELL_CACHE_DIR="$CACHE" timeout 120 ./test_gpu_ffn_infer small) >>"$OUT/tests.log" 2>&1
echo "rc=$?"
grep -E "^\[  FAILED|^\[  PASSED|DENSE|dense " "$OUT/tests.log" | tail -8
