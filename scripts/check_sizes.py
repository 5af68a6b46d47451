#!/usr/bin/env python3
"""check_sizes.py — fails when a source file is over 800 lines or a C function over 100 lines,
unless scripts/size_allow.txt lists it.

Files: every tracked C source or header, Lua template, Python and shell script. Functions: C
definitions as scripts/clex.py finds them (braces matched once comments, literals and directives
are blanked), from the line the declarator starts on to the closing brace.
The allow-list holds the offenders still to be split (one a line: `path` for a file,
`path:function` for a function; `#` starts a comment). An entry that no longer offends is
reported too, so the list only shrinks. CI runs this (.ci/run).

Usage: scripts/check_sizes.py [--all]   (--all: also list what the allow-list excuses)
Exit 0: within the limits, 1: offenders or stale allow-list entries listed.
"""
import os
import subprocess
import sys

import clex

MAX_FILE_LINES = 800
MAX_FUNC_LINES = 100
SUFFIXES = (".c", ".h", ".lua", ".py", ".sh")
C_SUFFIXES = (".c", ".h")
ALLOW = "scripts/size_allow.txt"


def read_allow(root):
    allow = {}
    path = os.path.join(root, ALLOW)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                entry = line.split("#", 1)[0].strip()
                if entry:
                    allow[entry] = lineno
    return allow


def main(argv):
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=root, capture_output=True, text=True, check=True).stdout.split("\n")
    files = sorted(f for f in set(files) if f.endswith(SUFFIXES) and
                   os.path.isfile(os.path.join(root, f)))
    allow = read_allow(root)
    used = set()
    bad, excused = [], []
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        found = []
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > MAX_FILE_LINES:
            found.append((rel, f"{rel}: {lines} lines (limit {MAX_FILE_LINES})"))
        if rel.endswith(C_SUFFIXES):
            for name, first, last in clex.functions(text):
                n = last - first + 1
                if n > MAX_FUNC_LINES:
                    found.append((f"{rel}:{name}", f"{rel}:{first}: {name}: {n} lines "
                                                   f"(limit {MAX_FUNC_LINES})"))
        for key, msg in found:
            if key in allow:
                used.add(key)
                excused.append(msg)
            else:
                bad.append(msg)
    stale = [f"{ALLOW}:{ln}: {k}: within the limits now (remove the entry)"
             for k, ln in sorted(allow.items(), key=lambda kv: kv[1]) if k not in used]
    for b in bad + stale:
        print(b)
    if "--all" in argv:
        for e in excused:
            print(f"allowed: {e}")
    print(f"check_sizes: {len(files)} files, {len(bad)} over the limits, {len(excused)} allowed "
          f"by {ALLOW}, {len(stale)} stale entries")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
