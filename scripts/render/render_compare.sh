#!/bin/sh
# render_compare.sh — checks that a change to a template (moving CUDA into a module, sharing a
# helper) changes no generated kernel: renders TEMPLATE from git revision REV and from the working
# tree for every parameter set that GENERATOR prints and compares them. Moving CUDA between files
# changes the `#line` directives (file and line) and nothing else, so the check is: the sources
# with the `#line` lines removed are byte-identical, and so are the exit status and any error
# message (which names the template line: the parameter checks keep their lines). With CUBIN=1 it
# also compiles the sets `sh GENERATOR cubin TEMPLATE` prints both ways with NVRTC for sm_90a (no
# GPU needed) and compares the cubins after the cache entry's 64-byte header (which holds the key).
# With DIFF=1 (a change meant to alter the source but not the code: deleting dead variants,
# folding constant conditions) a set whose source differs passes when its exit status agrees and
# its error message agrees apart from the template line number; its diff (without #line) is kept
# under OUTDIR/diff, and the diffs that differ only in numbers are grouped (one sample per group
# under OUTDIR/diff-groups, to read). CUBIN=1 then shows the code is the same.
# GENERATOR (a sh script, run from the repository root) as `sh GENERATOR sets TEMPLATE` prints one
# parameter set per line: the arguments of `twell render TEMPLATE` (no spaces or wildcards inside
# an argument).
# Usage: [CUBIN=1] [DIFF=1] scripts/render/render_compare.sh TEMPLATE GENERATOR TWELL_BINARY [REV (default HEAD)]
#        [OUTDIR (default /tmp/<TEMPLATE>_render_compare)]
# Generators: render_sets_ffn_fused.sh, render_sets_train_ffn.sh, render_sets_sm90.sh (one
# generator for gate_pack_sm90 and gemm_sm90: it takes the template name as its second argument).
set -eu
tpl=$1
gen=$(realpath "$2")
twell=$(realpath "$3")
rev=${4:-HEAD}
out=${5:-/tmp/${tpl}_render_compare}
cd "$(dirname "$0")/../.."
rm -rf "$out" && mkdir -p "$out/rev/templates" "$out/before" "$out/after" "$out/diff" \
    "$out/diff-groups"
git archive "$rev" templates | tar -x -C "$out/rev"
sets=$out/sets.txt
sh "$gen" sets "$tpl" >"$sets"

ungroup='s#templates/\(common\|gate_pack\|ffn\|train\|gemm\)/#templates/#g'
render() { # dir-of-templates outdir
    i=0
    while read -r line; do
        i=$((i + 1))
        f=$2/$(printf %05d $i)
        rc=0
        # shellcheck disable=SC2086 # one argument per word
        TWELL_TEMPLATE_DIR=$1 "$twell" render "$tpl" $line >"$f.cu" 2>"$f.err" || rc=$?
        echo "$rc" >"$f.rc"
        # the template groups (templates/<op>/) are layout, not kernel content: names compare
        # without them, so a revision from before the grouping compares with one after it
        grep -v '^#line ' "$f.cu" | sed "$ungroup" >"$f.nl" || true
        sed "$ungroup" "$f.err" >"$f.err2" && mv "$f.err2" "$f.err"
    done <"$sets"
}
render "$out/rev/templates" "$out/before"
render "$PWD/templates" "$out/after"

tw_noline() { sed -E 's/\.lua:[0-9]+:/.lua:N:/' "$1"; } # an error message without its line
n=0 ok=0 raw=0 rendered=0 changed=0
for f in "$out"/before/*.rc; do
    b=${f%.rc}
    a=$out/after/$(basename "$b")
    n=$((n + 1))
    [ "$(cat "$f")" = 0 ] && rendered=$((rendered + 1))
    cmp -s "$b.cu" "$a.cu" && raw=$((raw + 1))
    if cmp -s "$b.nl" "$a.nl" && cmp -s "$b.rc" "$a.rc" && cmp -s "$b.err" "$a.err"; then
        ok=$((ok + 1))
    elif [ "${DIFF:-0}" = 1 ] && cmp -s "$b.rc" "$a.rc" &&
        [ "$(tw_noline "$b.err")" = "$(tw_noline "$a.err")" ]; then
        changed=$((changed + 1))
        d=$out/diff/$(basename "$b").diff
        diff "$b.nl" "$a.nl" >"$d" || true
        g=$(sed 's/[0-9][0-9]*/#/g' "$d" | cksum | cut -d' ' -f1)
        [ -f "$out/diff-groups/$g.diff" ] || cp "$d" "$out/diff-groups/$g.diff"
    else
        echo "DIFFERS: set $(basename "$b"): $(sed -n "$(basename "$b" | sed 's/^0*//')p" "$sets")"
    fi
done
echo "$tpl: parameter sets: $n (rendered: $rendered, rejected by the template: $((n - rendered)))"
echo "distinct rejection messages: $(cat "$out"/before/*.err | sort -u | wc -l)"
echo "identical without #line (and same status/message): $ok / $n; byte-identical raw: $raw / $n"
if [ "${DIFF:-0}" = 1 ]; then
    echo "source changed, same status and message: $changed / $n; distinct diffs (numbers" \
        "masked): $(find "$out/diff-groups" -name '*.diff' | wc -l) (samples in $out/diff-groups)"
    [ $((ok + changed)) = "$n" ]
else
    [ "$ok" = "$n" ]
fi
[ "${CUBIN:-0}" = 1 ] || exit 0
cub=0 nc=0
sh "$gen" cubin "$tpl" >"$out/cubin-sets.txt"
while read -r line; do
    nc=$((nc + 1))
    for side in before after; do
        td=$out/rev/templates
        [ $side = after ] && td=$PWD/templates
        mkdir -p "$out/cubin-$side-$nc"
        # shellcheck disable=SC2086 # one argument per word
        TWELL_CACHE_DIR=$out/cubin-$side-$nc TWELL_TEMPLATE_DIR=$td "$twell" compile "$tpl" \
            $line --cold --arch sm_90a
    done
    if cmp -s -i 64 "$out/cubin-before-$nc"/*.cubin "$out/cubin-after-$nc"/*.cubin; then
        cub=$((cub + 1))
    else
        echo "DIFFERS: cubin of $line"
    fi
done <"$out/cubin-sets.txt"
echo "cubins identical: $cub / $nc"
[ "$cub" = "$nc" ]
