#!/bin/sh
# Device script for the fused kernels (issue 5): the dev harness (v5 = the library's kernels vs v6
# of fused_kernels_v6.cuh: exactness against the fp64 reference, determinism, fallback, timing and
# breakdowns with cuBLAS in the same run; v6 DIAG timings; ncu stall sampling of the v6 phases and
# their SASS counts), sanitizers on a small case, then the library (test_gpu_ffn_infer, twell bench
# ffn_infer --path sparse). Run from the repo root on the GPU machine, carrying .deps (and
# build-fusedperf/fused_dev if built here):  TWELL_COMMIT=<sha> sh bench/dev/run_fused.sh [harness|prof|lib|all]
set -u
OUT=${OUT:-/tmp/fused-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
what=${1:-all}
H=build-fusedperf/fused_dev
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
step() { # name timeout command...
    n=$1; t=$2; shift 2
    s0=$(date +%s)
    timeout "$t" "$@" >"$OUT/$n.log" 2>&1
    rc=$?
    echo "== $n rc=$rc $(($(date +%s) - s0)) s"
}
if [ "$what" = harness ] || [ "$what" = all ]; then
    "$H" --bogus >/dev/null 2>&1
    if [ $? -ne 2 ]; then
        echo "carried harness does not run here: building"
        mkdir -p build-fusedperf
        nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o "$H" bench/dev/fused_dev.cu \
            -lcublas >"$OUT/h_build.log" 2>&1 || { tail -20 "$OUT/h_build.log"; exit 1; }
        rm -f "$OUT/h_build.log"
    fi
    step h_perf 200 "$H" --M 4096,16384,65536 --nnz 29,56 --mode uniform,skewed --reps 20 --rows 0 \
        --check 24 --ver ${VER:-6} --diag 1
    grep -E "^\| |verdict|breakdown|diag|lists|note|FAIL" "$OUT/h_perf.log" | cut -c1-200
    {
        for a in "--dtype fp16 --M 4096 --nnz 29" "--gated 0 --M 4096 --nnz 29" \
            "--gated 0 --dtype fp16 --M 1000 --nnz 56" "--K 512 --N 1024 --T 128 --C 4 --M 1000 --nnz 29" \
            "--K 64 --N 256 --T 64 --C 2 --M 333 --nnz 29" "--K 2048 --N 5632 --M 7 --nnz 29" \
            "--dtype fp16 --K 512 --N 1024 --T 64 --C 8 --M 999 --nnz 40"; do
            echo "#### $a"
            timeout 40 "$H" $a --mode uniform,skewed --reps 3 --ver 6 --rows 1 --check 32
        done
    } >"$OUT/h_checks.log" 2>&1
    echo "== checks: $(grep -c 'verdict: ok' "$OUT/h_checks.log") ok, $(grep -c 'verdict: FAIL' "$OUT/h_checks.log") failing"
    grep -E "^####|verdict|v[56]:|lists|note|FAIL|list check" "$OUT/h_checks.log" | cut -c1-200 | head -80
    step h_memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$H" --M 600 --K 256 \
        --N 1024 --nnz 29 --mode skewed --reps 1 --breakdown 0 --ver 6 --rows 0
    grep -E "ERROR SUMMARY|verdict" "$OUT/h_memcheck.log"
    step h_racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$H" --M 128 \
        --K 256 --N 1024 --nnz 29 --mode skewed --reps 1 --breakdown 0 --ver 6 --rows 0
    grep -E "RACECHECK SUMMARY|verdict" "$OUT/h_racecheck.log"
    cat "$OUT/h_memcheck.log" "$OUT/h_racecheck.log" >>"$OUT/h_checks.log"
    rm -f "$OUT/h_memcheck.log" "$OUT/h_racecheck.log"
fi
if [ "$what" = prof ] || [ "$what" = all ]; then
    # where the v6 phases stall (one launch each at M = 16384, 29 nnz), and their SASS mix
    step ncu 150 ncu --clock-control none -k regex:"tw_k_phase_(a|b)6" -c 2 --section SpeedOfLight \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
        "$H" --M 16384 --nnz 29 --mode uniform --reps 1 --ver 4 --rows 0 --breakdown 0 --fallback-test 0
    grep -E "tw_k_phase|Duration|Issue Slots Busy|Issued Warp|No Eligible|Warp Cycles Per Issued|Mem Busy|Max Bandwidth|L2 Hit|Stall|stall" "$OUT/ncu.log" | head -40
    cuobjdump -sass "$H" 2>/dev/null | awk '/Function :/{f=$3; p=(f ~ /tw_k_phase_(a|b)6ILi0E/)}
        p && /HMMA/{h[f]++} p && /LDS/{l[f]++} p && /STG/{s[f]++} p && /PRMT/{r[f]++} p && /BAR/{b[f]++} p && /LDL|STL/{x[f]++} p && /\/\*[0-9a-f]+\*\//{n[f]++}
        END{for (k in n) printf "SASS %s instr=%d HMMA=%d LDS=%d STG=%d PRMT=%d BAR=%d LDL/STL=%d\n", substr(k,1,70), n[k], h[k], l[k], s[k], r[k], b[k], x[k]}' >>"$OUT/ncu.log"
    grep "^SASS" "$OUT/ncu.log"
fi
if [ "$what" = lib ] || [ "$what" = all ]; then
    s0=$(date +%s)
    OUT="$OUT" TEST_TIMEOUT=200 sh scripts/device.sh test ${LIBTESTS:--R test_gpu_ffn_infer}
    echo "== lib tests $(($(date +%s) - s0)) s"
    grep -hE "max row-rel|FAIL|flags:" build-dev/Testing/Temporary/LastTest.log | sort | uniq -c | sort -rn | head -12
    s0=$(date +%s)
    timeout ${BENCH_TIMEOUT:-150} build-dev/twell bench --out "$OUT" --op ffn_infer --M 4096,16384,65536 \
        --nnz 29,56 --dist uniform,skewed --reps 20 --path sparse >"$OUT/bench.log" 2>&1
    echo "== bench rc=$? $(($(date +%s) - s0)) s"
    tail -30 "$OUT/bench.log" | cut -c1-200
fi
