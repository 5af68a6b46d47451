#!/bin/sh
# The benchmark sets behind BENCHMARKS.md's tables, run on the GPU machine after
# `scripts/device.sh` has built build-dev:
#   sh scripts/device.sh shell 'sh scripts/bench_issues.sh [infer|train|serve|density|kernels|all]'
#   infer    inference AUTO / skewed / crossover (the large-M table)
#   train    training AUTO / skewed / sparse / dense
#   serve    serving (issue 24): AUTO at every M of SERVE_M, uniform and skewed, eager and in CUDA
#            graphs, both shapes (K 2048 / N 5632 at 29 active per row, the 7B-class K 4096 /
#            N 11008 at 55), and the non-gated block at 29 per row (eager)
#   density  AUTO over density 0.5, 1, 2, 5, 10, 20 % of N at the M of DENSITY_M, uniform and
#            skewed, eager, both shapes
#   kernels  the next-generation kernel table (issue 15): training 29 / 56 / skewed with memory,
#            inference 16384 uniform / skewed, fused part alone, non-gated
# JSON records go to $OUT (one file per `twell bench` call), the tables to $OUT/bench.log;
# `scripts/plot_bench.py $OUT/*.json` (matplotlib) draws them.
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
# The serving and density sweeps' cost, estimated from the records they write: a timed case runs
# (warmup + reps) x 3 implementations (ours end to end, ours fused only, the dense FFN), each after
# an L2 flush (~0.15 ms); with a run at max(6·M·K·N / 600 TFLOP/s, the bytes it moves / 3.3 TB/s)
# plus launch time, the serve set's 60 eager + 60 graph cases at 20 + 3 time about 16 s, its 30
# non-gated cases about 3 s, the density set's 192 cases at 10 + 2 about 8 s. Setup adds about as
# much again: per case the check (two untimed runs, y and the packed gate copied back), the capture
# and its checked replay; per call the synthetic data at its largest M and the first-use JIT
# compiles. In all about 1.5-3 minutes of device time for both sets (684 records), inside the 6
# the issue allows, and every call far below BENCH_STEP_TIMEOUT.
SERVE_M=1,2,4,8,16,32,64,128,256,512,1024,2048,4096,16384,65536
DENSITY_M=1,8,64,256,1024,2048,4096,16384
if [ "$what" = serve ] || [ "$what" = all ]; then
    bench "serving AUTO, K 2048 / N 5632, eager and graph" --op ffn_infer --path auto \
        --M "$SERVE_M" --nnz 29 --dist uniform,skewed --mode both --reps 20 --warmup 3 \
        --check-rows 16
    bench "serving AUTO, 7B-class K 4096 / N 11008, eager and graph" --op ffn_infer --path auto \
        --K 4096 --N 11008 --M "$SERVE_M" --nnz 55 --dist uniform,skewed --mode both --reps 20 \
        --warmup 3 --check-rows 16
    bench "serving AUTO, non-gated" --op ffn_infer --gated 0 --path auto --M "$SERVE_M" --nnz 29 \
        --dist uniform,skewed --mode eager --reps 20 --warmup 3 --check-rows 16
fi
if [ "$what" = density ] || [ "$what" = all ]; then
    # 0.5, 1, 2, 5, 10, 20 % of N, rounded to the nearest whole neuron
    bench "AUTO over density, K 2048 / N 5632" --op ffn_infer --path auto --M "$DENSITY_M" \
        --nnz 29,56,113,282,563,1126 --dist uniform,skewed --mode eager --reps 10 --warmup 2 \
        --check-rows 8
    bench "AUTO over density, K 4096 / N 11008" --op ffn_infer --path auto --K 4096 --N 11008 \
        --M "$DENSITY_M" --nnz 55,110,220,550,1101,2202 --dist uniform,skewed --mode eager \
        --reps 10 --warmup 2 --check-rows 8
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
