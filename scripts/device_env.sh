# device_env.sh — sourced (`. scripts/device_env.sh`) by the scripts that build on the lent GPU
# machine (scripts/device.sh, device commands): unpacks the carried Lua and cmocka packages
# from .deps/ into /opt/deps and points the compiler, linker and PATH at them and at CUDA.
mkdir -p /opt/deps
for f in .deps/*.deb; do dpkg -x "$f" /opt/deps; done
export TWELL_DEPS_PREFIX=/opt/deps
# luaconf.h includes "lua5.4-deb-multiarch.h", which Debian keeps in the multiarch include dir
export CPATH="/opt/deps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
export LD_LIBRARY_PATH="/opt/deps/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="/usr/local/cuda/bin:$PATH"
# pytest for the package's tests (test_python, test_python_gpu), from the wheels carried in
# .deps/py (`sh scripts/device.sh fetch`): the image's Python has torch but not pytest
if [ -d .deps/py ] && ! python3 -c 'import pytest' 2>/dev/null; then
    python3 -m pip install -q --no-index --find-links .deps/py --break-system-packages pytest \
        >/dev/null 2>&1 || python3 -m pip install -q --no-index --find-links .deps/py --user pytest \
        >/dev/null 2>&1 || true
fi
if python3 -c 'import torch, pytest' 2>/dev/null; then
    TWELL_PYTHON_ARG="-DTWELL_PYTHON=$(command -v python3)"
else
    TWELL_PYTHON_ARG=""
fi
export TWELL_PYTHON_ARG
# The commit the records name: the copy of the tree on the device may carry a stale .git (its
# HEAD was seen to stay at the first call's commit), so `sh scripts/device.sh fetch` and
# `sh scripts/device.sh stamp` write the development machine's `git describe` into
# .deps/commit, carried with .deps; twell bench and the Python benchmarks read TWELL_COMMIT.
if [ -z "${TWELL_COMMIT:-}" ] && [ -s .deps/commit ]; then
    TWELL_COMMIT=$(cat .deps/commit)
    export TWELL_COMMIT
fi
