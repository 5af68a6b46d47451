#!/bin/sh
# The benchmark set behind BENCHMARKS.md's issue tables (inference: issue 5; training: issue 7),
# run on the GPU machine after `scripts/device.sh` has built build-dev:
#   sh scripts/device.sh shell 'sh scripts/bench_issues.sh [infer|train|all]'
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
# the tables only (lines with a ratio), last
grep -E "^==|^op |^(ffn_infer|ffn_fused_only|train|train_fwd|train_bwd) |FAIL|exit" "$log" | tail -90
