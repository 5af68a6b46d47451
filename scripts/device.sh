#!/bin/sh
# Builds and runs twellrt on the lent GPU machine (Ubuntu, CUDA, no apt, no network).
# Carry .deps/ (made here by `sh scripts/device.sh fetch`) with the call; then on the device:
#   sh scripts/device.sh test            # build + all tests (gpu ones included), logs to $OUT
#   sh scripts/device.sh sanitize        # compute-sanitizer memcheck/racecheck on the gpu tests
#   sh scripts/device.sh bench [args]    # `twell bench` with args, JSON into $OUT
#   sh scripts/device.sh shell 'cmd'     # set up, then run cmd
set -eu
cmd=${1:-test}
[ $# -gt 0 ] && shift
if [ "$cmd" = fetch ]; then # on the development machine: download the packages to carry
    mkdir -p .deps && cd .deps && apt-get download liblua5.4-0 liblua5.4-dev libcmocka0 libcmocka-dev
    exit 0
fi
OUT=${OUT:-/tmp/twell-out}
mkdir -p "$OUT" /opt/deps
for f in .deps/*.deb; do dpkg -x "$f" /opt/deps; done
export TWELL_DEPS_PREFIX=/opt/deps
export LD_LIBRARY_PATH="/opt/deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="/usr/local/cuda/bin:$PATH"
B=build-dev
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DTWELL_DEPS_PREFIX=/opt/deps >"$OUT/cmake.log" 2>&1 ||
    { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build $B -j 16 >"$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
case "$cmd" in
test)
    (cd $B && ctest --output-on-failure -j 4 "$@") >"$OUT/ctest.log" 2>&1 || true
    grep -E "tests passed|Passed|Failed|\*\*\*|Skipped|Not Run" "$OUT/ctest.log" | tail -60
    ;;
sanitize)
    for t in $B/test_gpu_*; do
        [ -x "$t" ] || continue
        for tool in memcheck racecheck; do
            compute-sanitizer --tool $tool --error-exitcode 9 "$t" "$@" >"$OUT/san_$(basename $t)_$tool.log" 2>&1 &&
                echo "$tool $(basename $t): clean" || echo "$tool $(basename $t): FAILED (rc $?)"
        done
    done
    ;;
bench)
    $B/twell bench --out "$OUT" "$@"
    ;;
shell)
    sh -c "$*"
    ;;
*)
    echo "unknown command $cmd"; exit 2 ;;
esac
