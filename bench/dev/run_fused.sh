#!/bin/sh
# Device script for the fused kernels (issue 5): the dev harness (v4 vs v5: exactness against the
# fp64 reference, determinism, fallback, timing and breakdowns with cuBLAS in the same run), a
# sanitizer pass on a small case, then the library (test_gpu_ffn_infer, twell bench ffn_infer).
# Run from the repo root on the GPU machine, carrying .deps (and build-fusedperf/fused_dev if
# built here):  TWELL_COMMIT=<sha> sh bench/dev/run_fused.sh [harness|lib|all]
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
        --check 24 --ver 3
    grep -E "^\| |verdict|v5 breakdown|^   breakdown|v5 lists|lists \(cn|note|FAIL" "$OUT/h_perf.log" | cut -c1-200
    {
        for a in "--dtype fp16 --M 4096 --nnz 29" "--gated 0 --M 4096 --nnz 29" \
            "--gated 0 --dtype fp16 --M 1000 --nnz 56" "--K 512 --N 1024 --T 128 --C 4 --M 1000 --nnz 29" \
            "--K 64 --N 256 --T 64 --C 2 --M 333 --nnz 29" "--K 2048 --N 5632 --M 7 --nnz 29" \
            "--dtype fp16 --K 512 --N 1024 --T 64 --C 8 --M 999 --nnz 40"; do
            echo "#### $a"
            timeout 40 "$H" $a --mode uniform,skewed --reps 3 --ver 2 --rows 1 --check 32
        done
    } >"$OUT/h_checks.log" 2>&1
    echo "== checks: $(grep -c 'v5 verdict: ok' "$OUT/h_checks.log") ok, $(grep -c 'v5 verdict: FAIL' "$OUT/h_checks.log") failing"
    grep -E "^####|verdict|v5:|v5 lists|note|FAIL|list check" "$OUT/h_checks.log" | cut -c1-200 | head -60
    step h_memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$H" --M 600 --K 256 \
        --N 1024 --nnz 29 --mode skewed --reps 1 --breakdown 0 --ver 2 --rows 0
    grep -E "ERROR SUMMARY|verdict" "$OUT/h_memcheck.log"
    step h_racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$H" --M 128 \
        --K 256 --N 1024 --nnz 29 --mode skewed --reps 1 --breakdown 0 --ver 2 --rows 0
    grep -E "RACECHECK SUMMARY|verdict" "$OUT/h_racecheck.log"
    cat "$OUT/h_memcheck.log" "$OUT/h_racecheck.log" >>"$OUT/h_checks.log"
    rm -f "$OUT/h_memcheck.log" "$OUT/h_racecheck.log"
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
