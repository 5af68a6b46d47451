#!/bin/sh
# Nsight Compute profiles of twellrt's kernels inside a `twell bench` run, on the GPU machine
# after `scripts/device.sh` has built build-dev:
#   sh scripts/device.sh shell 'sh scripts/profile.sh breakdown [bench args]'
#   sh scripts/device.sh shell 'sh scripts/profile.sh stalls KERNEL_REGEX [bench args]'
#   breakdown  per-kernel durations of every twell_* kernel the run launches (ncu flushes the
#              caches before each kernel: the numbers are cold-L2 per-kernel times)
#   stalls     for the kernels matching KERNEL_REGEX (e.g. 'twell_ffn_phase_(a|b)'): duration,
#              SM / L1 / L2 / tensor-pipe utilisation, issue activity, shared-memory wavefronts and
#              bank conflicts, and the warp stall reasons (per issued instruction); the first
#              NCU_COUNT (2) launches after NCU_SKIP (0) matching ones (a training bench's first
#              launches are its warm-up and check steps: skip them to reach the timed shape)
# Default bench args: --op ffn_infer --path sparse --M 16384 --nnz 29 --dist uniform.
# Logs go to $OUT (ncu_<what>.log); a short table is printed last. Needs `ncu` on PATH.
set -u
OUT=${OUT:-/tmp/twell-out}
B=${B:-build-dev}
what=${1:-breakdown}
[ $# -gt 0 ] && shift
mkdir -p "$OUT"
command -v ncu >/dev/null 2>&1 || { echo "profile: ncu not found"; exit 3; }
regex='twell_'
if [ "$what" = stalls ]; then
    [ $# -gt 0 ] || { echo "profile: stalls needs a kernel regex"; exit 2; }
    regex=$1
    shift
fi
args=${*:---op ffn_infer --path sparse --M 16384 --nnz 29 --dist uniform}
# small repetition counts: ncu replays each kernel many times
run="$B/twell bench $args --reps 3 --warmup 1 --check-rows 8 --out /tmp/twell-ncu-json"
log="$OUT/ncu_$what.log"
case $what in
breakdown)
    timeout ${NCU_TIMEOUT:-300} ncu --clock-control none -k "regex:$regex" \
        --metrics gpu__time_duration.sum --print-summary per-kernel $run >"$log" 2>&1
    echo "rc=$? per-kernel duration (ncu summary: name, invocations, then min/max/avg us)"
    awk '/^ *twell_/{k=$1} /gpu__time_duration.sum/{printf "%-34s %s %s %s %s\n", k, $2, $3, $4, $5}' \
        "$log"
    ;;
stalls)
    M="gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed"
    M="$M,l1tex__throughput.avg.pct_of_peak_sustained_active"
    M="$M,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
    M="$M,lts__t_bytes.sum,dram__bytes_read.sum,sm__inst_executed.sum"
    M="$M,smsp__issue_active.avg.pct_of_peak_sustained_active"
    M="$M,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
    M="$M,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
    M="$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
    M="$M,smsp__warps_active.avg.per_cycle_active,launch__registers_per_thread"
    for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait \
        not_selected selected lg_throttle dispatch_stall no_instruction branch_resolving membar \
        drain imc_miss tex_throttle sleeping misc; do
        M="$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
    done
    timeout ${NCU_TIMEOUT:-300} ncu --clock-control none -k "regex:$regex" -s ${NCU_SKIP:-0} -c ${NCU_COUNT:-2} \
        --metrics "$M" $run >"$log" 2>&1
    echo "rc=$? kernels matching '$regex' (${NCU_COUNT:-2} launches after ${NCU_SKIP:-0})"
    grep -E "^ *twell_|gpu__|sm__|l1tex__|lts__|dram__|smsp__|launch__" "$log" |
        sed -e 's/smsp__average_warps_issue_stalled_/stall_/' -e 's/_per_issue_active.ratio//' |
        awk '/^ *twell_/{print $1; next} {printf "  %-58s %s %s\n", $1, $(NF-1), $NF}'
    ;;
*)
    echo "profile: unknown command $what (breakdown | stalls)"
    exit 2
    ;;
esac
