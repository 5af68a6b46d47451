#!/usr/bin/env python3
"""plot_bench.py — draws `twell bench` records (the JSON files of bench/results) as PNGs.

For one op (default ffn_infer; its `_graph` records are mode graph, `_host` mode host) and every
shape (K, N) in the records, per GPU:
  speedup_vs_M_K<K>_N<N>.png        dense ÷ ours against M (log2 axis), a panel per active-per-row
                                    target seen at two or more M, a line per (distribution, mode);
  speedup_vs_density_K<K>_N<N>.png  the same against density nnz_target / N (log axis), a panel
                                    per (distribution, mode), a line per M.
Speedup is the record's baseline_ms / ours_ms (its `ratio`), the dense cuBLAS time over ours in
the same run; a dashed line marks 1.0. A point's marker is the route that ran (the record's `path`,
or for older records the end of its `variant`). Records whose check failed or whose baseline did
not run are left out; where several records share a point (files of several runs) the newest
`date` wins. With records of more than one GPU the file names end in the GPU's name.

Usage: scripts/plot_bench.py [FILE.json ...] [--out DIR] [--op OP] [--shape K,N]
                             [--modes eager,graph] [--target M:SPEEDUP ...]
Files default to bench/results/*.json; files that are not arrays of bench records are skipped.
Runs headless (matplotlib's Agg backend). Exit 0 when it wrote a plot, 1 when no record matched.
"""
import argparse
import glob
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")  # headless: no display is ever needed
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import matplotlib.ticker  # noqa: E402

MODES = ("eager", "graph", "host")
# marker per route (bench.h's bench_record.path)
MARKERS = {"small": "o", "tiled": "s", "rows": "D", "dense": "^", "mixed": "x", "sparse": "v"}


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Plot twell bench records: speedup (dense / ours) against M and density.")
    ap.add_argument("files", nargs="*", help="bench JSON files (default bench/results/*.json)")
    ap.add_argument("--out", default=os.path.join("bench", "plots"), help="output folder")
    ap.add_argument("--op", default="ffn_infer", help="record op without its _graph/_host suffix")
    ap.add_argument("--shape", help="only this K,N (e.g. 2048,5632)")
    ap.add_argument("--modes", default="eager,graph",
                    help="modes to draw, comma-separated (eager, graph, host)")
    ap.add_argument("--target", action="append", default=[], metavar="M:SPEEDUP",
                    help="a target to mark on the speedup-against-M plots (repeatable)")
    a = ap.parse_args(argv)
    a.shape_kn = None
    if a.shape:
        m = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", a.shape)
        if not m:
            ap.error("--shape wants K,N, e.g. 2048,5632")
        a.shape_kn = (int(m.group(1)), int(m.group(2)))
    a.mode_set = [m for m in a.modes.split(",") if m]
    if not a.mode_set or any(m not in MODES for m in a.mode_set):
        ap.error("--modes takes eager, graph and host")
    a.targets = []
    for t in a.target:
        m = re.fullmatch(r"\s*(\d+)\s*:\s*([0-9.]+)\s*", t)
        if not m:
            ap.error("--target wants M:SPEEDUP, e.g. 1:2.0")
        a.targets.append((int(m.group(1)), float(m.group(2))))
    return a


def load_records(paths):
    """Every object of every file that has a bench record's fields; other files are skipped."""
    recs = []
    for p in paths:
        try:
            with open(p) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print(f"plot_bench: skipping {p}: {e}", file=sys.stderr)
            continue
        if not isinstance(data, list):
            continue
        for r in data:
            if isinstance(r, dict) and all(k in r for k in ("op", "M", "K", "N")):
                recs.append(r)
    return recs


def split_op(op, base):
    """The mode of a record of op `base`, or None for another op."""
    if op == base:
        return "eager"
    for m in ("graph", "host"):
        if op == f"{base}_{m}":
            return m
    return None


def speedup(r):
    b, o = r.get("baseline_ms"), r.get("ours_ms")
    if isinstance(b, (int, float)) and isinstance(o, (int, float)) and b > 0 and o > 0:
        return b / o
    return None


def route(r):
    """The record's path; older records (before the field) say it at the end of variant."""
    p = r.get("path")
    if p and p != "unknown":
        return p
    tail = str(r.get("variant", "")).rsplit("+", 1)[-1]
    return "dense" if tail.startswith("dense") else tail


def gpu_name(r):
    """The device without its "cuda:N " prefix."""
    return re.sub(r"^cuda:\d+\s+", "", str(r.get("gpu", ""))).strip()


def select(recs, a):
    """Points keyed by (gpu, K, N, gated, dist, mode, nnz, M) -> (speedup, route). A series (the
    key without M) keeps the records of its newest commit only, so one line never joins runs of
    different code; within that commit the newest record of a point wins."""
    best, newest = {}, {}
    for i, r in enumerate(recs):
        mode = split_op(str(r["op"]), a.op)
        if mode not in a.mode_set or r.get("correct") is False:
            continue
        if a.shape_kn and (int(r["K"]), int(r["N"])) != a.shape_kn:
            continue
        s = speedup(r)
        if s is None or not isinstance(r.get("nnz_target"), (int, float)):
            continue
        key = (gpu_name(r), int(r["K"]), int(r["N"]), r.get("gated", True) is not False,
               str(r.get("distribution", "?")), mode, float(r["nnz_target"]), int(r["M"]))
        order, commit = (str(r.get("date", "")), i), str(r.get("commit", ""))
        if key not in best or order >= best[key][0]:
            best[key] = (order, commit, s, route(r))
        if key[:-1] not in newest or order >= newest[key[:-1]][0]:
            newest[key[:-1]] = (order, commit)
    return {k: (s, rt) for k, (_, commit, s, rt) in best.items() if commit == newest[k[:-1]][1]}


def series_label(dist, mode, gated):
    return f"{dist} {mode}" + ("" if gated else " non-gated")


def panels(n):
    cols = 1 if n == 1 else 2
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.4 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def draw_line(ax, xs, ys, routes, label):
    (ln,) = ax.plot(xs, ys, "-", label=label, linewidth=1.2)
    for x, y, rt in zip(xs, ys, routes):
        ax.plot([x], [y], MARKERS.get(rt, "."), color=ln.get_color(), markersize=5)


def route_legend(ax, used):
    """A second legend: the marker of each route drawn."""
    handles = [plt.Line2D([], [], color="gray", marker=MARKERS.get(rt, "."), linestyle="",
                          label=rt) for rt in sorted(used)]
    if handles:
        ax.add_artist(ax.legend(handles=handles, loc="lower right", fontsize=7, title="path",
                                title_fontsize=7))


def finish(fig, ax_list, title, path):
    fig.suptitle(title, fontsize=10)
    for ax in ax_list:
        ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylabel("speedup (dense cuBLAS ÷ twellrt)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot_bench: wrote {path}")


def plot_vs_m(pts, gpu, K, N, a, path):
    """Returns 1 when it drew something."""
    by_nnz = {}
    for (g, k, n, gated, dist, mode, nnz, M), v in pts.items():
        if (g, k, n) == (gpu, K, N):
            by_nnz.setdefault(nnz, {}).setdefault((dist, mode, gated), {})[M] = v
    keep = sorted(nnz for nnz, ser in by_nnz.items()
                  if any(len(line) >= 2 for line in ser.values()))
    if not keep:
        return 0
    fig, axes = panels(len(keep))
    for ax, nnz in zip(axes, keep):
        used = set()
        for (dist, mode, gated), line in sorted(by_nnz[nnz].items()):
            Ms = sorted(line)
            draw_line(ax, Ms, [line[m][0] for m in Ms], [line[m][1] for m in Ms],
                      series_label(dist, mode, gated))
            used.update(line[m][1] for m in Ms)
        for m, s in a.targets:
            ax.plot([m], [s], "*", color="red", markersize=10,
                    label="target" if (m, s) == a.targets[0] else None)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("M (rows)")
        ax.set_title(f"{nnz:g} active per row ({100.0 * nnz / N:.2g}% of N)", fontsize=9)
        route_legend(ax, used)
        ax.legend(loc="best", fontsize=7)
    finish(fig, axes, title(a.op, "against M", K, N, gpu), path)
    return 1


def plot_vs_density(pts, gpu, K, N, a, path):
    by_series = {}
    for (g, k, n, gated, dist, mode, nnz, M), v in pts.items():
        if (g, k, n) == (gpu, K, N):
            by_series.setdefault((dist, mode, gated), {}).setdefault(M, {})[nnz] = v
    keep = sorted(s for s, lines in by_series.items() if any(len(d) >= 2 for d in lines.values()))
    if not keep:
        return 0
    fig, axes = panels(len(keep))
    for ax, ser in zip(axes, keep):
        used, ticks = set(), set()
        for M, line in sorted(by_series[ser].items()):
            if len(line) < 2:
                continue
            nnzs = sorted(line)
            draw_line(ax, [x / N for x in nnzs], [line[x][0] for x in nnzs],
                      [line[x][1] for x in nnzs], f"M = {M}")
            used.update(line[x][1] for x in nnzs)
            ticks.update(x / N for x in nnzs)
        ax.set_xscale("log")
        # ticks at the densities measured: a log axis's own ticks skip most of them
        ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(sorted(ticks)))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{100 * v:.2g}%"))
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("density (active per row ÷ N)")
        ax.set_title(series_label(*ser), fontsize=9)
        route_legend(ax, used)
        ax.legend(loc="best", fontsize=7, ncol=2)
    finish(fig, axes, title(a.op, "against density", K, N, gpu), path)
    return 1


def title(op, what, K, N, gpu):
    return f"{op}: speedup {what}, K {K}, N {N}" + (f" — {gpu}" if gpu else "")


def slug(s):
    return re.sub(r"[^A-Za-z0-9]+", "-", s).strip("-")


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    paths = a.files or sorted(glob.glob(os.path.join("bench", "results", "*.json")))
    pts = select(load_records(paths), a)
    if not pts:
        print(f"plot_bench: no {a.op} records with both times in {len(paths)} file(s)",
              file=sys.stderr)
        return 1
    os.makedirs(a.out, exist_ok=True)
    gpus = sorted({k[0] for k in pts})
    wrote = 0
    for gpu in gpus:
        tail = f"_{slug(gpu)}" if len(gpus) > 1 and gpu else ""
        for K, N in sorted({(k[1], k[2]) for k in pts if k[0] == gpu}):
            stem = f"K{K}_N{N}{tail}.png"
            wrote += plot_vs_m(pts, gpu, K, N, a, os.path.join(a.out, "speedup_vs_M_" + stem))
            wrote += plot_vs_density(pts, gpu, K, N, a,
                                     os.path.join(a.out, "speedup_vs_density_" + stem))
    if not wrote:
        print("plot_bench: no series with two or more points to draw", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
