#!/usr/bin/env python3
"""check_paths.py — every repository path that a tracked source file, script or document cites
must exist.

A cited path is a token that starts with one of the repository's top folders (runtime/, gen/,
templates/, tests/, docs/, …) followed by at least one more component, e.g.
`runtime/ops/ffn/cuda_small.c` or `templates/ffn/*.lua`. Braces expand (`cuda_blaslt.{c,h}`), a
`*` or `?` is a glob that must match at least one file, `<placeholder>` components are skipped,
and a trailing `/` names a folder. Paths under build outputs (build*/, .venv/) are not checked,
nor string literals in C (messages and fixture names, not citations; scripts/clex.py finds them,
so a quoted path in a C comment is checked).

Usage: scripts/check_paths.py [--list]   (run from anywhere inside the checkout)
Exit 0 when every cited path exists, 1 with one line per dead citation (file:line: path).
"""
import glob
import os
import re
import subprocess
import sys

import clex

TOP = ("runtime", "gen", "cache", "autotune", "templates", "tools", "bench", "python", "scripts",
       "docs", "tests", "examples", "abi", "cmake", ".ci")
SCANNED = (".c", ".h", ".lua", ".py", ".sh", ".md", ".txt", ".cmake", ".toml", ".cfg")
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w.*?{},/<>+-]*[\w*?}/>])" % "|".join(
    re.escape(t) for t in TOP))


def expand_braces(p):
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(p[:m.start()] + alt + p[m.end():])
    return out


def exists(root, p):
    if "<" in p or ">" in p:  # a placeholder such as bench/python/<name>.py
        return True
    full = os.path.join(root, p)
    if any(c in p for c in "*?"):
        return bool(glob.glob(full))
    return os.path.exists(full.rstrip("/")) if p.endswith("/") else os.path.exists(full)


def main(argv):
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True, check=True).stdout.strip()
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    files = [f for f in files if f and (f.endswith(SCANNED) or os.path.basename(f) in
                                        ("Makefile", "CMakeLists.txt", "run"))]
    dead = []
    for f in files:
        if f.startswith("bench/results/"):
            continue
        try:
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            continue
        if f.endswith((".c", ".h")):  # string literals are data (messages, fixture names)
            text = clex.blank(text, (clex.STRING,))
        for n, line in enumerate(text.split("\n"), 1):
            for m in PATH_RE.finditer(line):
                p = m.group(1).rstrip(".,;:")
                if "/" not in p.rstrip("/") or p.split("/")[0].startswith("build"):
                    continue
                for q in expand_braces(p):
                    if not exists(root, q):
                        dead.append(f"{f}:{n}: {q}")
    for d in dead:
        print(d)
    if "--list" not in argv and dead:
        print(f"check_paths: {len(dead)} cited paths do not exist", file=sys.stderr)
        return 1
    print(f"check_paths: OK, every cited path exists ({len(files)} files)") if not dead else None
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
