#!/bin/sh
# train_ffn_render_compare.sh — render_compare.sh for templates/train/train_ffn.cu.lua and its modules
# with the parameter sets of render_sets_train_ffn.sh (used for the split into modules, h/split).
# Usage: [CUBIN=1] scripts/render/train_ffn_render_compare.sh TWELL_BINARY [REV (default HEAD)] [OUTDIR]
d=$(dirname "$0")
exec sh "$d/render_compare.sh" train_ffn "$d/render_sets_train_ffn.sh" "$@"
