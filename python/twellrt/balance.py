"""Shard balancing for tensor-parallel TwELL layers: count how often each neuron fires over a
calibration batch, then choose which neurons each rank holds so that every rank gets about the
same number of active entries (the fused kernel's work) and its hot neurons are spread over its
tiles (fewer row-tiles overflow the TwELL slots).

    with twellrt.balance.ActivityCounter(model) as counter:      # hooks every twellrt MLP
        model(calibration_batch)
    layouts = {name: twellrt.balance.balanced_layout(c, world=2) for name, c in counter.counts.items()}
    twellrt.tensor_parallel_mlps(model, layouts=layouts)          # each rank keeps its shard

    with twellrt.balance.ActivityCounter(model, keep_rows=4096) as counter:   # + which fire together
        model(calibration_batch)
    layouts = {name: twellrt.balance.balanced_layout(c, world=2, sample=counter.sample[name])
               for name, c in counter.counts.items()}                 # overflowing row-tiles costed

    python -m twellrt.balance --counts counts.pt --world 2 --out layouts.pt   # the same, offline
    python -m twellrt.balance --demo                                          # skewed synthetic data

A layout (see twellrt.parallel) only reorders neurons, which changes nothing mathematically:
rows of Wg and Wu and columns of down_proj move together, so every gate value and product is the
same and y sums the same terms (in another order: equal within the dtype's rounding)."""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from . import ops
from .modules import TwELLGatedMLP, TwELLMLP
from .parallel import _TensorParallel, check_layout, contiguous_layout, shard_weights, shard_width

__all__ = [
    "ActivityCounter",
    "balanced_layout",
    "shard_loads",
    "imbalance",
    "layout_report",
    "layout_cost",
    "permuted_copy",
]


# ---------------------------------------------------------------------------------------------
# counting
# ---------------------------------------------------------------------------------------------


def _decode(packed: torch.Tensor, T: int, C: int):
    """(counts [M, G], stored columns [M, G, W-1] int64, stored mask, overflow mask [M, G]) of a
    packed TwELL tensor: the library's word layout (word 0 the true count, then value<<16 | col)."""
    M = packed.shape[0]
    W = T // C
    p = packed.view(M, -1, W)
    cnt = p[..., 0].long()
    cols = (p[..., 1:] & 0xFFFF).long()
    stored = torch.arange(W - 1, device=p.device).view(1, 1, -1) < cnt.clamp(max=W - 1).unsqueeze(-1)
    return cnt, cols, stored, cnt > W - 1


class _Rec:
    def __init__(self, N, G, neurons, keep_rows):
        self.N, self.G = N, G
        self.neurons = neurons  # None, or local column -> global neuron (TP shard)
        self.counts = torch.zeros(N, dtype=torch.int64)
        self.overflow = torch.zeros(G, dtype=torch.int64)
        self.tokens = 0
        self.keep_rows = keep_rows
        self.rows, self.cols = [], []


class ActivityCounter:
    """Context manager that counts, for every twellrt MLP in `model` (TwELLGatedMLP, TwELLMLP,
    TensorParallelGatedMLP, TensorParallelMLP; or `model` itself), how many tokens fire each
    neuron during the forwards run inside it. Counts come from the packed TwELL tensor of the
    module's own gate (one extra gate-pack per layer and forward: a calibration tool, not for
    production runs); row-tiles that overflow the slots (whose entries are not all stored) are recounted from
    relu(x · Wgᵀ) > 0 on those rows and tiles, so counts are exact up to the sign of values
    within rounding of zero.

    After the block: `counts[name]` int64 [N] per module name (global neuron indices for a
    tensor-parallel shard: call `all_reduce()` to sum the shards), `tokens[name]`,
    `overflow[name]` (overflowed row-tiles per tile of the module as it is laid out now),
    `gated[name]` and, with keep_rows > 0, `sample[name]` = (rows, cols) int64: the active
    (token, neuron) pairs of the first keep_rows tokens, for the cost of overflowing row-tiles
    (balanced_layout, layout_cost, layout_report)."""

    def __init__(self, model: nn.Module, keep_rows: int = 0):
        self.model = model
        self.keep_rows = int(keep_rows)
        self._recs: dict = {}
        self._hooks = []

    def _targets(self):
        tp_locals = set()
        out = []
        for name, m in self.model.named_modules():
            if isinstance(m, _TensorParallel):
                tp_locals.add(id(m.local))
                out.append((name, m.local, m.gated, m.intermediate_size, m.neurons))
            elif isinstance(m, (TwELLGatedMLP, TwELLMLP)) and id(m) not in tp_locals:
                gated = isinstance(m, TwELLGatedMLP)
                N = (m.gate_proj if gated else m.up_proj).weight.shape[0]
                out.append((name, m, gated, N, None))
        return out

    def __enter__(self):
        for name, m, gated, N, neurons in self._targets():
            w = (m.gate_proj if gated else m.up_proj).weight
            rec = _Rec(N, w.shape[0] // m.T, None if neurons is None else neurons.cpu(), self.keep_rows)
            rec.gated = gated
            self._recs[name] = rec
            self._hooks.append(m.register_forward_pre_hook(self._hook(rec, gated)))
        if not self._recs:
            raise ValueError("twellrt.balance.ActivityCounter: no twellrt MLP found in the model")
        return self

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()
        self._hooks = []
        return False

    def _hook(self, rec: _Rec, gated: bool):
        def hook(mod, args):
            with torch.no_grad():
                self._count(rec, mod, args[0], gated)

        return hook

    @staticmethod
    def _count(rec: _Rec, mod, x: torch.Tensor, gated: bool):
        w = (mod.gate_proj if gated else mod.up_proj).weight.detach()
        x2 = x.detach().reshape(-1, x.shape[-1]).contiguous()
        M, T = x2.shape[0], mod.T
        packed = ops.gate_pack(x2, w, T, mod.C, gated)
        cnt, cols, stored, over = _decode(packed, T, mod.C)
        ok = stored & ~over.unsqueeze(-1)
        n_local = w.shape[0]
        local = torch.bincount(cols[ok], minlength=n_local)
        keep = max(0, min(M, rec.keep_rows - rec.tokens))
        rows_s, cols_s = [], []
        if keep:
            r = torch.arange(M, device=x2.device).view(-1, 1, 1).expand_as(cols)
            sel = ok & (r < keep)
            rows_s.append(r[sel])
            cols_s.append(cols[sel])
        om, ot = over.nonzero(as_tuple=True)
        rec.overflow += torch.bincount(ot, minlength=rec.G).cpu()
        for t in torch.unique(ot).tolist():  # recount overflowed row-tiles densely
            rows = om[ot == t]
            act = (x2[rows].float() @ w[t * T:(t + 1) * T].float().T) > 0
            local[t * T:(t + 1) * T] += act.sum(0)
            if keep:
                rr, cc = act.nonzero(as_tuple=True)
                rr = rows[rr]
                sel = rr < keep
                rows_s.append(rr[sel])
                cols_s.append(cc[sel] + t * T)
        local = local.cpu()
        if rec.neurons is None:
            rec.counts += local
        else:
            real = rec.neurons >= 0
            rec.counts.index_add_(0, rec.neurons[real], local[real])
        if keep:
            rr, cc = torch.cat(rows_s).cpu(), torch.cat(cols_s).cpu()
            if rec.neurons is not None:
                cc = rec.neurons[cc]
            rec.rows.append(rr + rec.tokens)
            rec.cols.append(cc)
        rec.tokens += M

    @property
    def counts(self) -> dict:
        return {k: r.counts for k, r in self._recs.items()}

    @property
    def tokens(self) -> dict:
        return {k: r.tokens for k, r in self._recs.items()}

    @property
    def overflow(self) -> dict:
        return {k: r.overflow for k, r in self._recs.items()}

    @property
    def gated(self) -> dict:
        return {k: r.gated for k, r in self._recs.items()}

    @property
    def sample(self) -> dict:
        out = {}
        for k, r in self._recs.items():
            if r.rows:
                out[k] = (torch.cat(r.rows), torch.cat(r.cols))
        return out

    def all_reduce(self, group=None) -> None:
        """Sums the counts of tensor-parallel shards over `group` (every rank holds disjoint
        neurons of the same tokens) and joins their samples, so every rank holds the full layer's;
        full modules are left alone. Collective: every rank calls it."""
        for r in self._recs.values():
            if r.neurons is not None:
                dev = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
                c = r.counts.to(dev)
                dist.all_reduce(c, group=group)
                r.counts = c.cpu()
                if self.keep_rows:
                    mine = (torch.cat(r.rows), torch.cat(r.cols)) if r.rows else None
                    parts = [None] * dist.get_world_size(group)
                    dist.all_gather_object(parts, mine, group=group)
                    parts = [q for q in parts if q is not None]
                    r.rows = [q[0] for q in parts]
                    r.cols = [q[1] for q in parts]

    def save(self, path: str) -> None:
        """torch.save of {"counts": {name: [N]}, "tokens": {name: M}, "gated": {name: bool},
        "sample": {name: (rows, cols)}} for `python -m twellrt.balance`."""
        torch.save({"counts": self.counts, "tokens": self.tokens, "gated": self.gated, "sample": self.sample}, path)


# ---------------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------------


def _cost_weight(T: int, gated: bool, recompute: Optional[float]) -> float:
    """Cost of one overflowing row-tile beyond its entries, in entries: recompute · T."""
    r = (0.5 if gated else 1.0) if recompute is None else float(recompute)
    if r < 0:
        raise ValueError(f"twellrt.balance: recompute must be >= 0, got {recompute}")
    return r * T


def _sample_scale(counts: torch.Tensor, sample) -> float:
    """Calibration entries per sampled entry: scales what the sample shows to the counts' size."""
    n = sample[0].numel()
    return float(counts.sum()) / n if n else 0.0


def _dense_threshold(world: int, n_local: int, gated: bool, dense_rows) -> float:
    """Active neurons (whole layer) above which a sampled row counts as dense: by default, for
    gated layers, the GPU heavy-row route's rule (more than max(n/32, 64) active values in a
    shard of n neurons; docs/DESIGN.md) applied to an even split; no limit for non-gated ones."""
    if dense_rows is not None:
        return float(dense_rows)
    return float(world * max(n_local // 32, 64)) if gated else float("inf")


def _sparse_rows(sample, threshold: float):
    """The sample without its dense rows (more than `threshold` active neurons)."""
    rows, cols = sample
    if threshold == float("inf") or rows.numel() == 0:
        return rows, cols
    _, inv, cnt = torch.unique(rows, return_inverse=True, return_counts=True)
    keep = cnt[inv] <= threshold
    return rows[keep], cols[keep]


def _tile_overflow(sample, layout: torch.Tensor, T: int, C: int) -> torch.Tensor:
    """Overflowing row-tiles of the sample under `layout`, per global tile [world · n_local / T]
    (tile g of rank g // (n_local / T)): row-tiles holding more than T/C - 1 active neurons."""
    rows, cols = sample
    world, n_local = layout.shape
    G = world * n_local // T
    flat = layout.to("cpu").flatten()
    real = flat >= 0
    pos = torch.full((int(flat.max()) + 1 if real.any() else 1,), -1, dtype=torch.int64)
    pos[flat[real]] = torch.arange(flat.numel())[real]
    tile = pos[cols.to("cpu").long()] // T
    u, cnt = torch.unique(rows.to("cpu").long() * G + tile, return_counts=True)
    return torch.bincount(u[cnt > T // C - 1] % G, minlength=G)


def layout_cost(counts: torch.Tensor, layout: torch.Tensor, sample, T: int = 256, C: int = 8,
                gated: bool = True, recompute: Optional[float] = None, dense_rows: Optional[float] = None) -> dict:
    """The modelled work per rank of `layout`, counting overflowing row-tiles at their real cost.

    Unit: one stored entry's work (gated: the up and down products of one active neuron, 2K
    multiply-adds; non-gated: the down product, K). A row-tile (one token, T neurons) with c
    active neurons costs
        c                   when c <= S = T/C - 1 (its entries are stored and computed sparsely),
        c + recompute · T   when c > S (it overflows and is recomputed exactly: the packing product
                            for all T neurons of the tile, then up/down for the c active ones);
    recompute = the packing product's K multiply-adds per neuron in entries: 1/2 gated, 1 non-gated
    (a kernel that also computes up/down densely over the tile would be 3/2 gated). So a rank
    costs  entries + recompute · T · (its overflowing row-tiles).  The gate-pack GEMM (n_local · K
    per token) and the all-reduce are the same on every rank and not counted. Neither are the
    overflowing row-tiles of dense rows (more than `dense_rows` active neurons in the layer;
    default for gated layers world · max(n_local/32, 64), none for non-gated ones): on GPUs the
    gated plan computes such rows apart with dense GEMMs (docs/DESIGN.md, heavy rows), the same
    work on every rank whatever the layout. Pass float("inf") to count every row (the CPU
    backend and non-gated plans recompute dense rows tile by tile too).

    Entries come from `counts` (exact over the calibration tokens); overflowing row-tiles need to
    know which neurons fire together, from `sample` = (rows, cols) of active pairs
    (ActivityCounter.sample), counted on it and scaled by counts.sum() / sampled pairs.
    Returns {"entries", "overflow_row_tiles" (scaled), "cost"} per rank (lists) and
    "cost_imbalance" (max ÷ mean cost)."""
    layout = layout.to("cpu")
    entries = shard_loads(counts, layout)
    thr = _dense_threshold(layout.shape[0], layout.shape[1], gated, dense_rows)
    per_tile = _tile_overflow(_sparse_rows(sample, thr), layout, T, C).double()
    ovf = per_tile.view(layout.shape[0], -1).sum(1) * _sample_scale(counts, sample)
    cost = entries + _cost_weight(T, gated, recompute) * ovf
    m = cost.mean().item()
    return {
        "entries": entries.tolist(),
        "overflow_row_tiles": ovf.tolist(),
        "cost": cost.tolist(),
        "cost_imbalance": cost.max().item() / m if m > 0 else 1.0,
    }


def balanced_layout(counts: torch.Tensor, world: int, T: int = 256, pad: bool = False, sample=None,
                    C: int = 8, gated: bool = True, recompute: Optional[float] = None,
                    dense_rows: Optional[float] = None) -> torch.Tensor:
    """A layout [world, n_local] (see twellrt.parallel) that balances the work of `counts`
    (active entries per neuron, [N]) across ranks and, inside each rank, across its tiles of T
    neurons; with `sample` ((rows, cols) of active pairs, ActivityCounter.sample) the work is
    layout_cost's, overflowing row-tiles included (C, gated, recompute, dense_rows as there).

    Greedy longest-processing-time with capacities: neurons in decreasing count (ties: lower
    index) each go where the cost after placing it is least. Placing neuron n in tile g costs its
    count plus recompute · T · (scale) for every sampled row in which n fires and g then holds
    S + 1 active neurons (a row-tile that starts to overflow; one already overflowing costs
    nothing more). The rank is the one whose load would be least (ties: lower rank), and inside
    it the tile that adds least (ties: the least loaded tile, then the lower index). Each rank
    holds N / world real neurons (±1), so padding is spread evenly too.

    Without a sample every placement costs the count alone: plain LPT, which keeps every rank
    within one neuron's count of the least loaded as long as the slots do not run out before the
    hot neurons are placed (the case for activity profiles like twellrt.activity's: dead and cold
    neurons come last), and spreads hot neurons over different tiles, which keeps row-tiles under
    the slots more often. With a sample, neurons that fire together in numbers a tile's slots
    cannot hold anyway are gathered into tiles that overflow already rather than making every
    tile overflow, and the ranks' overflow costs are balanced with their entries (dense rows left
    out, as layout_cost says: on GPUs their cost does not depend on the layout). Inside a tile
    neurons keep ascending index; padding (-1) fills what is left. Deterministic."""
    c = counts.detach().to("cpu", torch.float64).flatten()
    N = c.numel()
    n_local = shard_width(N, world, T, pad)
    tps = n_local // T
    G = world * tps
    S = T // C - 1
    order = torch.argsort(-c, stable=True).tolist()
    cl = c.tolist()
    # sampled rows per neuron (CSR over the sample's distinct rows) and, per sampled row and
    # global tile, the active neurons placed so far
    ptr = rows_of = grid = None
    lam = 0.0
    if sample is not None and sample[0].numel():
        lam = _cost_weight(T, gated, recompute) * _sample_scale(c, sample)
        sample = _sparse_rows(sample, _dense_threshold(world, n_local, gated, dense_rows))
    if sample is not None and sample[0].numel():
        srows, scols = sample[0].to("cpu").long(), sample[1].to("cpu").long()
        _, rid = torch.unique(srows, return_inverse=True)
        by = torch.argsort(scols, stable=True)
        rows_of = rid[by]
        ptr = torch.zeros(N + 1, dtype=torch.int64)
        ptr[1:] = torch.cumsum(torch.bincount(scols, minlength=N), 0)
        ptr = ptr.tolist()
        grid = torch.zeros(int(rid.max()) + 1, G, dtype=torch.int32)
    # real neurons per rank: N / world rounded, so padding is spread evenly too (without this,
    # neurons with noisy small counts pile up where the load looks lowest)
    shard_free = [N // world + (1 if r < N % world else 0) for r in range(world)]
    load = [0.0] * world
    tile_load = [0.0] * G
    tiles = [[] for _ in range(G)]
    zeros = [0] * G
    for n in order:
        if ptr is not None and ptr[n + 1] > ptr[n]:
            rn = rows_of[ptr[n]:ptr[n + 1]]
            new = (grid[rn] == S).sum(0).tolist()  # sampled rows that would start to overflow, per tile
        else:
            rn, new = None, zeros
        best = None
        for s in range(world):
            if not shard_free[s]:
                continue
            lo = s * tps
            g = min((t for t in range(lo, lo + tps) if len(tiles[t]) < T), key=lambda t: (new[t], tile_load[t], t))
            key = (load[s] + cl[n] + lam * new[g], s)
            if best is None or key < best[0]:
                best = (key, s, g)
        _, s, g = best
        add = cl[n] + lam * new[g]
        tiles[g].append(n)
        tile_load[g] += add
        load[s] += add
        shard_free[s] -= 1
        if rn is not None:
            grid[rn, g] += 1
    out = torch.full((world, n_local), -1, dtype=torch.int64)
    for s in range(world):
        for t in range(tps):
            m = sorted(tiles[s * tps + t])
            out[s, t * T:t * T + len(m)] = torch.tensor(m, dtype=torch.int64)
    return check_layout(out, N, world, T)


def shard_loads(counts: torch.Tensor, layout: torch.Tensor) -> torch.Tensor:
    """Active entries per rank [world] (float64) for per-neuron `counts` under `layout`."""
    c = torch.cat([counts.detach().to("cpu", torch.float64).flatten(), torch.zeros(1, dtype=torch.float64)])
    return c[layout.to("cpu")].sum(1)  # index -1 picks the appended 0 (padding)


def imbalance(counts: torch.Tensor, layout: torch.Tensor) -> float:
    """max ÷ mean active entries per rank (1.0 = perfectly balanced)."""
    s = shard_loads(counts, layout)
    m = s.mean().item()
    return s.max().item() / m if m > 0 else 1.0


def layout_report(counts: torch.Tensor, layout: torch.Tensor, T: int = 256, C: int = 8, sample=None,
                  gated: bool = True, dense_rows: Optional[float] = None) -> dict:
    """Per-rank active entries and imbalance of `layout`; with a sample (rows, cols) of active
    (token, neuron) pairs (ActivityCounter.sample), also the sample's row-tiles per rank whose
    count exceeds the TwELL slots (T/C - 1) under that layout (dense rows included) and their
    imbalance, and layout_cost's modelled cost per rank ("cost", "cost_imbalance")."""
    layout = layout.to("cpu")
    loads = shard_loads(counts, layout)
    rep = {"active": loads.tolist(), "imbalance": imbalance(counts, layout)}
    if sample is not None:
        rows, cols = sample
        world, n_local = layout.shape
        per = _tile_overflow(sample, layout, T, C).view(world, -1).sum(1).double()
        rep["overflow_row_tiles"] = per.tolist()
        rep["overflow_imbalance"] = (per.max() / per.mean()).item() if per.sum() > 0 else 1.0
        pos = torch.empty(counts.numel(), dtype=torch.int64)
        flat = layout.flatten()
        real = flat >= 0
        pos[flat[real]] = torch.arange(flat.numel())[real]
        rep["sample_active"] = torch.bincount(pos[cols] // n_local, minlength=world).tolist()
        cost = layout_cost(counts, layout, sample, T, C, gated, dense_rows=dense_rows)
        rep["cost"], rep["cost_imbalance"] = cost["cost"], cost["cost_imbalance"]
    return rep


def permuted_copy(module, perm: torch.Tensor):
    """A TwELLGatedMLP (or TwELLMLP) equal to `module` with its neurons reordered: neuron j of the
    copy is neuron perm[j] of the original (rows of gate/up, columns of down). The same function
    (see the module docstring of twellrt.balance)."""
    gated = isinstance(module, TwELLGatedMLP)
    w = (module.gate_proj if gated else module.up_proj).weight
    N = w.shape[0]
    perm = check_layout(perm.view(1, -1), N, 1, module.T)[0]
    if gated:
        new = TwELLGatedMLP(
            w.shape[1], N, module.l1_coef, module.T, module.C, module.path, module.train_path, w.device, w.dtype
        )
    else:
        new = TwELLMLP(w.shape[1], N, module.T, module.C, module.path, w.device, w.dtype)
    new.load_state_dict(shard_weights(module.state_dict(), perm, gated=gated))
    return new


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------


def _table(name, counts, world, T, C, pad, sample=None, held=None, probs=None, gated=True):
    """The contiguous and the balanced layout (cost-modelled when there is a sample; then also
    the counts-only one, "counts_only", for comparison), each judged by layout_report."""
    lays = [("contiguous", contiguous_layout(counts.numel(), world, T, pad))]
    if sample is not None:
        lays.append(("counts_only", balanced_layout(counts, world, T, pad)))
    after = balanced_layout(counts, world, T, pad, sample, C, gated)
    lays.append(("balanced", after))
    rows = {}
    for tag, lay in lays:
        r = layout_report(counts, lay, T, C, sample, gated)
        if held is not None:  # the same layout judged on held-out data
            hc, hs = held
            r["held_out"] = layout_report(hc, lay, T, C, hs, gated)
        if probs is not None:  # and on the true firing probabilities (no sampling noise)
            r["expected_imbalance"] = imbalance(probs, lay)
        rows[tag] = r
    return after, rows


def _fmt(r):
    s = f"imbalance {r['imbalance']:.3f}"
    if "overflow_imbalance" in r:
        s += f", overflow row-tiles {'/'.join(f'{v:.0f}' for v in r['overflow_row_tiles'])} ({r['overflow_imbalance']:.2f})"
    if "cost_imbalance" in r:
        s += f", cost {'/'.join(f'{v:.0f}' for v in r['cost'])} ({r['cost_imbalance']:.3f})"
    return s


def demo(K=64, Ns=(5632, 11008), world=2, tokens=4096, mean=29.0, T=256, C=8, seed=0, device="cpu") -> dict:
    """Synthetic layers of each profile (twellrt.activity): counts over `tokens` calibration
    tokens with ActivityCounter, a balanced layout from them, and both layouts judged on a
    held-out batch of the same size (sequences of 2048 tokens whose first token is dense, see
    synthetic_inputs). K only sets the GEMM cost: activity does not depend on it."""
    from .activity import PROFILES, firing_probs, layer_probs, synthetic_inputs, synthetic_layer

    out = {}
    for N in Ns:
        pad = (N // world) % T != 0 or N % world != 0
        for prof in PROFILES:
            probs = firing_probs(N, mean, prof, seed)
            sd = synthetic_layer(K, N, probs, seed, device=device)
            m = TwELLGatedMLP(K, N, T=T, C=C, device=device)
            m.load_state_dict(sd)
            probs = layer_probs(sd)  # what the weights really give (for the expected imbalance)
            res = []
            for s in (1, 2):
                with ActivityCounter(m, keep_rows=tokens) as ctr, torch.no_grad():
                    m(synthetic_inputs(tokens, K, seed + s, device=device, bos_every=2048))
                res.append((ctr.counts[""], ctr.sample[""]))
            _, rows = _table(f"N={N} {prof}", res[0][0], world, T, C, pad, res[0][1], res[1], probs)
            out[f"N={N} {prof}"] = rows
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Balanced neuron layouts for tensor-parallel TwELL layers")
    ap.add_argument("--counts", help="torch.save file of ActivityCounter.save (or {name: counts})")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--C", type=int, default=8)
    ap.add_argument("--pad", action="store_true", help="pad shards to a multiple of T (N/world not one)")
    ap.add_argument("--out", default="", help="torch.save {name: layout} here")
    ap.add_argument("--demo", action="store_true", help="synthetic skewed layers: imbalance before/after")
    ap.add_argument("--K", type=int, default=64, help="--demo: model width (does not change activity)")
    ap.add_argument("--tokens", type=int, default=8192, help="--demo: calibration and held-out tokens")
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    if a.demo:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        res = demo(K=a.K, world=a.world, tokens=a.tokens, T=a.T, C=a.C, device=dev)
        print(f"world {a.world}: layouts from {a.tokens} calibration tokens; imbalance = max ÷ mean active entries per "
              f"rank on the calibration tokens, on {a.tokens} held-out tokens, and expected from the weights' firing probabilities (no sampling noise)")
        for k, rows in res.items():
            for tag, r in rows.items():
                print(f"  {k:18s} {tag:11s} calibration {_fmt(r)} | held-out {_fmt(r['held_out'])} | "
                      f"expected {r['expected_imbalance']:.3f}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
        return 0
    if not a.counts:
        ap.error("give --counts FILE or --demo")
    data = torch.load(a.counts)
    counts = data["counts"] if isinstance(data, dict) and "counts" in data else data
    samples = data.get("sample", {}) if isinstance(data, dict) and "counts" in data else {}
    gated = data.get("gated", {}) if isinstance(data, dict) and "counts" in data else {}
    layouts, report = {}, {}
    for name, c in counts.items():
        N = c.numel()
        lay, rows = _table(name, c, a.world, a.T, a.C, a.pad, samples.get(name), gated=gated.get(name, True))
        layouts[name] = lay
        report[name] = rows
        print(f"{name or '(model)'}: N={N}  contiguous {_fmt(rows['contiguous'])}  ->  balanced {_fmt(rows['balanced'])}")
    if a.out:
        torch.save(layouts, a.out)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
