#!/bin/sh
# ffn_fused_render_compare.sh — used once, for the split of templates/ffn_fused.cu.lua into
# modules (branch h/split2; the sibling of train_ffn_render_compare.sh): renders ffn_fused from
# git revision REV and from the working tree for every parameter set below and compares them.
# Moving CUDA into a module changes the `#line` directives (file and line) and nothing else, so
# the check is: the sources with the `#line` lines removed are byte-identical, and so are the exit
# status and any error message (which names the template line: the parameter checks keep their
# lines). With CUBIN=1 it also compiles two sets both ways with NVRTC for sm_90a (no GPU needed)
# and compares the cubins after the cache entry's 64-byte header (which holds the key).
# Usage: [CUBIN=1] bench/dev/ffn_fused_render_compare.sh TWELL_BINARY [REV (default HEAD)] [OUTDIR]
set -eu
twell=$(realpath "$1")
rev=${2:-HEAD}
out=${3:-/tmp/ffn_fused_render_compare}
cd "$(dirname "$0")/../.."
rm -rf "$out" && mkdir -p "$out/rev/templates" "$out/before" "$out/after"
git archive "$rev" templates | tar -x -C "$out/rev"

# Parameter sets: the runtime's (runtime/cuda_ffn_load.c: K N T C dtype gated and the tile words
# CN STAGES GPWA GPWB NWA NWB PF IL GT XV, DCAPA / DCAPB as tw_ffn_tile_derive sets them or the
# template's defaults; "-" = not passed) over shapes that reach every branch of the template,
# plus sets each check of the template rejects (K % 64, CN, GPW*, NW*, GT, IL, PF, STAGES, XV,
# gated, DCAP*, shared memory, chunk count).
sets=$out/sets.txt
: >"$sets"
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
                    echo "$shape $C $dt $gated $cfg" >>"$sets"
                done
            done
        done
    done
done

render() { # dir-of-templates outdir
    td=$1 od=$2 i=0
    while read -r K N T C dt gated cn st gpwa gpwb nwa nwb pf il gt xv dcapa dcapb; do
        i=$((i + 1))
        f=$od/$(printf %05d $i)
        set -- --K "$K" --N "$N" --T "$T" --C "$C" --dtype "$dt" --param gated="$gated"
        for kv in CN=$cn STAGES=$st GPWA=$gpwa GPWB=$gpwb NWA=$nwa NWB=$nwb PF=$pf IL=$il \
            GT=$gt XV=$xv DCAPA=$dcapa DCAPB=$dcapb; do
            [ "${kv#*=}" = - ] || set -- "$@" --param "$kv"
        done
        rc=0
        TWELL_TEMPLATE_DIR=$td "$twell" render ffn_fused "$@" >"$f.cu" 2>"$f.err" || rc=$?
        echo "$rc" >"$f.rc"
        grep -v '^#line ' "$f.cu" >"$f.nl" || true
    done <"$sets"
}
render "$out/rev/templates" "$out/before"
render "$PWD/templates" "$out/after"

n=0 ok=0 raw=0 rendered=0
for f in "$out"/before/*.rc; do
    b=${f%.rc}
    a=$out/after/$(basename "$b")
    n=$((n + 1))
    [ "$(cat "$f")" = 0 ] && rendered=$((rendered + 1))
    cmp -s "$b.cu" "$a.cu" && raw=$((raw + 1))
    if cmp -s "$b.nl" "$a.nl" && cmp -s "$b.rc" "$a.rc" && cmp -s "$b.err" "$a.err"; then
        ok=$((ok + 1))
    else
        echo "DIFFERS: set $(basename "$b"): $(sed -n "$(basename "$b" | sed 's/^0*//')p" "$sets")"
    fi
done
echo "parameter sets: $n (rendered: $rendered, rejected by the template: $((n - rendered)))"
echo "distinct rejection messages: $(cat "$out"/before/*.err | sort -u | wc -l)"
echo "identical without #line (and same status/message): $ok / $n; byte-identical raw: $raw / $n"
[ "$ok" = "$n" ]
[ "${CUBIN:-0}" = 1 ] || exit 0
cub=0
for set in "2048 5632 256 4 bf16 1 127" "512 2048 128 8 fp16 0 0"; do
    set -- $set
    for side in before after; do
        td=$out/rev/templates
        [ $side = after ] && td=$PWD/templates
        mkdir -p "$out/cubin-$side-$1"
        TWELL_CACHE_DIR=$out/cubin-$side-$1 TWELL_TEMPLATE_DIR=$td "$twell" compile ffn_fused \
            --K "$1" --N "$2" --T "$3" --C "$4" --dtype "$5" --param gated="$6" --param XV="$7" \
            --cold --arch sm_90a
    done
    if cmp -s -i 64 "$out/cubin-before-$1"/*.cubin "$out/cubin-after-$1"/*.cubin; then
        cub=$((cub + 1))
    else
        echo "DIFFERS: cubin of K=$1 $5 gated=$6 XV=$7"
    fi
done
echo "cubins identical: $cub / 2"
[ "$cub" = 2 ]
