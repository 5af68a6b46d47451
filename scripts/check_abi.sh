#!/bin/sh
# The ABI check (README "ABI"): builds libtwellrt with debug info, describes its exported ABI with
# libabigail's abidw and compares it with the baseline abi/libtwellrt.abi using abidiff.
#   scripts/check_abi.sh           check; exit 1 on an incompatible change under the same soname
#   scripts/check_abi.sh --update  rewrite the baseline from this tree (commit abi/ with it)
# Compatible: functions added, enumerators added, fields appended to the sized structs
# (scripts/abi_prefix.py cuts those off before the comparison; libabigail 2.2's own suppression
# for appended members also hides every other change of a struct that grew). Anything else (a
# function removed or its type changed, a struct field inserted, retyped or removed, an
# enumerator renumbered) fails unless TWELL_ABI_VERSION in runtime/twellrt.h, hence the soname,
# changed; after such a bump, or to record added functions, run --update and commit abi/.
# TWELL_ABI_BUILD names the build folder (default build-abi). Installs abigail-tools with
# apt-get when abidw or abidiff is missing.
set -e
cd "$(dirname "$0")/.."
root=$(pwd)
mode=check
case "${1:-}" in
"") ;;
--update) mode=update ;;
*)
    echo "usage: scripts/check_abi.sh [--update]" >&2
    exit 2
    ;;
esac
baseline=abi/libtwellrt.abi
build=${TWELL_ABI_BUILD:-build-abi}

if ! command -v abidw >/dev/null 2>&1 || ! command -v abidiff >/dev/null 2>&1; then
    echo "check_abi: installing abigail-tools"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q abigail-tools
fi

# Debug info is what abidw reads types from; the prefix map makes the paths it records relative
# (./runtime/twellrt.h), so the baseline does not depend on where the tree is checked out.
sh scripts/deps.sh
mkdir -p "$build"
log="$build/check_abi.log"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTWELL_BUILD_TESTS=OFF \
    "-DCMAKE_C_FLAGS=-fdebug-prefix-map=$root=." >"$log" 2>&1 || {
    cat "$log"
    exit 1
}
cmake --build "$build" --target twellrt -j "${JOBS:-2}" >>"$log" 2>&1 || {
    cat "$log"
    exit 1
}
abi=$(sed -n 's/^#define TWELL_ABI_VERSION \([0-9][0-9]*\)$/\1/p' runtime/twellrt.h)
lib="$build/libtwellrt.so.$abi"
test -f "$lib" || {
    echo "check_abi: $lib not built (TWELL_ABI_VERSION $abi)" >&2
    exit 1
}

# Only what twellrt.h declares: the handles stay opaque (their internals are not ABI), and no
# location, path or architecture line that would differ between machines.
current="$build/libtwellrt.abi"
abidw --header-file ./runtime/twellrt.h --drop-private-types --drop-undefined-syms \
    --exported-interfaces-only --no-show-locs --no-corpus-path --no-comp-dir-path \
    --no-architecture --type-id-style hash --out-file "$current" "$lib"
# A header path abidw did not match would turn every type private: the comparison would then see
# symbols only, so make sure the option structs' layouts are there.
for t in twell_ctx_options twell_shape; do
    grep -q "<class-decl name='$t' size-in-bits=" "$current" || {
        echo "check_abi: $current has no layout for $t (header not matched?)" >&2
        exit 1
    }
done

if [ "$mode" = update ]; then
    mkdir -p abi
    cp "$current" "$baseline"
    echo "check_abi: baseline $baseline written ($(sed -n "s/.*soname='\([^']*\)'.*/\1/p" "$baseline" | head -n 1))"
    exit 0
fi

test -f "$baseline" || {
    echo "check_abi: no baseline $baseline: run scripts/check_abi.sh --update" >&2
    exit 1
}
old_soname=$(sed -n "s/^<abi-corpus .*soname='\([^']*\)'.*/\1/p" "$baseline")
new_soname=$(sed -n "s/^<abi-corpus .*soname='\([^']*\)'.*/\1/p" "$current")
report="$build/abidiff.txt"
python3 scripts/abi_prefix.py "$baseline" "$current" "$build/libtwellrt.prefix.abi"
rc=0
abidiff --no-unreferenced-symbols "$baseline" "$build/libtwellrt.prefix.abi" >"$report" 2>&1 ||
    rc=$?
# abidiff's exit status is a bit field: 1 error, 2 usage error, 4 ABI change, 8 incompatible.
if [ $((rc & 3)) -ne 0 ]; then
    cat "$report"
    echo "check_abi: abidiff failed (status $rc)" >&2
    exit 1
fi
# Counts of removed and changed functions, variables and symbols (added ones are compatible).
broken=$(grep -E "summary:" "$report" | grep -oE "[0-9]+ (Removed|Changed)" | awk '{s += $1} END {print s + 0}')
added=$(grep -E "summary:" "$report" | grep -oE "[0-9]+ Added" | awk '{s += $1} END {print s + 0}')
if [ "$broken" -eq 0 ] && [ $((rc & 8)) -eq 0 ]; then
    if [ "$added" -gt 0 ]; then
        sed -n '/Added/,$p' "$report"
        echo "check_abi: OK, $new_soname compatible with the baseline; $added interface(s) added:" \
            "record them with scripts/check_abi.sh --update"
    else
        echo "check_abi: OK, $new_soname matches the baseline $baseline"
    fi
    exit 0
fi
cat "$report"
if [ "$old_soname" != "$new_soname" ]; then
    echo "check_abi: OK, incompatible changes with the soname bumped ($old_soname -> $new_soname):" \
        "refresh the baseline with scripts/check_abi.sh --update and commit abi/"
    exit 0
fi
echo "check_abi: FAILED: incompatible ABI change under the same soname $new_soname (above)." >&2
echo "  Restore compatibility, or raise TWELL_ABI_VERSION in runtime/twellrt.h (the soname) and" \
    "run scripts/check_abi.sh --update." >&2
exit 1
