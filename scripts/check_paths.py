#!/usr/bin/env python3
"""check_paths.py — every repository path that a tracked source file, script or document cites
must exist, and every record kept under bench/results/ and bench/plots/ must be cited by
BENCHMARKS.md.

A cited path is a token that starts with one of the repository's top folders (runtime/, gen/,
templates/, tests/, docs/, …) followed by at least one more component, e.g.
`runtime/ops/ffn/small/cuda_small.c` or `templates/ffn/*.lua`. Braces expand (`cuda_blaslt.{c,h}`), a
`*` or `?` is a glob that must match at least one file, `<placeholder>` components are skipped,
and a trailing `/` names a folder. Paths under build outputs (build*/, .venv/) are not checked,
nor string literals in C (messages and fixture names, not citations; scripts/clex.py finds them,
so a quoted path in a C comment is checked).

The records kept are the ones behind BENCHMARKS.md's figures, so each tracked file under
bench/results/ and bench/plots/ must be cited there: by its path (globs and braces as above), or
right after a cited record as `…SUFFIX`, that record's name with its beginning elided
(`…/x-T1-a.json`, then `…T2-a.json`); such a shorthand must name a record too. A record
no figure cites any more goes (`git rm`; git keeps it).

Usage: scripts/check_paths.py [--list]   (run from anywhere inside the checkout)
Exit 0 when every cited path exists and every record is cited, 1 with one line per dead
citation (file:line: path) or uncited record (--list: the same lines, exit 0).
"""
import fnmatch
import glob
import os
import re
import subprocess
import sys

import clex

TOP = ("runtime", "gen", "cache", "autotune", "templates", "tools", "bench", "python", "scripts",
       "docs", "tests", "examples", "abi", "cmake", ".ci")
SCANNED = (".c", ".h", ".lua", ".py", ".sh", ".md", ".txt", ".cmake", ".toml", ".cfg", ".in")
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w.*?{},/<>+-]*[\w*?}/>])" % "|".join(
    re.escape(t) for t in TOP))
RECORDS = ("bench/results/", "bench/plots/")
BENCHMARKS = "BENCHMARKS.md"
SHORT_RE = re.compile(r"…([\w.-]*\.(?:json|log|png))(?![\w.-])")


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


def uncited_records(root, files):
    """(dead shorthand citations, uncited records): the tracked files under RECORDS that
    BENCHMARKS.md does not cite, and its `…SUFFIX` citations that name no record."""
    recs = [f for f in files if f.startswith(RECORDS)]
    try:
        with open(os.path.join(root, BENCHMARKS), encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return [], [f"{r}: not cited ({BENCHMARKS} missing)" for r in recs]
    cited, dead, prev = set(), [], None
    for m in re.finditer(PATH_RE.pattern + "|" + SHORT_RE.pattern, text):
        if m.group(1):
            p = m.group(1).rstrip(".,;:")
            if p.startswith(RECORDS):
                prev = expand_braces(p)[0]
                for q in expand_braces(p):
                    cited.update(fnmatch.filter(recs, q))
            continue
        suffix = m.group(2)
        hit = [r for r in recs if prev and r.endswith(suffix) and
               os.path.dirname(r) == os.path.dirname(prev) and
               os.path.basename(prev).startswith(os.path.basename(r)[:-len(suffix)])]
        cited.update(hit)
        if not hit:
            line = text.count("\n", 0, m.start()) + 1
            dead.append(f"{BENCHMARKS}:{line}: …{suffix} (no record after {prev})")
    return dead, [f"{r}: not cited by {BENCHMARKS} (cite it, or git rm it)" for r in recs
                  if r not in cited]


def main(argv):
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True, check=True).stdout.strip()
    # the files git tracks that the tree holds: a copied tree whose index is older than its files
    # (the device's) lists paths since removed
    tracked = [f for f in subprocess.run(["git", "ls-files"], cwd=root, capture_output=True,
                                         text=True, check=True).stdout.split("\n")
               if f and os.path.isfile(os.path.join(root, f))]
    files = [f for f in tracked if f and (f.endswith(SCANNED) or os.path.basename(f) in
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
    short, uncited = uncited_records(root, tracked)
    dead += short
    for d in dead + uncited:
        print(d)
    if "--list" not in argv and (dead or uncited):
        print(f"check_paths: {len(dead)} cited paths do not exist, {len(uncited)} records under "
              f"{' and '.join(RECORDS)} not cited by {BENCHMARKS}", file=sys.stderr)
        return 1
    if not dead and not uncited:
        nrec = sum(f.startswith(RECORDS) for f in tracked)
        print(f"check_paths: OK, every cited path exists ({len(files)} files) and every record is "
              f"cited ({nrec} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
