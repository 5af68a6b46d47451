#!/bin/sh
# Creates the project's Python environment ($1, default .venv) when missing and installs
# python/requirements-dev.txt into it from PyPI (torch ~4 GB the first time; pip's cache makes
# later installs, e.g. CI in a fresh clone, a copy). A stamp skips pip when nothing changed.
set -e
VENV=${1:-${VENV:-.venv}}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PY" -m venv "$VENV" 2>/dev/null; then # Debian's python3 needs python3-venv
        rm -rf "$VENV"
        SUDO=""
        [ "$(id -u)" = 0 ] || SUDO=sudo
        $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-venv
        "$PY" -m venv "$VENV"
    fi
fi
stamp="$VENV/.twell-requirements"
if [ -f "$stamp" ] && cmp -s python/requirements-dev.txt "$stamp"; then
    exit 0
fi
echo "venv: installing python/requirements-dev.txt into $VENV"
"$VENV/bin/python" -m pip install -q -r python/requirements-dev.txt
cp python/requirements-dev.txt "$stamp"
