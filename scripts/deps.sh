#!/bin/sh
# Installs the Debian packages the build needs (Lua 5.4 and cmocka headers), only when missing.
# On a machine without apt (the GPU device) point TWELL_DEPS_PREFIX at unpacked packages instead.
set -e
if [ -n "${TWELL_DEPS_PREFIX:-}" ]; then
    exit 0
fi
missing=""
[ -f /usr/include/lua5.4/lua.h ] || missing="$missing liblua5.4-dev"
[ -f /usr/include/cmocka.h ] || missing="$missing libcmocka-dev"
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
