#!/usr/bin/env python3
"""check_calls.py — the dependency rule for calls: fails when a library file uses a symbol
defined in a folder its own folder may not depend on.

check_includes.py checks what a file includes; this checks what its object file links against,
which a forward declaration or the public header cannot hide. For every object file of the
library (and of tests/verify) it reads the global symbols defined and undefined (nm), maps each
object to its folder by its source path, and lists every reference from folder A to a symbol
defined in folder B != A (calls and data alike). The directions allowed are check_includes.py's
RULES (docs/ARCHITECTURE.md): the public `twell_*` functions count as defined where they are
defined, so calling the public API against the rule is caught too. The programs (tools, bench,
tests) are not checked here: they reach the library through its two headers, which
check_includes.py checks.

scripts/calls_allow.txt lists the known violations still to be removed, one `folder symbol` a
line; the check fails on a violation it does not list and on an entry that is no longer a
violation, so the list only shrinks. It also prints the circles between folders (strongly
connected components of the folder graph, allowed or not) and between the files of one folder.

Usage: scripts/check_calls.py [build-dir] [--list] [--nm NM]
  build-dir: a configured and built CMake tree (default: build); the objects are found under
  its CMakeFiles/twellrt_probe.dir (else twellrt_static.dir, else twellrt.dir) and
  twellrt_verify.dir.
  --list: also print every cross-folder reference.
Exit 0: clean, 1: violations or stale allow-list entries, 2: no objects or nm missing.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
from check_includes import LIB, RULES, folder_of  # noqa: E402 (the one table of directions)

ALLOW = "scripts/calls_allow.txt"
# the test library first: the same sources plus the *_probe.c files, built with TWELL_PROBES
TARGETS = [("twellrt_probe.dir", "twellrt_static.dir", "twellrt.dir"), ("twellrt_verify.dir",)]
CHECKED = set(LIB) | {"verify"}  # the folders whose references are checked (not the programs)


def objects(build):
    """[(source path relative to the repository, object path)] of the checked targets."""
    found = []
    for choices in TARGETS:
        for t in choices:
            top = os.path.join(build, "CMakeFiles", t)
            if not os.path.isdir(top):
                continue
            for dirpath, dirnames, names in os.walk(top):
                dirnames.sort()
                for n in sorted(names):
                    if n.endswith((".c.o", ".c.obj")):
                        obj = os.path.join(dirpath, n)
                        src = os.path.relpath(obj, top)[: -len(n.split(".c.")[-1]) - 1]
                        src = src.replace(os.sep, "/")
                        # an object left by an earlier build of a source since moved or removed
                        if os.path.isfile(os.path.join(ROOT, src)):
                            found.append((src, obj))
            break  # the first target of the choices that exists
    return found


def symbols(nm, obj):
    """(defined, undefined) global symbol names of one object file."""
    out = subprocess.run([nm, "-P", "-g", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind in ("U", "w", "v"):  # undefined, or a weak reference that may stay undefined
            undefined.add(name)
        else:
            defined.add(name)
    return defined, undefined


def read_allow(root):
    """{(folder, symbol): line number} of the allow-list; (None, message) for a bad line."""
    entries, bad = {}, []
    path = os.path.join(root, ALLOW)
    if not os.path.exists(path):
        return entries, bad
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) != 2 or words[0] not in RULES:
                bad.append(f"{ALLOW}:{lineno}: expected `folder symbol`, got {line.strip()!r}")
                continue
            entries[(words[0], words[1])] = lineno
    return entries, bad


def components(nodes, edges):
    """Strongly connected components (Tarjan) of more than one node, each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def print_circles(title, refs, key, keep=lambda a, b: True, tag=lambda a, b: ""):
    """Prints the components of the graph whose nodes key(file) gives over the references
    between files a -> b that keep(a, b) accepts, with the edges inside each component (tag
    marks an edge)."""
    edges, syms = {}, {}
    for (a, b), names in refs.items():
        ka, kb = key(a), key(b)
        if ka is None or ka == kb or not keep(a, b):
            continue
        edges.setdefault(ka, set()).add(kb)
        syms.setdefault((ka, kb), set()).update(names)
    comps = components(set(edges) | {b for s in edges.values() for b in s}, edges)
    print(f"{title}: {len(comps)}")
    for comp in comps:
        print(f"  circle: {' <-> '.join(comp)}")
        for a in comp:
            for b in comp:
                if (a, b) in syms:
                    names = sorted(syms[(a, b)])
                    more = f" (+{len(names) - 4} more)" if len(names) > 4 else ""
                    print(f"    {a} -> {b}{tag(a, b)}: {', '.join(names[:4])}{more}")
    return comps


def main(argv):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    nm, build, listing = "nm", None, False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--list":
            listing = True
        elif a == "--nm" and args:
            nm = args.pop(0)
        elif a.startswith("-"):
            print(__doc__)
            return 2
        else:
            build = a
    build = os.path.abspath(build or os.path.join(root, "build"))
    objs = objects(build)
    if not objs:
        print(f"check_calls: no object files of the library under {build}/CMakeFiles "
              f"(build it first)")
        return 2
    defined_in, uses = {}, {}
    try:
        for src, obj in objs:
            d, u = symbols(nm, obj)
            uses[src] = u
            for s in d:
                defined_in.setdefault(s, src)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"check_calls: cannot run {nm}: {e}")
        return 2

    # (from file, to file) -> symbols, for every reference that leaves its file
    refs = {}
    for src, undefined in uses.items():
        for s in undefined:
            to = defined_in.get(s)
            if to is not None and to != src:
                refs.setdefault((src, to), set()).add(s)

    allow, bad = read_allow(root)
    used_allow = set()
    violations = []
    for (a, b), names in sorted(refs.items()):
        fa, fb = folder_of(a), folder_of(b)
        if fa not in CHECKED or fa == fb:
            continue
        ok = fb in RULES[fa]
        for s in sorted(names):
            listed = (fa, s) in allow
            if listing:
                mark = "" if ok else (" (allow-listed)" if listed else " (VIOLATION)")
                print(f"{a} -> {b}: {s}{mark}")
            if ok:
                continue
            if listed:
                used_allow.add((fa, s))
            else:
                violations.append(f"{a}: {fa} uses {s} from {b} ({fb}; allowed for {fa}: "
                                  f"{', '.join(sorted(RULES[fa])) or 'nothing'})")
    for (fa, s), lineno in sorted(allow.items(), key=lambda kv: kv[1]):
        if (fa, s) not in used_allow:
            bad.append(f"{ALLOW}:{lineno}: `{fa} {s}` is no longer a violation: remove it")

    print_circles("circles between folders", refs, folder_of,
                  tag=lambda a, b: "" if b in RULES.get(a, LIB) else " (against the rules)")
    print_circles("circles between the files of one folder", refs, lambda f: f,
                  lambda a, b: folder_of(a) == folder_of(b))
    for v in violations + bad:
        print(v)
    print(f"check_calls: {len(objs)} objects, {sum(len(v) for v in refs.values())} references "
          f"between files, {len(violations)} violations, {len(used_allow)} allow-listed, "
          f"{len(bad)} allow-list problems")
    return 1 if violations or bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
