#!/bin/sh
# shellcheck disable=SC2086 # the parameter lists are split into words on purpose
# render_sets_sm90.sh — parameter sets of gate_pack_sm90 and gemm_sm90 for render_compare.sh.
# Usage: render_sets_sm90.sh sets|cubin gate_pack_sm90|gemm_sm90
# gate_pack_sm90: the autotuner's space (runtime/ops/gate_pack/tiled/gate_pack_space.c: BK 32/64 x STAGES 2..8 x CLUSTER 1/2)
# plus CLUSTER 4 and the defaults, over T 64/128/256, C 2/4/8, both dtypes and shapes including
# ones the template rejects (K % 64, N % T, shared memory, bad BK / STAGES / CLUSTER / T / C).
# gemm_sm90: what runtime/ops/ffn/heavy/dense_gemm_sm90.c (gated / relu with T, C; plain with TB = 1) and
# runtime/ops/train/dense/cuda_train_dense.c (fwd, dt, mm with TA / TB and LDO, wgrad with STAGES 4) pass, over
# shapes and both dtypes, plus every rejection (MODE, TA, TB, LDO, STAGES, CLUSTER, K, N, T, C).
set -eu
what=$1 tpl=$2
tw_lists() { # every combination of the words of the lists, one per line, the last list fastest
    if [ $# = 1 ]; then
        for w in $1; do echo "$w"; done
        return
    fi
    first=$1
    shift
    for w in $first; do
        tw_lists "$@" | while read -r rest; do echo "$w $rest"; done
    done
}
if [ "$tpl" = gate_pack_sm90 ]; then
    if [ "$what" = cubin ]; then
        echo "--K 2048 --N 5632 --T 256 --C 8 --dtype bf16 --param BK=64 --param STAGES=3 --param CLUSTER=2"
        echo "--K 4096 --N 11008 --T 64 --C 4 --dtype fp16 --param BK=32 --param STAGES=4 --param CLUSTER=4"
        echo "--K 512 --N 2048 --T 64 --C 2 --dtype fp16 --param BK=32 --param STAGES=6 --param CLUSTER=1"
        echo "--K 1024 --N 4096 --T 128 --C 4 --dtype bf16"
        exit 0
    fi
    for shape in "64 256" "512 2048" "2048 5632" "4096 11008" "1024 65536" "192 1536" "100 256" \
        "2048 5600" "0 256"; do
        set -- $shape
        tw_lists "64 128 256" "2 4 8" "bf16 fp16" | while read -r T C dt; do
            echo "--K $1 --N $2 --T $T --C $C --dtype $dt"
            tw_lists "32 64" "2 3 4 5 6 7 8" "1 2 4" | while read -r bk st cl; do
                echo "--K $1 --N $2 --T $T --C $C --dtype $dt --param BK=$bk --param STAGES=$st --param CLUSTER=$cl"
            done
        done
    done
    for bad in "--param BK=16" "--param BK=128" "--param STAGES=1" "--param STAGES=9" \
        "--param STAGES=x" "--param CLUSTER=3" "--param CLUSTER=8" "--T 32" "--T 512" "--C 3" \
        "--C 16" "--dtype fp32" "--param BK=x"; do
        echo "--K 512 --N 2048 --T 256 --C 8 --dtype bf16 $bad"
    done
    echo "--N 2048 --T 256 --C 8"
    echo "--K 512 --T 256 --C 8"
    exit 0
fi
[ "$tpl" = gemm_sm90 ] || { echo "render_sets_sm90.sh: unknown template $tpl" >&2; exit 2; }
if [ "$what" = cubin ]; then
    echo "--K 2048 --N 5632 --T 256 --C 8 --dtype bf16 --param MODE=gated --param STAGES=3 --param CLUSTER=2"
    echo "--K 5632 --N 2048 --dtype fp16 --param MODE=plain --param TB=1 --param STAGES=3 --param CLUSTER=2"
    echo "--K 2048 --N 5632 --dtype bf16 --param MODE=fwd --param TA=0 --param TB=0 --param LDO=16896 --param STAGES=3 --param CLUSTER=2"
    echo "--K 5632 --N 2048 --dtype bf16 --param MODE=mm --param TA=0 --param TB=1 --param LDO=2048 --param STAGES=3 --param CLUSTER=2"
    echo "--K 512 --N 2048 --T 64 --C 2 --dtype fp16 --param MODE=gated --param STAGES=3 --param CLUSTER=1"
    echo "--K 2048 --N 5632 --T 128 --C 4 --dtype bf16 --param MODE=relu --param STAGES=3 --param CLUSTER=2"
    echo "--K 2048 --N 5632 --dtype fp16 --param MODE=dt --param TA=0 --param TB=0 --param LDO=16896 --param STAGES=3 --param CLUSTER=2"
    echo "--K 4096 --N 2048 --dtype bf16 --param MODE=mm --param TA=1 --param TB=0 --param STAGES=2 --param CLUSTER=1"
    echo "--K 64 --N 2048 --dtype fp16 --param MODE=wgrad --param TA=1 --param TB=1 --param LDO=2048 --param STAGES=4 --param CLUSTER=2"
    exit 0
fi
for shape in "64 256" "512 2048" "2048 5632" "5632 2048" "4096 11008" "11264 2048" "192 1536" \
    "1024 64" "100 256" "2048 5600" "0 256"; do
    set -- $shape
    K=$1 N=$2
    tw_lists "bf16 fp16" "3 2 4 8" "2 1" | while read -r dt st cl; do
        sc="--param STAGES=$st --param CLUSTER=$cl"
        tw_lists "64 128 256" "2 4 8" | while read -r T C; do
            echo "--K $K --N $N --T $T --C $C --dtype $dt --param MODE=gated $sc"
            echo "--K $K --N $N --T $T --C $C --dtype $dt --param MODE=relu $sc"
        done
        echo "--K $K --N $N --dtype $dt --param MODE=relu $sc"
        echo "--K $K --N $N --dtype $dt --param MODE=gated $sc"
        echo "--K $K --N $N --dtype $dt --param MODE=plain --param TB=1 $sc"
        echo "--K $K --N $N --dtype $dt $sc"
        tw_lists "fwd dt mm wgrad" "0 1" "0 1" "0 $N $((3 * N)) $((N + 4)) $((N - 8))" |
            while read -r mode ta tb ldo; do
                echo "--K $K --N $N --dtype $dt --param MODE=$mode --param TA=$ta --param TB=$tb --param LDO=$ldo $sc"
            done
    done
done
for bad in "--param MODE=x" "--param MODE=gated --param TA=1" "--param MODE=plain --param LDO=8" \
    "--param MODE=fwd --param TA=2" "--param MODE=fwd --param TB=x" "--param MODE=fwd --param LDO=-8" \
    "--param MODE=fwd --param LDO=x" "--param STAGES=1" "--param STAGES=9" "--param STAGES=x" \
    "--param CLUSTER=4" "--param CLUSTER=0" "--dtype fp32" "--param MODE=gated --T 32" \
    "--param MODE=gated --C 3" "--param MODE=gated --T 512" "--param MODE=dt --param PFB=8" \
    "--param MODE=dt --param PFB=32" "--param MODE=plain --param TB=0"; do
    echo "--K 512 --N 2048 --dtype bf16 $bad"
done
echo "--N 2048 --dtype bf16"
echo "--K 512 --dtype bf16"
echo "--K x --N 2048"
