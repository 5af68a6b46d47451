#!/usr/bin/env python3
"""check_includes.py — fails when a file includes a header from a folder it must not depend on,
or touches a third-party API outside the one file that owns it.

The folders and their allowed directions are docs/ARCHITECTURE.md's table; RULES and THIRD_PARTY
below are that document in code (keep the two in step). CI runs this (.ci/run, and ctest's
test_includes). Headers are included by bare name, so each name must be
unique in the tree: the script maps it to the folder that holds it.
Usage: scripts/check_includes.py [repo-root]   (exit 0: clean, 1: violations listed)
"""
import os
import re
import sys

LIB = ["core", "cache", "cuda", "cpu", "gen", "autotune", "ops", "gate_pack_tiled", "gate_pack_lt",
       "gate_pack", "ffn_heavy", "ffn_tiled", "ffn_small", "ffn_dense", "ffn", "train_dense",
       "train_sparse", "train", "api"]
# folder -> the folders it may include from (itself and the public header always allowed)
RULES = {
    "core": [],
    "cache": ["core"],
    "cuda": ["core"],
    "cpu": ["core"],
    "gen": ["cache", "core"],
    "autotune": ["gen", "cache", "cuda", "core"],
    "ops": ["gen", "cuda", "core"],  # op_plan.h; cuda_module.c, the ops' template-module loader
    # gate-pack's routes (runtime/ops/gate_pack/<path>/), below the op folder's per-plan state
    "gate_pack_tiled": ["autotune", "gen", "cuda", "cpu", "core"],  # the tuner: autotune, cpu
    "gate_pack_lt": ["gen", "cuda", "core"],  # cuBLASLt (cuda_blaslt.h), its packing module
    "gate_pack": ["gate_pack_tiled", "ops", "autotune", "gen", "cache", "cuda", "cpu", "core"],
    # ffn_infer's paths (runtime/ops/ffn/<path>/), each below the op folder that chooses them
    "ffn_heavy": ["ops", "gen", "cuda", "core"],
    "ffn_tiled": ["ffn_heavy", "gate_pack_tiled", "ops", "autotune", "gen", "cuda", "cpu", "core"],
    "ffn_small": ["gate_pack", "gate_pack_tiled", "ops", "gen", "cuda", "core"],
    "ffn_dense": ["gate_pack_lt", "cuda", "core"],
    "ffn": ["ffn_small", "ffn_tiled", "ffn_heavy", "ffn_dense", "gate_pack", "gate_pack_tiled",
            "gate_pack_lt", "ops", "autotune", "gen", "cache", "cuda", "cpu", "core"],
    # training's paths (runtime/ops/train/<path>/), below the op folder that chooses them
    "train_dense": ["ffn_heavy", "ops", "gen", "cuda", "core"],
    "train_sparse": ["train_dense", "ffn", "ffn_tiled", "ops", "gen", "cuda", "core"],
    "train": ["train_sparse", "train_dense", "cuda", "core"],
    "api": [f for f in LIB if f != "api"],
    "verify": ["core"],
    # programs over the library: the public header, the one internal header (INTERNAL), each
    # other's own headers and the verification library; tests may also include what they test
    "tools": ["verify", "bench"],
    "bench": ["verify", "tools"],
    "tests": LIB + ["verify", "bench", "tools", "tests"],  # tools: test_cli checks its parsers
    "examples": [],
}
# The programs' internal header (runtime/twellrt_internal.h): tools/, bench/ and tests/ may
# include it; inside the library only the API folder may (it is above every op).
INTERNAL = "twellrt_internal.h"
INTERNAL_USERS = {"tools", "bench", "tests", "api"}
FOLDERS = {  # path prefix -> folder key (longest prefix wins)
    "runtime/core/": "core", "runtime/cpu/": "cpu", "runtime/cuda/": "cuda",
    "runtime/ops/gate_pack/": "gate_pack", "runtime/ops/gate_pack/tiled/": "gate_pack_tiled",
    "runtime/ops/gate_pack/lt/": "gate_pack_lt", "runtime/ops/ffn/": "ffn",
    "runtime/ops/ffn/small/": "ffn_small", "runtime/ops/ffn/tiled/": "ffn_tiled",
    "runtime/ops/ffn/heavy/": "ffn_heavy", "runtime/ops/ffn/dense/": "ffn_dense",
    "runtime/ops/train/": "train", "runtime/ops/train/sparse/": "train_sparse",
    "runtime/ops/train/dense/": "train_dense", "runtime/ops/": "ops", "runtime/": "api",
    "gen/": "gen",
    "cache/": "cache", "autotune/": "autotune", "tests/verify/": "verify", "tests/": "tests",
    "tools/": "tools", "bench/": "bench", "examples/": "examples",
}
PUBLIC = "twellrt.h"
# Each third-party API is touched in one place (docs/ARCHITECTURE.md): one file, or the few files
# of one module that share a private header; what touching it looks like in a source line, and
# the only files allowed to.
THIRD_PARTY = [
    ("Lua", re.compile(r"^\s*#\s*include\s*<(lua|lauxlib|lualib)\.h>"),
     {"gen/lua_engine.c", "gen/lua_state.h", "gen/lua_limits.c", "gen/lua_sandbox.c",
      "gen/lua_api.c"}),
    ("a library opened at run time (NVRTC, the CUDA driver, cuBLAS)",
     re.compile(r"\bdlopen\s*\("),
     {"gen/nvrtc.c", "runtime/cuda/cuda_driver_load.c", "runtime/cuda/cuda_blaslt.c",
      "bench/cublas.c"}),
    ("the CUDA driver's function table", re.compile(r"\btw_cu\.[A-Z]"),
     {"runtime/cuda/cuda_driver.c", "runtime/cuda/cuda_driver_load.c",
      "runtime/cuda/cuda_launch.c", "runtime/cuda/cuda_memory.c"}),
    ("a CUDA toolkit header (the build never needs one)",
     re.compile(r"^\s*#\s*include\s*<(cuda|cuda_runtime|nvrtc|cublas\w*)\.h>"), set()),
]


def folder_of(rel):
    best = None
    for prefix, key in FOLDERS.items():
        if rel.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, key)
    return best[1] if best else None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    files, where = [], {}
    for prefix in sorted(set(p.split("/")[0] for p in FOLDERS)):
        for dirpath, dirnames, names in os.walk(os.path.join(root, prefix)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    rel = os.path.relpath(os.path.join(dirpath, n), root)
                    files.append(rel)
                    if n.endswith(".h"):
                        where.setdefault(n, []).append(rel)
    bad = []
    for name, paths in sorted(where.items()):
        keys = {folder_of(p) for p in paths}
        if len(paths) > 1 and keys & set(LIB):
            bad.append(f"header name {name} is not unique: {', '.join(paths)}")
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for rel in files:
        me = folder_of(rel)
        if me is None:
            continue
        allowed = set(RULES[me]) | {me}
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                for what, pattern, owners in THIRD_PARTY:
                    if rel not in owners and pattern.search(line):
                        bad.append(f"{rel}:{lineno}: touches {what} (only: "
                                   f"{', '.join(sorted(owners)) or 'nowhere'})")
                m = inc.match(line)
                if not m:
                    continue
                name = os.path.basename(m.group(1))
                if name == INTERNAL:
                    if me not in INTERNAL_USERS:
                        bad.append(f"{rel}:{lineno}: {me} includes {name}, the programs' "
                                   f"internal header (allowed in: "
                                   f"{', '.join(sorted(INTERNAL_USERS))})")
                    continue
                if name == PUBLIC or name not in where:
                    continue  # the public header, or a header of the test/tool folder itself
                them = folder_of(where[name][0])
                if them not in allowed:
                    bad.append(f"{rel}:{lineno}: {me} includes {name} from {them} "
                               f"(allowed: {', '.join(sorted(allowed))})")
    for b in bad:
        print(b)
    print(f"check_includes: {len(files)} files, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
