#!/bin/sh
# labels: unit slow
# Installs twellrt into a temporary prefix, then builds examples/hello_twell.c against the installed
# files twice (pkg-config, and CMake's find_package) and runs both, plus the installed tool.
# TWELL_SANITIZE_FLAGS (set by the sanitizer build) builds the example with the same flags: an
# instrumented libtwellrt needs the sanitizer runtime linked into the program that loads it.
set -eu
src=${TWELL_SOURCE_DIR:?}
bin=${TWELL_BINARY_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
cmake --install "$bin" --prefix "$prefix" >"$tmp/install.log"
test -f "$prefix/include/twellrt.h"
pc=$(find "$prefix" -name twellrt.pc | head -n 1)
test -n "$pc"
libdir=$(dirname "$(dirname "$pc")")
# The shared library is installed under its soname, libtwellrt.so.TWELL_ABI_VERSION (twellrt.h).
abi=$(sed -n 's/^#define TWELL_ABI_VERSION \([0-9][0-9]*\)$/\1/p' "$src/runtime/twellrt.h")
test -n "$abi"
test -f "$libdir/libtwellrt.so.$abi"
if command -v readelf >/dev/null 2>&1; then
    readelf -d "$libdir/libtwellrt.so.$abi" | grep -q "Library soname: \[libtwellrt.so.$abi\]"
fi
san=${TWELL_SANITIZE_FLAGS:-}
export PKG_CONFIG_PATH="$(dirname "$pc")"
if command -v pkg-config >/dev/null 2>&1; then
    cc -std=c11 -Wall -Wextra -Werror $san $(pkg-config --cflags twellrt) \
        "$src/examples/hello_twell.c" -o "$tmp/hello_pc" $(pkg-config --libs twellrt) \
        -Wl,-rpath,"$libdir"
    "$tmp/hello_pc"
else
    echo "install test: pkg-config not installed here, pkg-config build skipped"
fi
set --
[ -n "${TWELL_DEPS_PREFIX:-}" ] &&
    set -- "$@" "-DCMAKE_LIBRARY_PATH=$TWELL_DEPS_PREFIX/usr/lib/x86_64-linux-gnu"
[ -n "$san" ] && set -- "$@" "-DCMAKE_C_FLAGS=$san" "-DCMAKE_EXE_LINKER_FLAGS=$san"
cmake -S "$src/examples" -B "$tmp/ex" -DCMAKE_PREFIX_PATH="$prefix" "$@" >"$tmp/ex.log"
cmake --build "$tmp/ex" >>"$tmp/ex.log"
"$tmp/ex/hello_twell"
"$prefix/bin/twell" --version
# The installed tool finds the installed templates (no source tree override).
if [ -d "$prefix/share/twellrt/templates" ] && ls "$prefix/share/twellrt/templates"/*.cu.lua >/dev/null 2>&1; then
    t=$(basename "$(ls "$prefix/share/twellrt/templates"/*.cu.lua | head -n 1)" .cu.lua)
    env -u TWELL_TEMPLATE_DIR "$prefix/bin/twell" render "$t" --K 128 --N 256 >"$tmp/render.cu"
    grep -q "#line" "$tmp/render.cu"
fi
echo "install test: OK"
