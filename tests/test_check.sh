#!/bin/sh
# test_check.sh — one of the tree's checks as a ctest:
#   sh tests/test_check.sh NAME SCRIPT [ARG ...]
# runs `python3 SCRIPT ARG ...` (NAME names the test in messages; CMakeLists.txt says what each
# check enforces). Tools the check needs besides python3 are listed in $TWELL_NEED (e.g. nm for
# scripts/check_calls.py). Skips (77) where one is missing, except in CI, where a missing check
# is a failure.
name=$1
script=$2
shift 2
for tool in python3 ${TWELL_NEED:-}; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        if [ -n "${CI:-}" ]; then
            echo "$name: $tool not found (needed in CI)"
            exit 1
        fi
        echo "$name: $tool not found, skipped"
        exit 77
    fi
done
exec python3 "$script" "$@"
