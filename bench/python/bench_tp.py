"""Tensor-parallel scaling benchmark: one feed-forward layer and a whole Llama-style model on one
GPU (p = 1) and split over p GPUs (NCCL through torch.distributed), twellrt TP beside dense TP
(the same shards' weights in PyTorch's matmuls, the same all-reduce), at prefill and at decode.

    PYTHONPATH=python python bench/python/bench_tp.py [--world P] [--out DIR]   # a process per GPU
    PYTHONPATH=python python bench/python/bench_tp.py --smoke                   # the CPU code path

Shapes (hidden, intermediate, layers, heads): 7b (4096, 11008, 32, 32), 70b (8192, 28672, 80, 64),
1.5b (2048, 5632, 28, 16). The model part builds the full model on every rank (a checkpoint
load) and then shards it, so 70b runs --model-layers of its layers (default 8). Widths that are
not a multiple of p·T (11008 over 2, 4, 8) pad every shard with zero neurons. bf16.

Per layer, for each activity profile (twellrt.activity: uniform, skewed, clustered):
  prefill  x of --tokens tokens (16384: sequences of --seq whose first token fires ~25% of the
           live neurons and overflows, ~29 active per other token), L2 flushed before every
           repetition, ranks started together; p = 1 on GPU 0; p = P with the contiguous layout
           and the balanced one (twellrt.balance: counts and a sample of a separate calibration
           batch, counted on the sharded layer and joined over ranks, overflowing row-tiles
           costed); dense p = 1 and p = P; the time is the slower rank's. The all-reduce's stream
           time (CUDA events around it, waiting for the other ranks included) is recorded too.
  decode   batches --batches (1 … 64), non-BOS rows, in CUDA graphs: every shard reserved
           (twell_plan_reserve), warmed up eagerly, one forward captured with its all-reduce and
           replayed (--decode-profiles only, balanced layout).
Model (the weights of bench_model.py with each profile's firing probabilities; attention
split by heads, column-parallel q/k/v and row-parallel o_proj with its all-reduce, in this file):
  prefill  the same tokens, logits of the last position (eager; two all-reduces per layer);
  decode   one new token per sequence attending over a static KV cache of --ctx positions
           (random keys and values: the time, not the text, is measured; the MLPs' activity on
           these steps is recorded), a whole step captured in one CUDA graph per batch.
On the CPU (--smoke: gloo, tiny shapes) the same code runs eagerly, without graphs.

Output: a table on stdout; DIR/bench_tp.json (DIR: --out, else $OUT, else .) holds "meta" and
"records": one per measurement, {"what": layer|model, "phase": prefill|decode, "shape",
"profile", "rows" (tokens, or the decode batch), "impl": twellrt|dense, "p", "layout"
(contiguous|balanced, TP twellrt only), "ms" (median; the slowest rank), "graph", ...}.
--budget-s stops starting new model runs once that much time has passed."""

from __future__ import annotations

import argparse
import gc
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
    "70b": (8192, 28672, 80, 64),
    "smoke": (128, 1024, 2, 4),  # --smoke (CPU, gloo)
}
T_TILE = 256
MEAN_ACTIVE = 29.0


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
        self.ar = []  # (start, end) of the all-reduces of the running repetition
        self.ar_on = False

    def sync(self, ranks=True):
        if ranks and self.world > 1:
            dist.all_reduce(self.tiny)
        if self.cuda:
            torch.cuda.synchronize(self.dev)

    def run(self, fn, reps, warmup=2, flush=True, ranks=True):
        """(median ms per call of fn, median ms of the all-reduces timed inside it per call)."""
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
        """dist.all_reduce, its stream time recorded while a timed eager repetition runs (a graph
        replay records nothing: its collectives were captured)."""
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

    def graphed(self, fn, warmup=3):
        """fn captured in a CUDA graph (after eager warm-up calls: plans, kernels, the NCCL
        communicator exist before the capture) → (replay, True); on the CPU (fn, False)."""
        for _ in range(warmup):
            fn()
        if not self.cuda:
            return fn, False
        torch.cuda.synchronize(self.dev)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize(self.dev)
        return g.replay, True


def _gather(obj, world):
    out = [None] * world
    dist.all_gather_object(out, obj)
    return out


def _empty(cuda):
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


class Records(list):
    def add(self, what, phase, shape, profile, rows, impl, p, layout=None, **extra):
        r = dict(what=what, phase=phase, shape=shape, profile=profile, rows=rows, impl=impl, p=p, layout=layout)
        r.update(extra)
        self.append(r)
        return r


# ------------------------------------------------------------------------------------------------
# one layer
# ------------------------------------------------------------------------------------------------


class DenseShard(nn.Module):
    """PyTorch's gated MLP on a shard's weights (the dense baseline), + all-reduce when world > 1."""

    def __init__(self, sd, clock, world):
        super().__init__()
        self.wg, self.wu, self.wd = sd["gate_proj.weight"], sd["up_proj.weight"], sd["down_proj.weight"]
        self.clock, self.world = clock, world

    def forward(self, x):
        y = F.linear(torch.relu(F.linear(x, self.wg)) * F.linear(x, self.wu), self.wd)
        return self.clock.all_reduce(y) if self.world > 1 else y


def _pad_needed(N, world):
    return N % world != 0 or (N // world) % T_TILE != 0


def _nnz(p, scale=1.0):
    """Active neurons per row a shard of p reserves for at decode (twice the mean, rounded up)."""
    return max(8.0, 2.0 * MEAN_ACTIVE * scale / p)


def _balanced(counter, world, pad, gated=True):
    """Layouts by module name from an ActivityCounter (counts and sample, joined over ranks)."""
    from twellrt import balance

    return {
        n: balance.balanced_layout(c, world, T_TILE, pad, counter.sample.get(n), gated=gated)
        for n, c in counter.counts.items()
    }


def _decode_layer(a, recs, shape, profile, K, mods, rank, world, dev, clock):
    """Decode batches in graphs for each (impl, p, layout, module) of `mods` (p = 1 ones on rank 0
    only, while the others wait)."""
    from twellrt import activity

    maxb = max(a.batches)
    for impl, p, layout, m in mods:
        if p == 1 and rank != 0:
            continue
        if impl == "twellrt":
            m.reserve(maxb, _nnz(p))
        for B in a.batches:
            x = activity.synthetic_inputs(B, K, 40 + B, device=dev)
            with torch.no_grad():
                fn, graph = clock.graphed(lambda: m(x))
                ms = clock.run(fn, a.decode_reps, ranks=p > 1)[0]
            ms = max(_gather(ms, world)) if p > 1 else ms
            recs.add("layer", "decode", shape, profile, B, impl, p, layout, ms=ms, graph=graph)
            del fn
    clock.sync()


def layer_bench(a, recs, shape, profile, rank, world, dev, clock):
    import twellrt
    from twellrt import activity, balance

    K, N, _, _ = SHAPES[shape]
    M = a.tokens
    seed = 11
    first = profile == a.profiles[0]
    decode = profile in a.decode_profiles
    sd = activity.synthetic_layer(K, N, activity.firing_probs(N, MEAN_ACTIVE, profile, seed), seed, device=dev)
    x = activity.synthetic_inputs(M, K, 2, device=dev, bos_every=a.seq)
    xc = activity.synthetic_inputs(M, K, 3, device=dev, bos_every=a.seq)  # calibration batch
    base = dict(K=K, N=N)
    dec_mods = []
    with torch.no_grad():
        y1 = None
        if rank == 0:  # p = 1 on GPU 0 while the others wait
            full = twellrt.TwELLGatedMLP(K, N, device=dev)
            full.load_state_dict(sd)
            recs.add("layer", "prefill", shape, profile, M, "twellrt", 1, ms=clock.run(lambda: full(x), a.reps, ranks=False)[0], **base)
            y1 = full(x)
            dn = DenseShard(sd, clock, 1)
            if first:
                recs.add("layer", "prefill", shape, profile, M, "dense", 1, ms=clock.run(lambda: dn(x), a.reps, ranks=False)[0], **base)
            if decode:
                dec_mods += [("twellrt", 1, None, full), ("dense", 1, None, dn)]
        clock.sync()
        if world > 1:
            pad = _pad_needed(N, world)
            tp = twellrt.TensorParallelGatedMLP.from_full(sd, pad=pad, device=dev)
            with balance.ActivityCounter(tp, keep_rows=a.sample_rows) as ctr:
                tp(xc)
            ctr.all_reduce()
            counts, sample = ctr.counts[""], ctr.sample.get("")
            layouts = {"contiguous": tp.layout, "balanced": _balanced(ctr, world, pad)[""]}
            del tp
            for name, lay in layouts.items():
                tp = twellrt.TensorParallelGatedMLP.from_full(sd, layout=lay, pad=pad, device=dev)
                total, ar = clock.run(lambda: tp(x), a.reps)
                tp.reduce = "none"
                compute, _ = clock.run(lambda: tp(x), a.reps)
                tp.reduce = "all_reduce"
                with balance.ActivityCounter(tp) as cnt:
                    y2 = tp(x)
                g = _gather((total, ar, compute, int(cnt.counts[""].sum()), int(cnt.overflow[""].sum())), world)
                e = recs.add(
                    "layer", "prefill", shape, profile, M, "twellrt", world, name, ms=max(v[0] for v in g),
                    rank_ms=[v[0] for v in g], allreduce_ms=[v[1] for v in g], compute_ms=[v[2] for v in g],
                    active=[v[3] for v in g], overflow_row_tiles=[v[4] for v in g], **base,
                )
                e["allreduce_share"] = max(e["allreduce_ms"]) / e["ms"]
                e["compute_imbalance"] = max(e["compute_ms"]) / min(e["compute_ms"])
                e["active_imbalance"] = max(e["active"]) / statistics.mean(e["active"])
                if sample is not None:
                    e["modelled_cost_imbalance"] = balance.layout_cost(counts, lay, sample, T_TILE)["cost_imbalance"]
                if rank == 0:
                    e["rel_err_vs_p1"] = ((y2.float() - y1.float()).norm() / y1.float().norm()).item()
                if decode and name == "balanced":
                    dec_mods.append(("twellrt", world, name, tp))
                del y2
            ly = twellrt.parallel.contiguous_layout(N, world, T_TILE, pad)[rank]
            dn = DenseShard(twellrt.parallel.shard_weights(sd, ly), clock, world)
            if first:
                t, ar = clock.run(lambda: dn(x), a.reps)
                g = _gather((t, ar), world)
                recs.add("layer", "prefill", shape, profile, M, "dense", world, ms=max(v[0] for v in g),
                         allreduce_ms=[v[1] for v in g], **base)
                buf = torch.empty(M, K, dtype=torch.bfloat16, device=dev)
                t, _ = clock.run(lambda: dist.all_reduce(buf), a.reps)
                recs.add("layer", "allreduce", shape, profile, M, "nccl" if clock.cuda else "gloo", world, ms=max(_gather(t, world)), **base)
                del buf
            if decode:
                dec_mods.append(("dense", world, None, dn))
        if decode:
            _decode_layer(a, recs, shape, profile, K, dec_mods, rank, world, dev, clock)


# ------------------------------------------------------------------------------------------------
# a model
# ------------------------------------------------------------------------------------------------


class TPAttention(nn.Module):
    """A shard of bench_model's Attention: heads [rank·H/p, (rank+1)·H/p), o_proj row-parallel
    (world 1: the whole attention, no collective)."""

    def __init__(self, full, rank, world, clock):
        super().__init__()
        self.h, self.hd = full.h // world, full.hd
        lo, hi = rank * self.h * self.hd, (rank + 1) * self.h * self.hd
        self.wq = full.q_proj.weight[lo:hi].contiguous()
        self.wk = full.k_proj.weight[lo:hi].contiguous()
        self.wv = full.v_proj.weight[lo:hi].contiguous()
        self.wo = full.o_proj.weight[:, lo:hi].contiguous()
        self.clock, self.world = clock, world

    def _out(self, o, B, S):
        y = F.linear(o.transpose(1, 2).reshape(B, S, -1), self.wo)
        return self.clock.all_reduce(y) if self.world > 1 else y

    def _heads(self, t, B, S):
        return t.view(B, S, self.h, self.hd).transpose(1, 2)

    def forward(self, x, cos, sin):
        from bench_model import rope

        B, S, _ = x.shape
        q, k, v = (self._heads(F.linear(x, w), B, S) for w in (self.wq, self.wk, self.wv))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        return self._out(F.scaled_dot_product_attention(q, k, v, is_causal=True), B, S)

    def decode(self, x, cache, cos, sin):
        """x [B, 1, K] at position ctx, attending over cache = (k, v) [B, h, ctx, hd] (static;
        the new token's own key and value are not appended: the cost of one row)."""
        from bench_model import rope

        B = x.shape[0]
        q = rope(self._heads(F.linear(x, self.wq), B, 1), cos, sin)
        ck, cv = cache
        return self._out(F.scaled_dot_product_attention(q, ck[:B], cv[:B]), B, 1)

    def cache(self, B, ctx, dev, seed):
        g = torch.Generator(device=dev).manual_seed(seed)
        shape = (B, self.h, ctx, self.hd)
        return tuple(torch.randn(shape, generator=g, device=dev).to(torch.bfloat16) for _ in range(2))


class TPLayer(nn.Module):
    def __init__(self, full, attn, mlp):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = full.input_layernorm, full.post_attention_layernorm
        self.self_attn, self.mlp = attn, mlp

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))

    def decode(self, x, cache, cos, sin):
        x = x + self.self_attn.decode(self.input_layernorm(x), cache, cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


def prefill(model, layers, ids):
    """Logits of the last position after running every layer over all of ids."""
    cos, sin = model.rope_tables(ids.shape[1], ids.device)
    x = model.embed_tokens(ids)
    for lyr in layers:
        x = lyr(x, cos, sin)
    return model.lm_head(model.norm(x[:, -1]))


def decode_step(model, layers, caches, ids, cos, sin):
    """Logits [B, vocab] of one new token per sequence (ids [B, 1]) at position ctx."""
    x = model.embed_tokens(ids)
    for lyr, c in zip(layers, caches):
        x = lyr.decode(x, c, cos, sin)
    return model.lm_head(model.norm(x[:, -1]))


@torch.no_grad()
def init_weights_on(model, seed, dev):
    """bench_model.init_weights, drawn on the device (a 7B model in seconds)."""
    import bench_model as bm

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
    import bench_model as bm
    from twellrt.activity import firing_probs

    bm.calibrate(model, targets, ids, seed, probs=lambda i, N, target: firing_probs(N, target, profile, seed + 101 * i))


def _model_decode(a, recs, shape, profile, model, variants, rank, world, dev, clock):
    """One decode step of the whole model per batch, captured in a graph, for each variant
    (impl, p, layout, layers); the caches are made once per p for the largest batch."""
    from twellrt import balance
    import bench_model as bm

    maxb = max(a.model_batches)
    gen = torch.Generator().manual_seed(99)
    cos, sin = model.rope_tables(a.ctx + 1, dev)
    cos, sin = cos[a.ctx:a.ctx + 1], sin[a.ctx:a.ctx + 1]
    caches = {}
    for impl, p, layout, layers in variants:
        if p == 1 and rank != 0:
            continue
        if p not in caches:
            caches.clear()
            _empty(clock.cuda)
            caches[p] = [lyr.self_attn.cache(maxb, a.ctx, dev, 5 + i) for i, lyr in enumerate(layers)]
        cs = caches[p]
        targets = bm.layer_targets(len(layers))
        if impl == "twellrt":
            for lyr, t in zip(layers, targets):
                lyr.mlp.reserve(maxb, _nnz(p, t / MEAN_ACTIVE))
        for B in a.model_batches:
            ids = torch.randint(2, bm.VOCAB, (B, 1), generator=gen).to(dev)
            with torch.no_grad():
                fn, graph = clock.graphed(lambda: decode_step(model, layers, cs, ids, cos, sin))
                ms = clock.run(fn, a.decode_reps, flush=False, ranks=p > 1)[0]
            ms = max(_gather(ms, world)) if p > 1 else ms
            r = recs.add("model", "decode", shape, profile, B, impl, p, layout, ms=ms, graph=graph,
                         layers=len(layers), ctx=a.ctx)
            del fn
            if impl == "twellrt" and B == maxb:  # the activity these steps had (eagerly)
                with balance.ActivityCounter(nn.ModuleList(layers)) as ctr, torch.no_grad():
                    decode_step(model, layers, cs, ids, cos, sin)
                if p > 1:
                    ctr.all_reduce()
                r["active_per_token"] = statistics.mean(float(c.sum()) / B for c in ctr.counts.values())
    caches.clear()
    clock.sync()


def model_bench(a, recs, shape, profile, rank, world, dev, clock, first):
    import twellrt
    from twellrt import balance
    import bench_model as bm

    K, N, L, H = SHAPES[shape]
    L = min(L, a.model_layers.get(shape, L))
    extra = dict(layers=L, K=K, N=N)
    t0 = time.time()
    torch.manual_seed(0)
    model = bm.Model(K, N, L, H, dev)
    init_weights_on(model, 0, dev)
    gen = torch.Generator().manual_seed(7)
    cal = bm.make_ids(max(2, 8192 // a.seq), a.seq, gen, dev)
    count_ids = bm.make_ids(a.tokens // a.seq, a.seq, gen, dev)
    ids = bm.make_ids(a.tokens // a.seq, a.seq, gen, dev)
    decode = profile in a.decode_profiles
    with torch.no_grad():
        if rank == 0:
            calibrate_profile(model, bm.layer_targets(L), cal, 0, profile)
        if world > 1:  # every rank holds the same full model (a checkpoint)
            for p in model.parameters():
                dist.broadcast(p, 0)
        dense_mlps = [lyr.mlp for lyr in model.layers]
        twellrt.swap_mlps(model)
        tw_mlps = [lyr.mlp for lyr in model.layers]
        build_s = time.time() - t0
        full_layers = list(model.layers)
        dec = []
        if rank == 0:
            ms = clock.run(lambda: prefill(model, full_layers, ids), a.model_reps, flush=False, ranks=False)[0]
            recs.add("model", "prefill", shape, profile, a.tokens, "twellrt", 1, ms=ms, build_s=build_s, **extra)
            ref = prefill(model, full_layers, ids).float()
            at1 = [TPAttention(lyr.self_attn, 0, 1, clock) for lyr in full_layers]
            p1_tw = [TPLayer(lyr, at, m) for lyr, at, m in zip(full_layers, at1, tw_mlps)]
            p1_dn = [TPLayer(lyr, at, m) for lyr, at, m in zip(full_layers, at1, dense_mlps)]
            if first:
                ms = clock.run(lambda: prefill(model, p1_dn, ids), a.model_reps, flush=False, ranks=False)[0]
                recs.add("model", "prefill", shape, profile, a.tokens, "dense", 1, ms=ms, **extra)
            if decode:
                dec += [("twellrt", 1, None, p1_tw), ("dense", 1, None, p1_dn)]
        clock.sync()
        if world > 1:
            pad = _pad_needed(N, world)
            attn = [TPAttention(lyr.self_attn, rank, world, clock) for lyr in full_layers]

            def tp_layers(layouts):
                return [
                    TPLayer(lyr, at, twellrt.TensorParallelGatedMLP.from_full(m, layout=lay, pad=pad))
                    for lyr, at, m, lay in zip(full_layers, attn, tw_mlps, layouts)
                ]

            # counts and a sample on the sharded model (as a deployment that cannot hold the full
            # model would), joined over ranks, on other sequences than the timed ones
            layers = tp_layers([None] * L)
            with balance.ActivityCounter(nn.ModuleList(layers), keep_rows=a.sample_rows) as ctr:
                prefill(model, layers, count_ids)
            ctr.all_reduce()
            bal = _balanced(ctr, world, pad)
            counts = [ctr.counts[f"{i}.mlp"] for i in range(L)]
            for name in ("contiguous", "balanced"):
                if name == "balanced":
                    layers = None
                    _empty(clock.cuda)
                    layers = tp_layers([bal[f"{i}.mlp"] for i in range(L)])
                ms, ar = clock.run(lambda: prefill(model, layers, ids), a.model_reps, flush=False)
                loads = [float(balance.shard_loads(c, lyr.mlp.layout)[rank]) for c, lyr in zip(counts, layers)]
                g = _gather((ms, ar, loads), world)
                e = recs.add("model", "prefill", shape, profile, a.tokens, "twellrt", world, name,
                             ms=max(v[0] for v in g), allreduce_ms=[v[1] for v in g], **extra)
                e["allreduce_share"] = max(v[1] for v in g) / e["ms"]
                per_layer = [max(v[2][i] for v in g) / statistics.mean(v[2][i] for v in g) for i in range(L)]
                e["active_imbalance_mean"] = statistics.mean(per_layer)
                e["active_imbalance_max"] = max(per_layer)
                out = prefill(model, layers, ids).float()
                if rank == 0:
                    e["logits_rel_err_vs_p1"] = ((out - ref).norm() / ref.norm()).item()
            if decode:
                dec.append(("twellrt", world, "balanced", layers))
            if first or decode:
                ly = twellrt.parallel.contiguous_layout(N, world, T_TILE, pad)[rank]
                dl = [
                    TPLayer(lyr, at, DenseShard(twellrt.parallel.shard_weights(dm.state_dict(), ly), clock, world))
                    for lyr, at, dm in zip(full_layers, attn, dense_mlps)
                ]
                if first:
                    ms, ar = clock.run(lambda: prefill(model, dl, ids), a.model_reps, flush=False)
                    g = _gather((ms, ar), world)
                    recs.add("model", "prefill", shape, profile, a.tokens, "dense", world,
                             ms=max(v[0] for v in g), allreduce_ms=[v[1] for v in g], **extra)
                if decode:
                    dec.append(("dense", world, None, dl))
        if decode:
            _model_decode(a, recs, shape, profile, model, dec, rank, world, dev, clock)


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
    recs = Records()
    meta = {"world": world, "args": vars(a), "torch": torch.__version__, "twellrt": twellrt.version(), "skipped": []}
    if cuda:
        meta["gpus"] = _gather(torch.cuda.get_device_name(dev), world)
    clock = Clock(dev, world)
    # the shards' forward sums through twellrt.parallel._all_reduce: route it through the clock,
    # which records each collective's stream time during timed eager repetitions
    twellrt.parallel._all_reduce = clock.all_reduce
    path = os.path.join(outdir, "bench_tp.json")

    def dump():  # after every part, so a run cut short keeps what it measured
        meta["wall_s"] = time.time() - t_start
        if rank == 0:
            with open(path, "w") as f:
                json.dump({"meta": meta, "records": recs}, f, indent=1)

    def note(msg):
        if rank == 0:
            print(f"[{time.time() - t_start:6.1f}s] {msg}", flush=True)

    try:
        for shape in a.shapes if not a.no_layer else []:
            for prof in a.profiles:
                layer_bench(a, recs, shape, prof, rank, world, dev, clock)
                dump()
                _empty(cuda)
                note(f"layer {shape} {prof} done")
        for shape in a.shapes if not a.no_model else []:
            for i, prof in enumerate(a.profiles):
                if any(_gather(time.time() - t_start > a.budget_s, world)):
                    meta["skipped"].append(f"model {shape} {prof}: past --budget-s {a.budget_s}")
                    continue
                model_bench(a, recs, shape, prof, rank, world, dev, clock, first=i == 0)
                dump()
                _empty(cuda)
                note(f"model {shape} {prof} done")
    finally:
        dump()
        dist.destroy_process_group()


def _find(recs, **kw):
    for r in recs:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return None


def _ms(r, fmt="{:.3f}"):
    return "—" if r is None else fmt.format(r["ms"])


def report(data) -> str:
    """Tables of the records: twellrt against dense at p = P and each one's scaling efficiency
    t(p = 1) / (P · t(p = P))."""
    meta, recs = data["meta"], data["records"]
    P = meta["world"]
    gpus = ", ".join(sorted(set(meta.get("gpus", ["CPU (smoke)"]))))
    lines = [f"== tensor-parallel scaling, p = {P} vs 1, bf16, {gpus} =="]

    def eff(r1, rp):
        return "—" if r1 is None or rp is None else f"{r1['ms'] / (P * rp['ms']):.2f}"

    def ratio(a, b):
        return "—" if a is None or b is None else f"{b['ms'] / a['ms']:.2f}×"

    for what in ("layer", "model"):
        for phase in ("prefill", "decode"):
            rows = sorted({(r["shape"], r["profile"], r["rows"]) for r in recs if r["what"] == what and r["phase"] == phase},
                          key=lambda k: (k[0], k[1], k[2]))
            if not rows:
                continue
            lay = "balanced"
            lines.append(f"{what} {phase} (ms; twellrt p={P} with the {lay} layout; contiguous in brackets at prefill):")
            lines.append(f"| shape | profile | rows | twellrt p=1 | dense p=1 | twellrt p={P} | dense p={P} | twellrt/dense p={P} | scaling eff twellrt | dense |")
            lines.append("|---|---|---|---|---|---|---|---|---|---|")
            for shape, prof, n in rows:
                q = dict(what=what, phase=phase, shape=shape, rows=n)
                t1 = _find(recs, impl="twellrt", p=1, profile=prof, **q)
                tp = _find(recs, impl="twellrt", p=P, layout=lay, profile=prof, **q)
                tc = _find(recs, impl="twellrt", p=P, layout="contiguous", profile=prof, **q)
                d1 = _find(recs, impl="dense", p=1, profile=prof, **q) or _find(recs, impl="dense", p=1, **q)
                dp = _find(recs, impl="dense", p=P, profile=prof, **q) or _find(recs, impl="dense", p=P, **q)
                tps = _ms(tp) + (f" ({_ms(tc)})" if tc else "")
                lines.append(f"| {shape} | {prof} | {n} | {_ms(t1)} | {_ms(d1)} | {tps} | {_ms(dp)} | {ratio(tp, dp)} | {eff(t1, tp)} | {eff(d1, dp)} |")
    for s in meta["skipped"]:
        lines.append(f"skipped: {s}")
    lines.append(f"wall {meta['wall_s']:.0f} s")
    return "\n".join(lines)


def _ints(s):
    return [int(v) for v in s.split(",") if v]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="7b,70b")
    ap.add_argument("--profiles", default="skewed,clustered,uniform")
    ap.add_argument("--decode-profiles", default="skewed", help="profiles also measured at decode")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batches", default="1,2,4,8,16,32,64", help="decode batches per layer")
    ap.add_argument("--model-batches", default="1,8,64", help="decode batches of the whole model")
    ap.add_argument("--ctx", type=int, default=1024, help="KV-cache positions at model decode")
    ap.add_argument("--reps", type=int, default=10, help="repetitions per layer prefill timing")
    ap.add_argument("--decode-reps", type=int, default=50, help="graph replays per decode timing")
    ap.add_argument("--model-reps", type=int, default=3)
    ap.add_argument("--model-layers", default="70b:8", help="SHAPE:L,... caps a model's depth")
    ap.add_argument("--sample-rows", type=int, default=4096, help="calibration tokens sampled for the layout cost (0: counts only)")
    ap.add_argument("--no-model", action="store_true")
    ap.add_argument("--no-layer", action="store_true")
    ap.add_argument("--world", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no model run after this many seconds")
    ap.add_argument("--out", default="")
    ap.add_argument("--smoke", action="store_true", help="CPU, gloo, tiny shapes, no graphs: the code path only")
    a = ap.parse_args(argv)
    a.shapes, a.profiles, a.decode_profiles = a.shapes.split(","), a.profiles.split(","), a.decode_profiles.split(",")
    a.batches, a.model_batches = _ints(a.batches), _ints(a.model_batches)
    a.model_layers = {k: int(v) for k, v in (kv.split(":") for kv in a.model_layers.split(",") if kv)}
    if a.smoke:
        a.shapes, a.tokens, a.seq, a.reps, a.model_reps, a.decode_reps = ["smoke"], 256, 64, 2, 1, 2
        a.batches, a.model_batches, a.ctx, a.sample_rows = [1, 4], [1, 4], 32, 128
        a.profiles = a.profiles[:2]
        world = a.world or 2
    else:
        n = torch.cuda.device_count()
        if n == 0:
            print("bench_tp: no CUDA device (use --smoke for the CPU code path)")
            return 2
        world = a.world or n
    outdir = a.out or os.environ.get("OUT") or "."
    os.makedirs(outdir, exist_ok=True)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as d:
        mp.start_processes(_rank_main, args=(world, a, os.path.join(d, "store"), outdir), nprocs=world, join=True, start_method="spawn")
    with open(os.path.join(outdir, "bench_tp.json")) as f:
        data = json.load(f)
    print(report(data))
    if world < 2:
        print("one rank: p > 1 not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
