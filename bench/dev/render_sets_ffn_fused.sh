#!/bin/sh
# shellcheck disable=SC2086 # the parameter lists are split into words on purpose
# render_sets_ffn_fused.sh — parameter sets of ffn_fused for render_compare.sh (the sets the split
# of templates/ffn_fused.cu.lua into modules was checked with).
# Usage: render_sets_ffn_fused.sh sets|cubin [ffn_fused]
set -eu
if [ "$1" = cubin ]; then
    echo "--K 2048 --N 5632 --T 256 --C 4 --dtype bf16 --param gated=1 --param XV=127"
    echo "--K 512 --N 2048 --T 128 --C 8 --dtype fp16 --param gated=0 --param XV=0"
    exit 0
fi
tw_line() { # K N T C dtype gated CN STAGES GPWA GPWB NWA NWB PF IL GT XV DCAPA DCAPB ("-": not passed)
    l="--K $1 --N $2 --T $3 --C $4 --dtype $5 --param gated=$6"
    shift 6
    for k in CN STAGES GPWA GPWB NWA NWB PF IL GT XV DCAPA DCAPB; do
        [ "$1" = - ] || l="$l --param $k=$1"
        shift
    done
    echo "$l"
}

# Parameter sets: the runtime's (runtime/cuda_ffn_load.c: K N T C dtype gated and the tile words
# CN STAGES GPWA GPWB NWA NWB PF IL GT XV, DCAPA / DCAPB as tw_ffn_tile_derive sets them or the
# template's defaults; "-" = not passed) over shapes that reach every branch of the template,
# plus sets each check of the template rejects (K % 64, CN, GPW*, NW*, GT, IL, PF, STAGES, XV,
# gated, DCAP*, shared memory, chunk count).
cfgs="- - - - - - - - - - - -
512 2 8 4 16 16 1 0 8 75 - -
512 2 8 4 16 16 1 0 8 0 - -
512 2 8 4 16 16 1 0 8 11 - -
512 2 8 4 16 16 1 0 8 127 - -
512 2 8 4 16 16 1 0 8 64 - -
512 2 8 4 16 16 1 0 8 1 - -
256 3 8 4 16 16 1 0 8 75 - -
256 4 2 2 4 4 1 1 8 75 - -
768 2 4 4 8 8 0 0 8 11 - -
768 3 6 2 8 12 1 1 8 127 - -
1024 2 8 8 32 32 1 0 8 75 - -
256 2 8 8 16 16 1 0 16 75 - -
512 3 4 2 8 16 0 0 16 127 - -
256 4 2 4 4 4 1 0 16 0 - -
64 2 8 4 16 16 1 0 8 75 - -
512 2 8 4 16 16 1 0 8 75 16 16
512 2 8 4 16 16 1 0 8 75 1024 512
256 3 1 1 4 4 0 1 8 43 - -
512 2 3 4 16 16 1 0 16 75 - -
512 2 8 4 16 16 1 1 16 75 - -
512 5 8 4 16 16 1 0 8 75 - -
512 2 8 4 16 16 2 0 8 75 - -
512 2 8 4 16 16 1 2 8 75 - -
512 2 8 4 16 16 1 0 12 75 - -
512 2 8 4 16 16 1 0 8 128 - -
512 2 8 4 16 16 1 0 8 -1 - -
100 2 8 4 16 16 1 0 8 75 - -
2048 2 8 4 16 16 1 0 8 75 - -
512 2 9 4 16 16 1 0 8 75 - -
512 2 8 0 16 16 1 0 8 75 - -
512 2 8 4 5 16 1 0 8 75 - -
512 2 8 4 16 34 1 0 8 75 - -
512 2 8 4 16 16 1 0 8 75 8 16
512 2 8 4 16 16 1 0 8 75 16 24
1024 4 8 4 16 16 1 0 8 75 - -
768 4 8 4 16 16 1 0 8 75 - -
512 2 8 4 16 16 1 0 8 75 100000 -"
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

