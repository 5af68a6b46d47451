#!/bin/sh
# test_calls.sh — the dependency rule for calls as a ctest: scripts/check_calls.py reads the
# built library's object files (nm) and fails on a reference from one folder to a symbol of a
# folder it must not depend on (docs/ARCHITECTURE.md), or on a stale scripts/calls_allow.txt
# entry. Needs the build's objects (ctest runs after the build). Skips (77) where python3 or nm
# is missing, except in CI, where a missing check is a failure.
root=${TWELL_SOURCE_DIR:-$(dirname "$0")/..}
build=${TWELL_BINARY_DIR:-$root/build}
nm=${TWELL_NM:-nm}
for tool in python3 "$nm"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        if [ -n "${CI:-}" ]; then
            echo "test_calls: $tool not found (needed in CI)"
            exit 1
        fi
        echo "test_calls: $tool not found, skipped"
        exit 77
    fi
done
exec python3 "$root/scripts/check_calls.py" "$build" --nm "$nm"
