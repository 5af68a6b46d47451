#!/usr/bin/env python3
"""bench_tables.py — the Markdown tables of BENCHMARKS.md from `twell bench` records.

For one op (default ffn_infer), a table per (gated, K, N, active-per-row target, distribution):
a column per M, a row per mode (eager: op, graph: op_graph) with the speedup dense ÷ ours of
that record, and a row "route" with the path AUTO ran (the eager record's, else the graph's).
Records are read and chosen as scripts/plot_bench.py does (failed checks left out, the newest
record of a point wins).

Usage: scripts/bench_tables.py FILE.json ... [--op ffn_infer] [--modes eager,graph]
Prints the tables to stdout; exit 1 when no record matched.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_bench import load_records, route, speedup, split_op  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--op", default="ffn_infer")
    ap.add_argument("--modes", default="eager,graph")
    a = ap.parse_args(argv)
    modes = a.modes.split(",")
    best = {}  # (table key, mode, M) -> record, the newest wins
    for r in load_records(a.files):
        mode = split_op(str(r.get("op")), a.op)
        if mode not in modes or r.get("correct") is False or speedup(r) is None:
            continue
        key = (bool(r.get("gated", True)), r["K"], r["N"], r.get("nnz_target"),
               r.get("distribution"))
        k = (key, mode, r["M"])
        if k not in best or str(r.get("date", "")) > str(best[k].get("date", "")):
            best[k] = r
    if not best:
        print("bench_tables: no record matched", file=sys.stderr)
        return 1
    for key in sorted({k[0] for k in best}, key=lambda t: (not t[0], t[1], t[2], str(t[3]),
                                                           str(t[4]))):
        gated, K, N, nnz, dist = key
        ms = sorted({k[2] for k in best if k[0] == key})
        print(f"**{'gated' if gated else 'non-gated'} K {K} / N {N}, {nnz}/row, {dist}**\n")
        print("| M | " + " | ".join(str(m) for m in ms) + " |")
        print("|---|" + "---|" * len(ms))
        for mode in modes:
            cells = [best.get((key, mode, m)) for m in ms]
            if any(cells):
                print(f"| {mode} | " + " | ".join(f"{speedup(c):.2f}" if c else "–"
                                                    for c in cells) + " |")
        routes = []
        for m in ms:
            c = best.get((key, "eager", m)) or next(
                (best[(key, md, m)] for md in modes if (key, md, m) in best), None)
            routes.append(route(c) if c else "–")
        print("| route | " + " | ".join(routes) + " |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
