#!/bin/sh
# train_ffn_render_compare.sh — used once, for the split of templates/train_ffn.cu.lua into
# modules (branch h/split): renders train_ffn from git revision REV and from the working tree for
# every parameter set below and compares them. Moving CUDA into a module changes the `#line`
# directives (file and line) and nothing else, so the check is: the sources with the `#line`
# lines removed are byte-identical, and so are the exit status and any error message. With
# CUBIN=1 it also compiles two sets (VEC 8 MMA at K 2048, VEC 1 fp16) both ways with NVRTC (no GPU
# needed) and compares the cubins after the cache entry's 64-byte header (which holds the key).
# Usage: [CUBIN=1] bench/dev/train_ffn_render_compare.sh TWELL_BINARY [REV (default HEAD)] [OUTDIR]
set -eu
twell=$(realpath "$1")
rev=${2:-HEAD}
out=${3:-/tmp/train_ffn_render_compare}
cd "$(dirname "$0")/../.."
rm -rf "$out" && mkdir -p "$out/rev/templates" "$out/before" "$out/after"
git archive "$rev" templates | tar -x -C "$out/rev"

# Parameter sets: the runtime's (runtime/cuda_train.c tw_ct_load: K N T C dtype VEC WPB and the
# staged kernels' SKC SST SWP SXF, 0 = default) over shapes that reach every branch of the
# template (MMA needs K % 32 == 0 and T % 64 == 0, KC 64/32/16 by K; T is 64, 128 or 256).
sets=$out/sets.txt
: >"$sets"
for shape in "64 256 64" "64 5632 128" "512 256 256" "2048 5632 256" "2048 5632 128" \
    "2048 5632 64" "1024 2048 128" "96 512 128" "48 256 256" "2064 768 64" "4096 11008 256"; do
    set -- $shape
    for C in 2 4 8; do
        for dt in bf16 fp16; do
            for vec in 8 1; do
                for wpb in 1 4 8; do
                    for stg in "0 0 0 0" "32 3 2 1" "128 4 8 0" "16 8 1 1" "0 0 0 1" "256 2 4 0"; do
                        echo "$1 $2 $3 $C $dt $vec $wpb $stg" >>"$sets"
                    done
                done
            done
        done
    done
done

render() { # dir-of-templates outdir
    i=0
    while read -r K N T C dt vec wpb skc sst swp sxf; do
        i=$((i + 1))
        f=$2/$(printf %04d $i)
        rc=0
        TWELL_TEMPLATE_DIR=$1 "$twell" render train_ffn --K "$K" --N "$N" --T "$T" --C "$C" \
            --dtype "$dt" --param VEC="$vec" --param WPB="$wpb" --param SKC="$skc" \
            --param SST="$sst" --param SWP="$swp" --param SXF="$sxf" >"$f.cu" 2>"$f.err" || rc=$?
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
echo "identical without #line (and same status/message): $ok / $n; byte-identical raw: $raw / $n"
[ "$ok" = "$n" ]
[ "${CUBIN:-0}" = 1 ] || exit 0
cub=0
for set in "2048 5632 256 8 bf16 8" "512 256 128 4 fp16 1"; do
    set -- $set
    for side in before after; do
        td=$out/rev/templates
        [ $side = after ] && td=$PWD/templates
        mkdir -p "$out/cubin-$side-$1"
        TWELL_CACHE_DIR=$out/cubin-$side-$1 TWELL_TEMPLATE_DIR=$td "$twell" compile train_ffn \
            --K "$1" --N "$2" --T "$3" --C "$4" --dtype "$5" --param VEC="$6" --param WPB=4 \
            --cold --arch sm_90a
    done
    if cmp -s -i 64 "$out/cubin-before-$1"/*.cubin "$out/cubin-after-$1"/*.cubin; then
        cub=$((cub + 1))
    else
        echo "DIFFERS: cubin of K=$1 VEC=$6"
    fi
done
echo "cubins identical: $cub / 2"
[ "$cub" = 2 ]
