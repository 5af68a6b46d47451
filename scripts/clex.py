"""clex.py — the C lexer the tree's checks share: where a C or CUDA source's comments, string and
character literals and preprocessor directives are, and its functions' extents.

A source splits into pieces of kind COMMENT (`//` to the end of the line, `/* ... */`), STRING
(`"..."`), CHAR (`'...'`) and CODE, each flagged when it lies inside a directive (a `#` first on
its line, through its backslash-continued lines). Literals end at their closing quote or, left
open, before the end of the line; a backslash escapes the next character (a newline included).
An unclosed block comment runs to the end of the file. Not a compiler: trigraphs and raw strings
are not read.

Users: scripts/check_lab.py (comments), scripts/check_sizes.py (functions), scripts/check_paths.py
(a C string literal is not a citation).
"""
import re

CODE, COMMENT, STRING, CHAR = "code", "comment", "string", "char"
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def pieces(src):
    """(kind, start, end, in_directive) for consecutive pieces covering `src`."""
    out = []
    i, n = 0, len(src)
    code = 0  # where the current CODE piece began
    bol = True  # only white space (and comments) since the last newline outside a directive
    pp = False  # inside a directive

    def flush(to):
        if to > code:
            out.append((CODE, code, to, pp))

    while i < n:
        c = src[i]
        if c == "\n":
            if pp and not (i > 0 and src[i - 1] == "\\"):
                flush(i)
                code = i
                pp = False
            bol = not pp
            i += 1
        elif src.startswith("//", i) or src.startswith("/*", i):
            if src[i + 1] == "/":
                j = src.find("\n", i)
                j = n if j < 0 else j
            else:
                j = src.find("*/", i + 2)
                j = n if j < 0 else j + 2
            flush(i)
            out.append((COMMENT, i, j, pp))
            code = i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n) if j < n and src[j] == c else min(j, n)
            flush(i)
            out.append((STRING if c == '"' else CHAR, i, j, pp))
            code = i = j
            bol = False
        else:
            if bol and c == "#":
                flush(i)
                code = i
                pp = True
            if not c.isspace():
                bol = False
            i += 1
    flush(n)
    return out


def comments(src, line0=1):
    """(line, text) for each line of each comment in `src` (its first line numbered line0), the
    delimiters `//`, `/*` and `*/` left out."""
    out = []
    line, at = line0, 0
    for kind, i, j, _ in pieces(src):
        if kind != COMMENT:
            continue
        line += src.count("\n", at, i)
        at = i
        body = src[i + 2:j] if src[i + 1] == "/" else src[i + 2:j - 2 if src.endswith(
            "*/", i + 2, j) else j]
        for k, text in enumerate(body.split("\n")):
            out.append((line + k, text))
    return out


def blank(src, kinds, directives=False):
    """`src` with the pieces of the given kinds (and, with `directives`, every piece inside a
    directive) replaced by spaces; newlines are kept, so lines and columns hold, and so are a
    literal's quotes."""
    out = []
    for kind, i, j, pp in pieces(src):
        text = src[i:j]
        if kind in kinds or (directives and pp):
            body = re.sub(r"[^\n]", " ", text)
            if kind in (STRING, CHAR) and not (directives and pp):
                body = text[0] + body[1:-1] + text[-1] if len(text) >= 2 else text
            text = body
        out.append(text)
    return "".join(out)


def functions(src):
    """(name, first line, last line) of each function definition at file scope: braces matched
    after comments, literals and directives are blanked; a function runs from the line its
    declarator starts on to its closing brace."""
    s = blank(src, (COMMENT, STRING, CHAR), directives=True)
    funcs = []
    depth = 0
    stmt_start = 0  # offset where the current file-scope declaration began
    name = None
    for i, c in enumerate(s):
        if c == "{":
            if depth == 0:
                head = s[stmt_start:i]
                m = re.search(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*$", head)
                if m and "=" not in head and m.group(1) not in KEYWORDS:
                    start = stmt_start + len(head) - len(head.lstrip())
                    name = m.group(1)
                else:
                    name = None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if name is not None:
                    funcs.append((name, s.count("\n", 0, start) + 1, s.count("\n", 0, i) + 1))
                    name = None
                stmt_start = i + 1
        elif c == ";" and depth == 0:
            stmt_start = i + 1
    return funcs
