#!/usr/bin/env python3
"""check_sizes.py — fails when a source file is over 800 lines or a C function over 100 lines,
unless scripts/size_allow.txt lists it.

Files: every tracked C source or header, Lua template, Python and shell script. Functions: C
definitions found by matching braces after comments, strings and preprocessor lines are blanked;
a function's length runs from the line its declarator starts on to its closing brace.
The allow-list holds the offenders still to be split (one a line: `path` for a file,
`path:function` for a function; `#` starts a comment). An entry that no longer offends is
reported too, so the list only shrinks. CI runs this (.ci/run).

Usage: scripts/check_sizes.py [--all]   (--all: also list what the allow-list excuses)
Exit 0: within the limits, 1: offenders or stale allow-list entries listed.
"""
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 800
MAX_FUNC_LINES = 100
SUFFIXES = (".c", ".h", ".lua", ".py", ".sh")
C_SUFFIXES = (".c", ".h")
ALLOW = "scripts/size_allow.txt"
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def blank_c(text):
    """text with comments, string and character literals and preprocessor lines replaced by
    spaces (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    bol = True  # only white space since the last newline
    while i < n:
        c = text[i]
        if bol and c == "#":  # a directive, with its continuation lines
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else text[i:j])
            i = j
            bol = False
            continue
        out.append(c)
        if c == "\n":
            bol = True
        elif not c.isspace():
            bol = False
        i += 1
    return "".join(out)


def c_functions(text):
    """(name, first line, last line) of each function definition at file scope."""
    s = blank_c(text)
    funcs = []
    depth = 0
    stmt_start = 0  # offset where the current file-scope declaration began
    i = 0
    while i < len(s):
        c = s[i]
        if c == "{":
            if depth == 0:
                head = s[stmt_start:i]
                m = re.search(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*$", head)
                if m and "=" not in head and m.group(1) not in KEYWORDS:
                    start = stmt_start + len(head) - len(head.lstrip())
                    open_at, name = i, m.group(1)
                else:
                    open_at, name = None, None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if name is not None:
                    first = s.count("\n", 0, start) + 1
                    last = s.count("\n", 0, i) + 1
                    funcs.append((name, first, last))
                    name = None
                stmt_start = i + 1
        elif c == ";" and depth == 0:
            stmt_start = i + 1
        i += 1
    return funcs


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
            for name, first, last in c_functions(text):
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
