#!/bin/sh
# test_shipped_symbols.sh — the shipped libraries carry no test probe (runtime/core/probe.h):
#   sh tests/test_shipped_symbols.sh NM AR libtwellrt.so libtwellrt.a libtwellrt_probe.a
# In the shared and the installed static library, no symbol names a test-control handler (only
# the stub tw_test_control, which answers TWELL_ERR_UNSUPPORTED), no global symbol contains
# "_probe" (a static function may: tw_ffn_probe sizes the sparse workspace), no symbol, global or
# local, bears the name of a global the test library's *_probe.c objects define, and the static
# library has no *_probe.c object at all. The test library must have such objects (else the
# check is empty). Unoptimised builds included: nothing relies on inlining.
set -u
nm=$1
ar=$2
shared=$3
static=$4
probe=$5
fail=0
probe_syms=$("$nm" -A -g --defined-only "$probe" | grep '_probe\.c\.o:' | awk '{print $NF}' | sort -u)
if [ -z "$probe_syms" ]; then
    echo "test_shipped_symbols: $probe defines no symbol in a *_probe.c object"
    exit 1
fi
for lib in "$shared" "$static"; do
    all=$("$nm" "$lib" 2>/dev/null | awk 'NF >= 2 {print $NF}' | sort -u)
    glob=$("$nm" -g --defined-only "$lib" 2>/dev/null | awk 'NF >= 2 {print $NF}' | sort -u)
    bad=$( (printf '%s\n' "$all" | grep -e 'test_control'; printf '%s\n' "$glob" | grep -e '_probe') |
        grep -v -x -e 'tw_test_control' | sort -u)
    if [ -n "$bad" ]; then
        echo "test_shipped_symbols: $lib has probe symbols:"
        printf '  %s\n' $bad
        fail=1
    fi
    for s in $probe_syms; do
        if printf '%s\n' "$all" | grep -q -x -e "$s"; then
            echo "test_shipped_symbols: $lib defines $s (a *_probe.c symbol)"
            fail=1
        fi
    done
done
members=$("$ar" t "$static" | grep '_probe\.c\.o$')
if [ -n "$members" ]; then
    echo "test_shipped_symbols: $static holds probe objects: $members"
    fail=1
fi
[ $fail -eq 0 ] && echo "test_shipped_symbols: no probe in $shared or $static"
exit $fail
