"""Tensor-parallel prefill benchmark: one feed-forward layer and a whole Llama-style model, on one
GPU (p = 1) and split over two (p = 2, NCCL), twellrt and dense, with contiguous and balanced
shards, on synthetic activity (twellrt.activity: uniform, skewed, clustered).

    python -m twellrt.bench_tp [--out DIR]        # spawns one process per GPU (2 at most)
    python -m twellrt.bench_tp --smoke            # the same code path on the CPU (gloo, tiny shapes)

Shapes: 1.5b (hidden 2048, intermediate 5632, 28 layers, 16 heads) and 7b (4096, 11008, 32 layers,
32 heads; 11008 / 2 is not a multiple of the tile T = 256, so p = 2 pads each shard to 5632 with
zero neurons). Tokens: 8 sequences of 2048 (16384), bf16.

Per layer (x of 16384 tokens, sequences of 2048 whose first token fires ~25% of the live neurons
and overflows, ~29 active per other token; L2 flushed before every repetition; ranks start each
repetition together): p = 1 on GPU 0; p = 2 contiguous and balanced (layout from the counts of a
separate calibration batch, collected on the sharded layer and summed over ranks), with the
all-reduce; the time is the slower rank's. all-reduce share = the all-reduce's stream time
(CUDA events around the collective, so it includes waiting for the other rank) ÷ the layer
time; compute imbalance = max ÷ min of the ranks' layer time without the all-reduce; active
imbalance = max ÷ mean of active entries per rank on the timed tokens.

Model (prefill of the same 16384 tokens, logits of the last position only, as a server does):
weights made as in twellrt.bench_model (a constant residual channel turns gate_proj's column 0
into a per-neuron threshold, calibrated layer by layer) but with each profile's firing
probabilities; p = 2 splits attention by heads (column-parallel q/k/v, row-parallel o_proj with an
all-reduce, in this file) and the MLPs with TensorParallelGatedMLP: two all-reduces per layer.

Output: a short table on stdout, everything in DIR/bench_tp.json (DIR: --out, else $OUT, else .).
--budget-s (default 240) stops starting new model-level runs once that much time has passed."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

SHAPES = {
    "1.5b": (2048, 5632, 28, 16),
    "7b": (4096, 11008, 32, 32),
    "smoke": (128, 1024, 2, 4),  # --smoke (CPU, gloo)
}
T_TILE = 256


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------


class Clock:
    """Per-rank timing with CUDA events (perf_counter on the CPU), every repetition started on all
    ranks together (a tiny collective and a device synchronise), L2 flushed before it."""

    def __init__(self, dev, world):
        self.dev, self.world = dev, world
        self.cuda = dev.type == "cuda"
        self.flush_buf = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev) if self.cuda else None
        self.tiny = torch.zeros(1, device=dev)
        self.ar = []  # (start, end) events of timed all-reduces
        self.ar_on = False

    def sync(self, ranks=True):
        if ranks and self.world > 1:
            dist.all_reduce(self.tiny)
        if self.cuda:
            torch.cuda.synchronize(self.dev)

    def run(self, fn, reps, warmup=2, flush=True, ranks=True):
        """ms per call of fn (median over reps) and the median ms of timed all-reduces per call."""
        for _ in range(warmup):
            fn()
        ts, ars = [], []
        for _ in range(reps):
            if flush and self.cuda:
                self.flush_buf.zero_()
            self.sync(ranks)
            self.ar = []
            self.ar_on = True
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                ts.append(a.elapsed_time(b))
                ars.append(sum(s.elapsed_time(e) for s, e in self.ar))
            else:
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e3)
                ars.append(sum(e - s for s, e in self.ar) * 1e3)
            self.ar_on = False
        return statistics.median(ts), statistics.median(ars)

    def all_reduce(self, t, group=None):
        """dist.all_reduce, with its stream time recorded while a timed repetition runs."""
        if not self.ar_on:
            dist.all_reduce(t, group=group)
            return t
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dist.all_reduce(t, group=group)
            b.record()
        else:
            a = time.perf_counter()
            dist.all_reduce(t, group=group)
            b = time.perf_counter()
        self.ar.append((a, b))
        return t


def _gather(obj, world):
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


# ------------------------------------------------------------------------------------------------
# one layer
# ------------------------------------------------------------------------------------------------


class DenseShard(nn.Module):
    """PyTorch's MLP on a shard's weights (the dense baseline), + all-reduce when world > 1."""

    def __init__(self, sd, clock, world):
        super().__init__()
        self.wg, self.wu, self.wd = sd["gate_proj.weight"], sd["up_proj.weight"], sd["down_proj.weight"]
        self.clock, self.world = clock, world

    def forward(self, x):
        y = F.linear(torch.relu(F.linear(x, self.wg)) * F.linear(x, self.wu), self.wd)
        return self.clock.all_reduce(y) if self.world > 1 else y


def _pad_needed(N, world):
    return N % world != 0 or (N // world) % T_TILE != 0


def layer_bench(a, shape, profile, rank, world, dev, clock):
    import twellrt
    from twellrt import activity, balance

    K, N, _, _ = SHAPES[shape]
    M = a.tokens
    seed = 11
    sd = activity.synthetic_layer(K, N, activity.firing_probs(N, 29.0, profile, seed), seed, device=dev)
    x = activity.synthetic_inputs(M, K, 2, device=dev, bos_every=a.seq)
    xc = activity.synthetic_inputs(M, K, 3, device=dev, bos_every=a.seq)  # calibration batch
    r = {"shape": shape, "profile": profile, "K": K, "N": N, "M": M}
    with torch.no_grad():
        if rank == 0:  # p = 1 on GPU 0 while the others wait
            full = twellrt.TwELLGatedMLP(K, N, device=dev)
            full.load_state_dict(sd)
            r["p1_ms"] = clock.run(lambda: full(x), a.reps, ranks=False)[0]
            y1 = full(x)
            if profile == a.profiles[0]:
                dn = DenseShard(sd, clock, 1)
                r["p1_dense_ms"] = clock.run(lambda: dn(x), a.reps, ranks=False)[0]
            del full
        clock.sync()
        if world == 1:
            return r
        pad = _pad_needed(N, world)
        tp = twellrt.TensorParallelGatedMLP.from_full(sd, pad=pad, device=dev)
        with balance.ActivityCounter(tp) as ctr:
            tp(xc)
        ctr.all_reduce()
        layouts = {"contiguous": tp.layout, "balanced": balance.balanced_layout(ctr.counts[""], world, T_TILE, pad)}
        del tp
        for name, lay in layouts.items():
            tp = twellrt.TensorParallelGatedMLP.from_full(sd, layout=lay, pad=pad, device=dev)
            total, ar = clock.run(lambda: tp(x), a.reps)
            tp.reduce = "none"
            compute, _ = clock.run(lambda: tp(x), a.reps)
            tp.reduce = "all_reduce"
            with balance.ActivityCounter(tp) as cnt:
                y2 = tp(x)
            act = int(cnt.counts[""].sum())
            ovf = int(cnt.overflow[""].sum())
            g = _gather((total, ar, compute, act, ovf), world)
            e = {
                "ms": max(v[0] for v in g),
                "allreduce_ms": [v[1] for v in g],
                "compute_ms": [v[2] for v in g],
                "active": [v[3] for v in g],
                "overflow_row_tiles": [v[4] for v in g],
            }
            e["allreduce_share"] = max(v[1] for v in g) / e["ms"]
            e["compute_imbalance"] = max(e["compute_ms"]) / min(e["compute_ms"])
            e["active_imbalance"] = max(e["active"]) / statistics.mean(e["active"])
            if rank == 0:
                e["rel_err_vs_p1"] = ((y2.float() - y1.float()).norm() / y1.float().norm()).item()
            r[f"p{world}_{name}"] = e
            del tp, y2
        if profile == a.profiles[0]:
            ly = twellrt.parallel.contiguous_layout(N, world, T_TILE, pad)[rank]
            dn = DenseShard(twellrt.parallel.shard_weights(sd, ly), clock, world)
            t, ar = clock.run(lambda: dn(x), a.reps)
            g = _gather((t, ar), world)
            r[f"p{world}_dense_ms"] = max(v[0] for v in g)
            buf = torch.empty(M, K, dtype=torch.bfloat16, device=dev)
            clock.ar_on = False
            t, _ = clock.run(lambda: dist.all_reduce(buf), a.reps)
            r["allreduce_alone_ms"] = max(_gather(t, world))
    return r


# ------------------------------------------------------------------------------------------------
# a model
# ------------------------------------------------------------------------------------------------


class TPAttention(nn.Module):
    """A shard of bench_model's Attention: heads [rank·H/p, (rank+1)·H/p), o_proj row-parallel."""

    def __init__(self, full, rank, world, clock):
        super().__init__()
        self.h, self.hd = full.h // world, full.hd
        lo, hi = rank * self.h * self.hd, (rank + 1) * self.h * self.hd
        self.wq = full.q_proj.weight[lo:hi].contiguous()
        self.wk = full.k_proj.weight[lo:hi].contiguous()
        self.wv = full.v_proj.weight[lo:hi].contiguous()
        self.wo = full.o_proj.weight[:, lo:hi].contiguous()
        self.clock = clock

    def forward(self, x, cos, sin):
        from .bench_model import rope

        B, S, _ = x.shape

        def heads(t):
            return t.view(B, S, self.h, self.hd).transpose(1, 2)

        q, k, v = heads(F.linear(x, self.wq)), heads(F.linear(x, self.wk)), heads(F.linear(x, self.wv))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.clock.all_reduce(F.linear(o.transpose(1, 2).reshape(B, S, -1), self.wo))


class TPLayer(nn.Module):
    def __init__(self, full, attn, mlp):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = full.input_layernorm, full.post_attention_layernorm
        self.self_attn, self.mlp = attn, mlp

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


def prefill(model, layers, ids):
    """Logits of the last position after running every layer over all of ids."""
    cos, sin = model.rope_tables(ids.shape[1], ids.device)
    x = model.embed_tokens(ids)
    for lyr in layers:
        x = lyr(x, cos, sin)
    return model.lm_head(model.norm(x[:, -1]))


@torch.no_grad()
def init_weights_on(model, seed, dev):
    """bench_model.init_weights, drawn on the device (a 7B model in seconds)."""
    from . import bench_model as bm

    g = torch.Generator(device=dev).manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 1.0 if "embed" in name else 0.005 if "o_proj" in name else 0.02
            p.copy_((torch.randn(p.shape, generator=g, device=dev) * std).to(p.dtype))
    E = model.embed_tokens.weight
    E[:, 0] = bm.C_CONST
    E[bm.BOS, 0] = bm.C_BOS
    for lyr in model.layers:
        lyr.self_attn.o_proj.weight[0].zero_()
        lyr.mlp.down_proj.weight[0].zero_()


def calibrate_profile(model, targets, ids, seed, profile):
    """bench_model.calibrate with each layer's firing probabilities drawn from
    twellrt.activity.firing_probs(profile) instead of its own log-normal."""
    from . import bench_model as bm
    from .activity import firing_probs

    bm.calibrate(model, targets, ids, seed,
                 probs=lambda i, N, target: firing_probs(N, target, profile, seed + 101 * i))


def model_bench(a, shape, profile, rank, world, dev, clock, dense_done):
    import twellrt
    from twellrt import balance
    from twellrt import bench_model as bm

    K, N, L, H = SHAPES[shape]
    if a.model_layers:
        L = min(L, a.model_layers)
    r = {"shape": shape, "profile": profile, "layers": L, "tokens": a.tokens}
    t0 = time.time()
    torch.manual_seed(0)
    model = bm.Model(K, N, L, H, dev)
    init_weights_on(model, 0, dev)
    gen = torch.Generator().manual_seed(7)
    cal = bm.make_ids(max(2, 8192 // a.seq), a.seq, gen, dev)
    count_ids = bm.make_ids(a.tokens // a.seq, a.seq, gen, dev)
    ids = bm.make_ids(a.tokens // a.seq, a.seq, gen, dev)
    with torch.no_grad():
        if rank == 0:
            calibrate_profile(model, bm.layer_targets(L), cal, 0, profile)
        if world > 1:  # every rank holds the same full model (a checkpoint)
            for p in model.parameters():
                dist.broadcast(p, 0)
        dense_mlps = [lyr.mlp for lyr in model.layers]
        twellrt.swap_mlps(model)
        tw_mlps = [lyr.mlp for lyr in model.layers]
        r["build_s"] = time.time() - t0
        full_layers = list(model.layers)
        if rank == 0:
            r["p1_ms"] = clock.run(lambda: prefill(model, full_layers, ids), a.model_reps, flush=False, ranks=False)[0]
            ref = prefill(model, full_layers, ids).float()
            if not dense_done:
                bm.set_mlps(model, dense_mlps)
                r["p1_dense_ms"] = clock.run(lambda: prefill(model, full_layers, ids), a.model_reps, flush=False, ranks=False)[0]
                bm.set_mlps(model, tw_mlps)
        clock.sync()
        if world == 1:
            return r
        pad = _pad_needed(N, world)
        attn = [TPAttention(lyr.self_attn, rank, world, clock) for lyr in full_layers]

        def tp_layers(layouts):
            return [
                TPLayer(lyr, at, twellrt.TensorParallelGatedMLP.from_full(m, layout=lay, pad=pad))
                for lyr, at, m, lay in zip(full_layers, attn, tw_mlps, layouts)
            ]

        # counts on the sharded model (as a deployment that cannot hold the full model would),
        # summed over ranks, on other sequences than the timed ones
        layers = tp_layers([None] * L)
        with balance.ActivityCounter(nn.ModuleList(layers)) as ctr:
            prefill(model, layers, count_ids)
        ctr.all_reduce()
        counts = [ctr.counts[f"{i}.mlp"] for i in range(L)]
        for name in ("contiguous", "balanced"):
            if name == "balanced":
                layers = None
                _empty(dev.type == "cuda")
                layers = tp_layers([balance.balanced_layout(c, world, T_TILE, pad) for c in counts])
            ms, ar = clock.run(lambda: prefill(model, layers, ids), a.model_reps, flush=False)
            loads = [float(balance.shard_loads(c, lyr.mlp.layout)[rank]) for c, lyr in zip(counts, layers)]
            g = _gather((ms, ar, loads), world)
            e = {"ms": max(v[0] for v in g), "allreduce_ms": [v[1] for v in g]}
            e["allreduce_share"] = max(v[1] for v in g) / e["ms"]
            # active entries per rank by layer (calibration counts under this layout)
            per_layer = [max(v[2][i] for v in g) / statistics.mean(v[2][i] for v in g) for i in range(L)]
            e["active_imbalance_per_layer"] = per_layer
            e["active_imbalance_mean"] = statistics.mean(per_layer)
            e["active_imbalance_max"] = max(per_layer)
            out = prefill(model, layers, ids).float()
            if rank == 0:
                e["logits_rel_err_vs_p1"] = ((out - ref).norm() / ref.norm()).item()
            r[f"p{world}_{name}"] = e
        layers = None
        if not dense_done:
            ly = twellrt.parallel.contiguous_layout(N, world, T_TILE, pad)[rank]
            dl = [
                TPLayer(lyr, at, DenseShard(twellrt.parallel.shard_weights(dm.state_dict(), ly), clock, world))
                for lyr, at, dm in zip(full_layers, attn, dense_mlps)
            ]
            ms, _ = clock.run(lambda: prefill(model, dl, ids), a.model_reps, flush=False)
            r[f"p{world}_dense_ms"] = max(_gather(ms, world))
    return r


# ------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------

def _rank_main(rank, world, a, store, outdir):
    import twellrt

    cuda = not a.smoke
    if cuda:
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        torch.set_num_threads(1)
        dev = torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    kw = {"device_id": dev} if cuda else {}
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=world, **kw)
    t_start = time.time()
    rec = {"world": world, "args": vars(a), "torch": torch.__version__, "twellrt": twellrt.version(), "layer": [], "model": [], "skipped": []}
    if cuda:
        rec["gpus"] = _gather(torch.cuda.get_device_name(dev), world)
    clock = Clock(dev, world)
    # TensorParallelGatedMLP calls parallel._all_reduce: route it through the clock, which records
    # each collective's stream time (CUDA events around it) during timed repetitions
    twellrt.parallel._all_reduce = clock.all_reduce
    path = os.path.join(outdir, "bench_tp.json")

    def dump():  # after every record, so a run cut short keeps what it measured
        rec["wall_s"] = time.time() - t_start
        if rank == 0:
            with open(path, "w") as f:
                json.dump(rec, f, indent=1)

    try:
        for shape in a.shapes if not a.no_layer else []:
            for prof in a.profiles:
                t1 = time.time()
                r = layer_bench(a, shape, prof, rank, world, dev, clock)
                r["wall_s"] = time.time() - t1
                rec["layer"].append(r)
                dump()
                if rank == 0:
                    print(f"[{time.time() - t_start:6.1f}s] layer {shape} {prof} done ({r['wall_s']:.1f}s)", flush=True)
        _empty(cuda)
        for shape in a.shapes if not a.no_model else []:
            dense_done = False
            for prof in a.profiles:
                over = _gather(time.time() - t_start > a.budget_s, world)
                if any(over):
                    rec["skipped"].append(f"model {shape} {prof}: past --budget-s {a.budget_s}")
                    continue
                t1 = time.time()
                r = model_bench(a, shape, prof, rank, world, dev, clock, dense_done)
                dense_done = True
                r["wall_s"] = time.time() - t1
                rec["model"].append(r)
                dump()
                _empty(cuda)
                if rank == 0:
                    print(f"[{time.time() - t_start:6.1f}s] model {shape} {prof} done ({r['wall_s']:.1f}s)", flush=True)
    finally:
        dump()
        dist.destroy_process_group()


def _empty(cuda):
    import gc

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def _f(v, fmt="{:.2f}"):
    return "—" if v is None else fmt.format(v)


def report(rec) -> str:
    p = rec["world"]
    gpus = ", ".join(sorted(set(rec.get("gpus", ["CPU (smoke)"]))))
    lines = [f"== tensor-parallel prefill, {rec['args']['tokens']} tokens, bf16, p = {p} vs 1, {gpus} =="]
    lines.append("per layer (ms; speedup vs p=1; active imbalance max/mean; all-reduce share incl. waiting):")
    lines.append(f"| shape | profile | p=1 | p={p} contiguous | imb | AR share | p={p} balanced | imb | AR share | dense p=1 / p={p} | AR alone |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rec["layer"]:
        c, b = r.get(f"p{p}_contiguous"), r.get(f"p{p}_balanced")
        p1 = r.get("p1_ms")

        def cell(e):
            if e is None:
                return "— | — | —"
            sp = f" ({p1 / e['ms']:.2f}×)" if p1 else ""
            return f"{e['ms']:.3f}{sp} | {e['active_imbalance']:.3f} | {100 * e['allreduce_share']:.0f}%"

        dense = f"{_f(r.get('p1_dense_ms'), '{:.3f}')} / {_f(r.get(f'p{p}_dense_ms'), '{:.3f}')}" if "p1_dense_ms" in r else ""
        lines.append(f"| {r['shape']} | {r['profile']} | {_f(p1, '{:.3f}')} | {cell(c)} | {cell(b)} | {dense} | {_f(r.get('allreduce_alone_ms'), '{:.3f}')} |")
    if rec["model"]:
        lines.append("model prefill (ms; logits of the last position):")
        lines.append(f"| shape | layers | profile | p=1 | p={p} contiguous | AR share | p={p} balanced | AR share | mean layer imb contiguous → balanced | dense p=1 / p={p} |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in rec["model"]:
            c, b = r.get(f"p{p}_contiguous"), r.get(f"p{p}_balanced")
            p1 = r.get("p1_ms")

            def mc(e):
                if e is None:
                    return "— | —"
                sp = f" ({p1 / e['ms']:.2f}×)" if p1 else ""
                return f"{e['ms']:.1f}{sp} | {100 * e['allreduce_share']:.0f}%"

            imb = f"{c['active_imbalance_mean']:.3f} → {b['active_imbalance_mean']:.3f}" if c and b else "—"
            dense = f"{_f(r.get('p1_dense_ms'), '{:.1f}')} / {_f(r.get(f'p{p}_dense_ms'), '{:.1f}')}" if "p1_dense_ms" in r else ""
            lines.append(f"| {r['shape']} | {r['layers']} | {r['profile']} | {_f(p1, '{:.1f}')} | {mc(c)} | {mc(b)} | {imb} | {dense} |")
    for s in rec["skipped"]:
        lines.append(f"skipped: {s}")
    lines.append(f"wall {rec['wall_s']:.0f} s")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="1.5b,7b")
    ap.add_argument("--profiles", default="uniform,skewed,clustered")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=10, help="repetitions per layer timing")
    ap.add_argument("--model-reps", type=int, default=3)
    ap.add_argument("--model-layers", type=int, default=0, help="cap the model depth (0: the shape's)")
    ap.add_argument("--no-model", action="store_true")
    ap.add_argument("--no-layer", action="store_true")
    ap.add_argument("--world", type=int, default=0, help="ranks (default: min(2, GPUs))")
    ap.add_argument("--budget-s", type=float, default=240.0, help="start no model run after this many seconds")
    ap.add_argument("--out", default="")
    ap.add_argument("--smoke", action="store_true", help="CPU, gloo, tiny shapes: the code path only")
    a = ap.parse_args(argv)
    a.shapes = a.shapes.split(",")
    a.profiles = a.profiles.split(",")
    if a.smoke:
        a.shapes, a.tokens, a.seq, a.reps, a.model_reps = ["smoke"], 256, 64, 2, 1
        world = a.world or 2
    else:
        n = torch.cuda.device_count()
        if n == 0:
            print("bench_tp: no CUDA device (use --smoke for the CPU code path)")
            return 2
        world = a.world or min(2, n)
    outdir = a.out or os.environ.get("OUT") or "."
    os.makedirs(outdir, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        import torch.multiprocessing as mp

        mp.start_processes(_rank_main, args=(world, a, os.path.join(d, "store"), outdir), nprocs=world, join=True, start_method="spawn")
    with open(os.path.join(outdir, "bench_tp.json")) as f:
        rec = json.load(f)
    print(report(rec))
    if world < 2:
        print("only one GPU: p = 2 not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
