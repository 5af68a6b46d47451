#!/bin/sh
# shellcheck disable=SC2086 # the parameter lists are split into words on purpose
# render_sets_ffn_fused.sh — parameter sets of ffn_fused for render_compare.sh (the sets the split
# of templates/ffn/ffn_fused.cu.lua into modules was checked with).
# Usage: render_sets_ffn_fused.sh sets|cubin [ffn_fused]
set -eu
if [ "$1" = cubin ]; then # the default configuration and the other branches: T, dtype, gated,
    # PADQ 16 (fp16 gated), DCW 64 (K % 128 != 0), PF 0, smaller warp shapes, CN = T = 64
    echo "--K 2048 --N 5632 --T 256 --C 4 --dtype bf16 --param gated=1"
    echo "--K 2048 --N 5632 --T 256 --C 8 --dtype fp16 --param gated=1"
    echo "--K 512 --N 2048 --T 128 --C 8 --dtype fp16 --param gated=0"
    echo "--K 192 --N 1536 --T 64 --C 2 --dtype bf16 --param gated=0"
    echo "--K 192 --N 1536 --T 64 --C 4 --dtype fp16 --param gated=1"
    echo "--K 4096 --N 11008 --T 256 --C 8 --dtype bf16 --param gated=1 --param CN=768 --param GPWA=4 --param GPWB=4 --param NWA=8 --param NWB=8 --param PF=0"
    echo "--K 1024 --N 4096 --T 128 --C 4 --dtype fp16 --param gated=1 --param CN=256 --param GPWA=2 --param GPWB=2 --param NWA=4 --param NWB=4"
    echo "--K 64 --N 256 --T 64 --C 2 --dtype bf16 --param gated=1 --param CN=64"
    echo "--K 2048 --N 5632 --T 128 --C 4 --dtype bf16 --param gated=0 --param CN=512 --param GPWA=8 --param GPWB=4 --param NWA=16 --param NWB=16 --param PF=1 --param DCAPA=1024 --param DCAPB=512"
    echo "--K 4096 --N 11008 --T 256 --C 2 --dtype fp16 --param gated=0 --param CN=768 --param GPWA=8 --param GPWB=8 --param NWA=32 --param NWB=32"
    exit 0
fi
tw_line() { # K N T C dtype gated CN GPWA GPWB NWA NWB PF DCAPA DCAPB ("-": not passed)
    l="--K $1 --N $2 --T $3 --C $4 --dtype $5 --param gated=$6"
    shift 6
    for k in CN GPWA GPWB NWA NWB PF DCAPA DCAPB; do
        [ "$1" = - ] || l="$l --param $k=$1"
        shift
    done
    echo "$l"
}

# Parameter sets: the runtime's (runtime/ops/ffn/tiled/ffn_config.c: K N T C dtype gated and the
# tile words CN GPWA GPWB NWA NWB PF, DCAPA / DCAPB as tw_ffn_cfg_words sets them or the
# template's defaults; "-" = not passed) over shapes that reach every branch of the template,
# plus sets each check of the template rejects (K % 64, CN, GPW*, NW*, PF, gated, DCAP*, shared
# memory, chunk count). The parameters GT, IL, STAGES and XV are gone (fixed at 8, 0, 2 and the
# variant 75 of before): a set that passes none of them renders the same kernels before and after.
cfgs="- - - - - - - -
512 8 4 16 16 1 - -
768 4 4 8 8 0 - -
768 6 2 8 12 1 - -
1024 8 8 32 32 1 - -
256 8 8 16 16 1 - -
512 4 2 8 16 0 - -
256 2 4 4 4 1 - -
256 2 2 4 4 1 - -
64 8 4 16 16 1 - -
512 8 4 16 16 1 16 16
512 8 4 16 16 1 1024 512
256 1 1 4 4 0 - -
512 3 4 16 16 1 - -
1024 8 4 16 16 1 - -
768 8 4 16 16 1 - -
512 8 4 16 16 2 - -
100 8 4 16 16 1 - -
2048 8 4 16 16 1 - -
512 9 4 16 16 1 - -
512 8 0 16 16 1 - -
512 8 4 5 16 1 - -
512 8 4 16 34 1 - -
512 8 4 16 16 1 8 16
512 8 4 16 16 1 16 24
512 8 4 16 16 1 100000 -"
for shape in "64 256 64" "64 5632 128" "512 256 256" "512 2048 128" "2048 5632 256" \
    "2048 5632 128" "2048 5632 64" "192 1536 64" "1024 4096 128" "4096 11008 256" \
    "512 65536 64" "96 512 128" "2064 768 64"; do
    for C in 2 4 8; do
        for dt in bf16 fp16; do
            for gated in 1 0 2; do
                [ $gated = 2 ] && [ "$C$dt" != 4bf16 ] && continue
                echo "$cfgs" | while read -r cfg; do
                    set -- $shape $C $dt $gated $cfg
                    tw_line "$@"
                done
            done
        done
    done
done

