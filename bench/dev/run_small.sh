#!/bin/sh
# Device script for the small-batch path (issue 13, part 1): builds only what it needs, then in
# order of importance: `twell bench` (small path forced, the tiled pipeline, AUTO; the gate-pack
# kernels alone; the 7B-class shape), the GPU tests (test_gpu_ffn_small and the regression tests
# of the ops it hooks into, in parallel), compute-sanitizer on the small cases, register facts.
# Run from the repo root on the GPU machine, carrying .deps:
#   TWELL_COMMIT=<sha> STEPS="bench tests san" sh bench/dev/run_small.sh
# At most 8 files come back from $OUT: logs are merged accordingly.
set -u
OUT=${OUT:-/tmp/small-out}
mkdir -p "$OUT"
. scripts/device_env.sh
B=build-dev
STEPS=${STEPS:-"bench tests san"}
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTWELL_DEPS_PREFIX=/opt/deps >"$OUT/build.log" 2>&1 &&
    cmake --build $B -j 16 --target twell test_gpu_ffn_small test_gpu_ffn_infer test_gpu_gate_pack \
        test_gpu_ffn_dense >>"$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
rm -f "$OUT/build.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
export TWELL_TEMPLATE_DIR="$PWD/templates"
export TWELL_CACHE_DIR="$PWD/$B/test-cache/small"
mkdir -p "$TWELL_CACHE_DIR"
step() { echo "== $* ($(date +%T))"; }
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
REPS=${BENCH_REPS:-20}
mkdir -p /tmp/small-json

bench() { # label, then twell bench arguments
    l=$1
    shift
    step "bench $l: $*"
    timeout ${BENCH_TIMEOUT:-90} $B/twell bench --reps $REPS --out /tmp/small-json "$@" \
        >>"$OUT/bench.log" 2>&1
    echo "rc=$?"
}
if has bench; then
    S="--K 2048 --N 5632 --nnz 29 --dist uniform"
    bench auto --op ffn_infer $S --M ${AUTO_M:-1,8,64,256,1000,4096} --path auto
    bench small --op ffn_infer $S --M ${SMALL_M:-1,8,16,32,64,128,256,512} --path small
    bench tiled --op ffn_infer $S --M ${TILED_M:-1,8,64,256,512,1000} --path sparse
    bench gate-small --op gate_pack $S --M ${GATE_M:-1,8,16,32,64} --variant small
    bench gate-sm90 --op gate_pack $S --M ${GATE_M:-1,8,16,32,64} --variant sm90
    S7="--K 4096 --N 11008 --nnz 29 --dist uniform"
    bench 7b-auto --op ffn_infer $S7 --M 1,8,64 --path auto
    bench 7b-tiled --op ffn_infer $S7 --M 1 --path sparse
    grep -E "^(ffn_infer|ffn_fused_only|gate_pack) |CHECK FAILED|rror" "$OUT/bench.log" |
        cut -c1-150
fi

if has tests; then
    step "tests (parallel)"
    for t in test_gpu_ffn_small ${REGRESSION:-test_gpu_gate_pack test_gpu_ffn_infer test_gpu_ffn_dense}; do
        (cd $B && timeout ${TEST_TIMEOUT:-200} ./$t >"$OUT/t_$t.log" 2>&1; echo "$t rc=$?" >>"$OUT/t_$t.log") &
    done
    wait
    for f in "$OUT"/t_*.log; do
        tail -1 "$f"
        grep -E "^\[  FAILED|^\[  PASSED|^\[  ERROR|^\[   LINE|^\[  SKIPPED" "$f" | head -20
    done
    grep -hE "^# M=|max row-rel|gate-pack:|ran |workspace" "$OUT/t_test_gpu_ffn_small.log" | head -80
    cat "$OUT"/t_*.log >"$OUT/tests.log"
    rm -f "$OUT"/t_*.log
fi

if has san; then
    for tool in ${SAN_TOOLS:-memcheck racecheck}; do
        step "$tool test_gpu_ffn_small small"
        (cd $B && timeout ${SAN_TIMEOUT:-90} compute-sanitizer --tool $tool --report-api-errors explicit \
            --error-exitcode 9 ./test_gpu_ffn_small small) >"$OUT/san_$tool.log" 2>&1
        echo "rc=$?"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race|PASSED|FAILED" "$OUT/san_$tool.log" | head -12
    done
    cat "$OUT"/san_*.log >"$OUT/sanitize.log" 2>/dev/null
    rm -f "$OUT"/san_*.log
fi

if has regs; then
    step "registers"
    for c in "$TWELL_CACHE_DIR"/*.cubin; do
        tail -c +65 "$c" >/tmp/k.cubin
        cuobjdump -res-usage /tmp/k.cubin 2>/dev/null | grep -A1 "small" | grep -E "Function|REG" |
            paste - - | cut -c1-160
    done | sort -u | head -20
fi
