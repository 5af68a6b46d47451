#!/usr/bin/env python3
"""For scripts/check_abi.sh: `abi_prefix.py BASELINE CURRENT OUT` writes the abidw XML CURRENT to
OUT with every sized struct (its first member is `struct_size`: twellrt.h, "ABI stability") cut
back to the baseline's size, dropping the members that lie wholly past the baseline's end. Those
are the fields the header's rules allow later versions to append; everything else of the struct
(its earlier members, their offsets and types, down to enumerators and function-pointer
signatures) is left for abidiff to compare. A member that starts before the baseline's end (an
insertion, or a field put in the old tail padding) is kept, so abidiff reports it. Prints one
line per struct it cut."""

import sys
import xml.etree.ElementTree as ET


def sized_structs(root):
    """name -> [class-decl elements that define a sized struct] (one per translation unit)."""
    out = {}
    for c in root.iter("class-decl"):
        if c.get("is-declaration-only") == "yes" or c.get("size-in-bits") is None:
            continue
        first = c.find("data-member/var-decl")
        if first is not None and first.get("name") == "struct_size":
            out.setdefault(c.get("name"), []).append(c)
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: abi_prefix.py BASELINE CURRENT OUT")
    base = sized_structs(ET.parse(sys.argv[1]).getroot())
    tree = ET.parse(sys.argv[2])
    for name, decls in sized_structs(tree.getroot()).items():
        if name not in base:
            continue  # a new struct: nothing to compare it with
        old_bits = int(base[name][0].get("size-in-bits"))
        appended = []
        for c in decls:
            new_bits = int(c.get("size-in-bits"))
            if new_bits <= old_bits:
                continue  # not grown (a shrink is abidiff's to report)
            cut = [m for m in c.findall("data-member") if int(m.get("layout-offset-in-bits")) >= old_bits]
            for m in cut:
                c.remove(m)
            c.set("size-in-bits", str(old_bits))
            appended = [m.find("var-decl").get("name") for m in cut]
        if appended:
            print(f"abi_prefix: {name} grew past the baseline's {old_bits // 8} bytes; not compared: {', '.join(appended)}")
    tree.write(sys.argv[3], encoding="unicode")


if __name__ == "__main__":
    main()
