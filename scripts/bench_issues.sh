#!/bin/sh
# The benchmark sets behind BENCHMARKS.md's tables, run on the GPU machine after
# `scripts/device.sh` has built build-dev:
#   sh scripts/device.sh shell 'sh scripts/bench_issues.sh [infer|train|serve|kernels|all]'
#   infer    inference AUTO / skewed / crossover (the large-M table)
#   train    training AUTO / skewed / sparse / dense
#   serve    serving (issue 13): M = 1 .. 65536 eager and in CUDA graphs, 29/row, both shapes
#            (K 2048 / N 5632 and the 7B-class K 4096 / N 11008), and AUTO over density 0.5-20%
#   kernels  the next-generation kernel table (issue 15): training 29 / 56 / skewed with memory,
#            inference 16384 uniform / skewed, fused part alone, non-gated
# JSON records go to $OUT (one file per `twell bench` call), the tables to $OUT/bench.log.
set -u
OUT=${OUT:-/tmp/twell-out}
B=${B:-build-dev}
what=${1:-all}
mkdir -p "$OUT"
log="$OUT/bench.log"
: >"$log"
bench() { # label, then twell bench arguments
    label=$1
    shift
    echo "== $label: twell bench $*" | tee -a "$log"
    timeout "${BENCH_STEP_TIMEOUT:-240}" "$B/twell" bench --out "$OUT" "$@" >>"$log" 2>&1 ||
        echo "   (exit $?)" | tee -a "$log"
    sleep 1 # one JSON file per call: names carry the second
}
if [ "$what" = infer ] || [ "$what" = all ]; then
    bench "inference AUTO" --op ffn_infer --path auto --M 4096,16384,65536 --nnz 29,56,110,280 \
        --dist uniform --reps 20
    bench "inference skewed" --op ffn_infer --path auto --M 16384 --nnz 29,56 --dist skewed --reps 20
    bench "inference sparse/dense crossover" --op ffn_infer --path sparse --M 4096,16384 \
        --nnz 70,85 --dist uniform --reps 10
fi
if [ "$what" = train ] || [ "$what" = all ]; then
    bench "training AUTO" --op train --path auto --M 16384 --nnz 29,56,110,280,1100 --dist uniform \
        --reps 10
    bench "training skewed" --op train --path auto --M 16384 --nnz 29 --dist skewed --reps 10
    bench "training sparse" --op train --path sparse --M 16384 --nnz 29,45,56 --dist uniform --reps 10
    bench "training dense" --op train --path dense --M 16384 --nnz 29,45,56 --dist uniform --reps 10
fi
if [ "$what" = serve ] || [ "$what" = all ]; then
    bench "serving AUTO, eager and graph" --op ffn_infer --path auto \
        --M 1,8,64,256,512,1000,2048,4096,16384,65536 --nnz 29 --dist uniform --mode both --reps 20 \
        --warmup 3 --check-rows 16
    bench "serving AUTO, 7B-class layer" --op ffn_infer --path auto --K 4096 --N 11008 \
        --M 1,8,64,256,1000,4096 --nnz 55 --dist uniform --mode both --reps 20 --warmup 3 \
        --check-rows 16
    # density 1% .. 20% of N = 5632: 56, 110, 280, 563, 1126 active per row
    bench "serving AUTO over density" --op ffn_infer --path auto --M 1,8,64,256,1000,4096,16384 \
        --nnz 56,110,280,563,1126 --dist uniform --mode eager --reps 10 --warmup 2 --check-rows 8
fi
if [ "$what" = kernels ] || [ "$what" = all ]; then
    bench "training 29/56 (memory in the note)" --op train --path auto --M 16384 --nnz 29,56 \
        --dist uniform --reps 10
    bench "training skewed" --op train --path auto --M 16384 --nnz 29 --dist skewed --reps 10
    bench "inference 16384 uniform/skewed (+ fused part alone)" --op ffn_infer --path auto \
        --M 16384 --nnz 29 --dist uniform,skewed --reps 20
    bench "non-gated inference" --op ffn_infer --gated 0 --path auto --M 4096,16384 --nnz 29 \
        --dist uniform --reps 20
fi
# the tables only (lines with a ratio), last
grep -E "^==|^op |^(ffn_infer|ffn_fused_only|train|train_fwd|train_bwd)[(_ ]|FAIL|exit" "$log" | tail -120
