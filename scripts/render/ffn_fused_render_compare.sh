#!/bin/sh
# ffn_fused_render_compare.sh — render_compare.sh for templates/ffn/ffn_fused.cu.lua and its modules
# with the parameter sets of render_sets_ffn_fused.sh (used for the split into modules, h/split2).
# Usage: [CUBIN=1] scripts/render/ffn_fused_render_compare.sh TWELL_BINARY [REV (default HEAD)] [OUTDIR]
d=$(dirname "$0")
exec sh "$d/render_compare.sh" ffn_fused "$d/render_sets_ffn_fused.sh" "$@"
