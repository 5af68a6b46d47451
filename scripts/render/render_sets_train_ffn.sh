#!/bin/sh
# shellcheck disable=SC2086 # the parameter lists are split into words on purpose
# render_sets_train_ffn.sh — parameter sets of train_ffn for render_compare.sh (the sets the split
# of templates/train/train_ffn.cu.lua into modules was checked with).
# Usage: render_sets_train_ffn.sh sets|cubin [train_ffn]
set -eu
if [ "$1" = cubin ]; then # VEC 8 MMA at K 2048 (KC 64), KC 32 and 16 (no MMA), VEC 1 fp16
    echo "--K 2048 --N 5632 --T 256 --C 8 --dtype bf16 --param VEC=8 --param WPB=4"
    echo "--K 96 --N 512 --T 128 --C 8 --dtype fp16 --param VEC=8 --param WPB=4"
    echo "--K 48 --N 256 --T 256 --C 4 --dtype bf16 --param VEC=8 --param WPB=8"
    echo "--K 512 --N 256 --T 128 --C 4 --dtype fp16 --param VEC=1 --param WPB=4"
    exit 0
fi
# Parameter sets: the runtime's (runtime/ops/train/sparse/cuda_train.c tw_ct_load: K N T C dtype VEC
# WPB) over shapes that reach every branch of the template (MMA needs K % 32 == 0 and T % 64 ==
# 0, KC 64/32/16 by K; T is 64, 128 or 256). The staged kernels' parameters SKC SST SWP SXF are
# gone (fixed at their defaults: a set that passes none of them renders the same kernels before
# and after).
for shape in "64 256 64" "64 5632 128" "512 256 256" "2048 5632 256" "2048 5632 128" \
    "2048 5632 64" "1024 2048 128" "96 512 128" "48 256 256" "2064 768 64" "4096 11008 256"; do
    for C in 2 4 8; do
        for dt in bf16 fp16; do
            for vec in 8 1; do
                for wpb in 1 4 8; do
                    set -- $shape
                    echo "--K $1 --N $2 --T $3 --C $C --dtype $dt --param VEC=$vec --param WPB=$wpb"
                done
            done
        done
    done
done
