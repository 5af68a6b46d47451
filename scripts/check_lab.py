#!/usr/bin/env python3
"""check_lab.py — product files carry comments that give reasons, not lab notes: fails when a
comment in a product file names a GPU model, a date, a commit id or a session's history.

Product files: everything under runtime/, gen/, cache/, autotune/, tools/, templates/ (.lua),
python/twellrt/ and cmake/, CMakeLists.txt, the Makefile and the scripts/*.sh those two run. Only
comments are read: C and C++ comments in .c/.h files and inside the templates' CUDA blocks (Lua
long strings), as scripts/clex.py finds them; Lua comments, Python comments and docstrings, `#`
comments in shell, CMake, make and .in files. String literals and code are not (a device table
may name its devices).

Rules (one per hit):
  gpu      a GPU model name used as provenance: H100, H200, A100, B200, GH200, V100, L4, L40S, T4,
           RTX/GTX …, Tesla, Quadro (architecture names and targets such as Hopper, sm_90a are fine)
  date     an ISO date, 20YY-MM-DD
  commit   a commit id: 7 to 40 hex digits with both a digit and a letter, after "commit", "at",
           "in", "since", "rev", "revision", "before", "after" or in parentheses
  session  session history: "session N", "stop N" (also "sessions N-M", "stop #N")
The numbers behind a rule belong in BENCHMARKS.md and the history in git; a comment says why.
Escape (only where a name cannot be avoided): `check_lab: allow` in a comment on the same line.

Usage: scripts/check_lab.py [repo-root]   (exit 0: clean; 1: one line per hit, file:line: text)
CI runs it (.ci/run, and ctest's test_lab).
"""
import io
import os
import re
import subprocess
import sys
import tokenize

import clex

DIRS = ("runtime/", "gen/", "cache/", "autotune/", "tools/", "templates/", "python/twellrt/",
        "cmake/")
TOPFILES = ("CMakeLists.txt", "Makefile")
ESCAPE = "check_lab: allow"

GPU_RE = re.compile(
    r"(?<![\w.])(?:(?:GH|GB|[HABVP])[1-9]00|A10G?|A[34]0|A800|L40S?|L4|L20|T4|K80|H20|"
    r"RTX|GTX|Quadro|Tesla|Jetson)(?!\w)")
DATE_RE = re.compile(r"(?<!\d)20\d\d-[01]\d-[0-3]\d(?!\d)")
HEX = r"(?<![\w.])([0-9a-f]{7,40})(?![\w.])"
COMMIT_RE = re.compile(r"(?:\b(?:commits?|at|in|since|rev|revision|before|after)\b[\s:#]*|\()"
                       + HEX, re.IGNORECASE)
SESSION_RE = re.compile(r"\b(?:sessions?|stop)\s+#?\d+", re.IGNORECASE)


def rules(text):
    """The rules `text` (one line of a comment) breaks."""
    hit = []
    if GPU_RE.search(text):
        hit.append("gpu")
    if DATE_RE.search(text):
        hit.append("date")
    for m in COMMIT_RE.finditer(text):
        tok = m.group(1)
        if re.search(r"\d", tok) and re.search(r"[a-f]", tok, re.IGNORECASE):
            hit.append("commit")
            break
    if SESSION_RE.search(text):
        hit.append("session")
    return hit


def lua_comments(src):
    """(line, text) for Lua comments, and for the C comments inside long strings (the CUDA blocks
    of a template)."""
    out = []
    i, n, line = 0, len(src), 1
    long_re = re.compile(r"\[(=*)\[")
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif src.startswith("--", i):
            m = long_re.match(src, i + 2)
            if m:  # --[==[ long comment ]==]
                close = "]" + m.group(1) + "]"
                j = src.find(close, m.end())
                j = n if j < 0 else j
                for k, t in enumerate(src[m.end():j].split("\n")):
                    out.append((line + k, t))
                line += src.count("\n", i, j)
                i = j + len(close)
            else:
                j = src.find("\n", i)
                j = n if j < 0 else j
                out.append((line, src[i + 2:j]))
                i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            i = j + 1
        elif long_re.match(src, i):
            m = long_re.match(src, i)
            close = "]" + m.group(1) + "]"
            j = src.find(close, m.end())
            j = n if j < 0 else j
            out += clex.comments(src[m.end():j], line)
            line += src.count("\n", i, j)
            i = j + len(close)
        else:
            i += 1
    return out


def py_comments(src):
    """(line, text) for Python comments and docstrings (a string that is a statement alone)."""
    out = []
    prev = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string[1:]))
        elif tok.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.NL,
                                                      tokenize.INDENT, tokenize.DEDENT):
            for k, t in enumerate(tok.string.split("\n")):
                out.append((tok.start[0] + k, t))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            prev = tok.type
    return out


def hash_comments(src, quotes):
    """(line, text) for `#` comments of shell, CMake, make and .in files: a `#` outside quotes
    at the start of a line or after a blank."""
    out = []
    for ln, text in enumerate(src.split("\n"), 1):
        q = None
        for k, c in enumerate(text):
            if q:
                if c == q:
                    q = None
                elif c == "\\":
                    continue
            elif c in quotes and (k == 0 or text[k - 1] != "\\"):
                q = c
            elif c == "#" and (k == 0 or text[k - 1] in " \t") and text[k - 1:k] != "$":
                out.append((ln, text[k + 1:]))
                break
    return out


def comments(path, src):
    if path.endswith((".c", ".h", ".cu", ".cuh")):
        return clex.comments(src)
    if path.endswith(".lua"):
        return lua_comments(src)
    if path.endswith(".py"):
        return py_comments(src)
    if path.endswith(".sh"):
        return hash_comments(src, "\"'")
    if path.endswith((".cmake", ".in", ".txt")) or os.path.basename(path) == "Makefile":
        return hash_comments(src, "\"")
    return []


def product_files(root):
    try:
        files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                               check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):  # not a checkout (a source tarball)
        files = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root)
                 for f in fs]
    files = [f for f in files if f and os.path.isfile(os.path.join(root, f))]
    out = [f for f in files if f.startswith(DIRS) and not f.endswith(".md")]
    out += [f for f in TOPFILES if f in files]
    for top in TOPFILES:  # the scripts the build runs
        try:
            with open(os.path.join(root, top), encoding="utf-8") as fh:
                out += sorted(set(re.findall(r"scripts/[\w/.-]+\.sh", fh.read())) - set(out))
        except OSError:
            pass
    return sorted(set(f for f in out if os.path.isfile(os.path.join(root, f))))


def main(argv):
    root = os.path.abspath(argv[0] if argv else os.path.join(os.path.dirname(__file__), ".."))
    hits = []
    files = product_files(root)
    for f in files:
        try:
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                src = fh.read()
        except (OSError, UnicodeDecodeError):
            continue
        lines = src.split("\n")
        seen = set()
        for ln, text in comments(f, src):
            broken = rules(text)
            if not broken or ESCAPE in lines[ln - 1] or ln in seen:
                continue
            seen.add(ln)
            hits.append(f"{f}:{ln}: {lines[ln - 1].strip()}  [{', '.join(broken)}]")
    for h in hits:
        print(h)
    if hits:
        print(f"check_lab: {len(hits)} comment lines read like a lab log (GPU names, dates, "
              "commit ids, session history); give the reason, the numbers go to BENCHMARKS.md",
              file=sys.stderr)
        return 1
    print(f"check_lab: OK, no lab notes in product comments ({len(files)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
