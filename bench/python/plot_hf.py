"""Plots bench_hf.py's records: per model and GPU, twellrt ÷ dense for every throughput (the
speedups) beside energy per token and peak memory (fractions of dense's), a dashed line at 1.0.

    python bench/python/plot_hf.py DIR_OR_JSON [...] [--out DIR]

Reads bench_hf.json files (or folders holding one); of records measured more than once (same model,
GPU, stage, mode, batch, metric) the newest is drawn; records whose status is not "ok" are left
out. Writes bench_hf_<model>_<gpu>.png into --out (default: beside the first input) and prints the
paths."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

SCHEMA = "twellrt.bench_hf/1"


def load(paths) -> list:
    rows = []
    for p in paths:
        f = os.path.join(p, "bench_hf.json") if os.path.isdir(p) else p
        with open(f) as fh:
            data = json.load(fh)
        rows += [r for r in (data if isinstance(data, list) else [data]) if r.get("schema") == SCHEMA]
    return rows


def newest(rows) -> list:
    """The newest ok record with a ratio for each measured quantity."""
    best = {}
    for r in rows:
        if r.get("status") != "ok" or r.get("ratio") is None:
            continue
        k = (r["model"], r["gpu"], r["stage"], r["mode"], r["batch"], r.get("seq"), r["metric"])
        if k not in best or r["date"] >= best[k]["date"]:
            best[k] = r
    return list(best.values())


def label(r) -> str:
    if r["stage"] == "decode":
        return f"decode {r['mode']}, batch {r['batch']}"
    return f"{r['stage']} {r['mode']}, {r['batch']}×{r.get('seq', '?')}"


def slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", s).strip("_")


def plot(rows, outdir) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = {"prefill": 0, "decode": 1, "train": 2}
    written = []
    groups = {}
    for r in newest(rows):
        groups.setdefault((r["model"], r["gpu"]), []).append(r)
    for (model, gpu), rs in sorted(groups.items()):
        rs.sort(key=lambda r: (order.get(r["stage"], 9), r["mode"], r["batch"]))
        speed = [r for r in rs if r["metric"] == "throughput"]
        cost = [r for r in rs if r["metric"] in ("energy_per_token", "peak_memory")]
        if not speed and not cost:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(13, 0.9 + 0.34 * max(len(speed), len(cost), 3)), squeeze=False)
        panels = ((axes[0][0], speed, "twellrt ÷ dense throughput (speedup, higher is better)"),
                  (axes[0][1], cost, "twellrt ÷ dense energy per token and peak memory (lower is better)"))
        for ax, sel, title in panels:
            ax.set_title(title, fontsize=9)
            if not sel:
                ax.text(0.5, 0.5, "no records", ha="center", va="center", transform=ax.transAxes)
                ax.set_yticks([])
                continue
            names = [label(r) + ("" if r["metric"] == "throughput" else f" — {r['metric'].replace('_', ' ')}") for r in sel]
            vals = [r["ratio"] for r in sel]
            good = [(v >= 1.0) if r["better"] == "higher" else (v <= 1.0) for v, r in zip(vals, sel)]
            y = list(range(len(sel)))[::-1]
            ax.barh(y, vals, color=["tab:green" if g else "tab:red" for g in good])
            ax.axvline(1.0, color="k", ls="--", lw=1)
            ax.set_yticks(y)
            ax.set_yticklabels(names, fontsize=8)
            for yy, v in zip(y, vals):
                ax.text(v, yy, f" {v:.2f}×", va="center", fontsize=7)
            ax.set_xlim(0, max(max(vals) * 1.18, 1.2))
        commits = sorted({r["commit"] for r in rs})
        fig.suptitle(f"{model} ({rs[0]['shape']['hidden']}/{rs[0]['shape']['intermediate']}, {rs[0]['shape']['layers']} layers) "
                     f"on {gpu}, commit {', '.join(commits)}", fontsize=10)
        fig.tight_layout()
        path = os.path.join(outdir, f"bench_hf_{slug(model)}_{slug(gpu)}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="bench_hf.json files or folders holding one")
    ap.add_argument("--out", help="output folder (default: the first input's folder)")
    a = ap.parse_args(argv)
    rows = load(a.inputs)
    first = a.inputs[0]
    out = a.out or (first if os.path.isdir(first) else os.path.dirname(os.path.abspath(first)))
    os.makedirs(out, exist_ok=True)
    paths = plot(rows, out)
    for p in paths:
        print(p)
    if not paths:
        print("plot_hf: no ok records with a ratio to plot", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
