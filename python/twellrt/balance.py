"""Shard balancing for tensor-parallel TwELL layers: count how often each neuron fires over a
calibration batch, then choose which neurons each rank holds so that every rank gets about the
same number of active entries (the fused kernel's work) and its hot neurons are spread over its
tiles (fewer row-tiles overflow the TwELL slots).

    with twellrt.balance.ActivityCounter(model) as counter:      # hooks every twellrt MLP
        model(calibration_batch)
    layouts = {name: twellrt.balance.balanced_layout(c, world=2) for name, c in counter.counts.items()}
    twellrt.tensor_parallel_mlps(model, layouts=layouts)          # each rank keeps its shard

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
from .parallel import TensorParallelGatedMLP, check_layout, contiguous_layout, shard_weights, shard_width

__all__ = [
    "ActivityCounter",
    "balanced_layout",
    "shard_loads",
    "imbalance",
    "layout_report",
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
    TensorParallelGatedMLP; or `model` itself), how many tokens fire each neuron during the
    forwards run inside it. Counts come from the packed TwELL tensor of the module's own gate
    (one extra gate-pack per layer and forward: a calibration tool, not for production runs);
    row-tiles that overflow the slots (whose entries are not all stored) are recounted from
    relu(x · Wgᵀ) > 0 on those rows and tiles, so counts are exact up to the sign of values
    within rounding of zero.

    After the block: `counts[name]` int64 [N] per module name (global neuron indices for a
    tensor-parallel shard: call `all_reduce()` to sum the shards), `tokens[name]`,
    `overflow[name]` (overflowed row-tiles per tile of the module as it is laid out now) and,
    with keep_rows > 0, `sample[name]` = (rows, cols) int64: the active (token, neuron) pairs of
    the first keep_rows tokens, for layout_report's overflow estimate."""

    def __init__(self, model: nn.Module, keep_rows: int = 0):
        self.model = model
        self.keep_rows = int(keep_rows)
        self._recs: dict = {}
        self._hooks = []

    def _targets(self):
        tp_locals = set()
        out = []
        for name, m in self.model.named_modules():
            if isinstance(m, TensorParallelGatedMLP):
                tp_locals.add(id(m.local))
                out.append((name, m.local, True, m.intermediate_size, m.neurons))
            elif isinstance(m, (TwELLGatedMLP, TwELLMLP)) and id(m) not in tp_locals:
                gated = isinstance(m, TwELLGatedMLP)
                N = (m.gate_proj if gated else m.up_proj).weight.shape[0]
                out.append((name, m, gated, N, None))
        return out

    def __enter__(self):
        for name, m, gated, N, neurons in self._targets():
            w = (m.gate_proj if gated else m.up_proj).weight
            rec = _Rec(N, w.shape[0] // m.T, None if neurons is None else neurons.cpu(), self.keep_rows)
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
    def sample(self) -> dict:
        out = {}
        for k, r in self._recs.items():
            if r.rows:
                out[k] = (torch.cat(r.rows), torch.cat(r.cols))
        return out

    def all_reduce(self, group=None) -> None:
        """Sums the counts of tensor-parallel shards over `group` (every rank holds disjoint
        neurons of the same tokens); full modules are left alone. Collective: every rank calls it."""
        for r in self._recs.values():
            if r.neurons is not None:
                dev = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
                c = r.counts.to(dev)
                dist.all_reduce(c, group=group)
                r.counts = c.cpu()

    def save(self, path: str) -> None:
        """torch.save of {"counts": {name: [N]}, "tokens": {name: M}} for `python -m twellrt.balance`."""
        torch.save({"counts": self.counts, "tokens": self.tokens}, path)


# ---------------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------------


def balanced_layout(counts: torch.Tensor, world: int, T: int = 256, pad: bool = False) -> torch.Tensor:
    """A layout [world, n_local] (see twellrt.parallel) that balances `counts` (active entries per
    neuron, [N]) across ranks and, inside each rank, across its tiles of T neurons.

    Greedy longest-processing-time with capacities: neurons in decreasing count (ties: lower
    index first) go to the rank with the least load that still has room (ties: lower rank),
    inside it to the tile with the least load that has room. Each rank holds N / world real
    neurons (±1), so padding is spread evenly too. Without the capacities LPT keeps every rank
    within one neuron's count of the least loaded; with them this holds as long as the slots do
    not run out before the hot neurons are placed, which is the case for activity profiles like
    twellrt.activity's (dead and cold neurons come last). Hot neurons land in different tiles,
    which keeps row-tiles under the TwELL slot count more often. Inside a tile neurons keep
    ascending index; padding (-1) fills what is left. Deterministic."""
    c = counts.detach().to("cpu", torch.float64).flatten()
    N = c.numel()
    n_local = shard_width(N, world, T, pad)
    tps = n_local // T
    order = torch.argsort(-c, stable=True).tolist()
    cl = c.tolist()
    # real neurons per rank: N / world rounded, so padding is spread evenly too (without this,
    # neurons with noisy small counts pile up where the load looks lowest)
    shard_free = [N // world + (1 if r < N % world else 0) for r in range(world)]
    shards = [(0.0, r) for r in range(world) if shard_free[r]]  # heaps of (load, index): ties by index
    tile_heaps = [[(0.0, t) for t in range(tps)] for _ in range(world)]
    tiles = [[[] for _ in range(tps)] for _ in range(world)]
    for n in order:
        load, s = heapq.heappop(shards)
        tl, t = heapq.heappop(tile_heaps[s])
        tiles[s][t].append(n)
        if len(tiles[s][t]) < T:
            heapq.heappush(tile_heaps[s], (tl + cl[n], t))
        shard_free[s] -= 1
        if shard_free[s]:
            heapq.heappush(shards, (load + cl[n], s))
    out = torch.full((world, n_local), -1, dtype=torch.int64)
    for s in range(world):
        for t in range(tps):
            m = sorted(tiles[s][t])
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


def layout_report(counts: torch.Tensor, layout: torch.Tensor, T: int = 256, C: int = 8, sample=None) -> dict:
    """Per-rank active entries and imbalance of `layout`; with a sample (rows, cols) of active
    (token, neuron) pairs (ActivityCounter.sample), also the row-tiles per rank whose count
    exceeds the TwELL slots (T/C - 1) under that layout, and their imbalance."""
    layout = layout.to("cpu")
    loads = shard_loads(counts, layout)
    rep = {"active": loads.tolist(), "imbalance": imbalance(counts, layout)}
    if sample is not None:
        rows, cols = sample
        world, n_local = layout.shape
        N = counts.numel()
        pos = torch.empty(N, dtype=torch.int64)
        flat = layout.flatten()
        real = flat >= 0
        pos[flat[real]] = torch.arange(flat.numel())[real]
        G = world * n_local // T
        tile = pos[cols] // T
        key = rows.long() * G + tile
        u, cnt = torch.unique(key, return_counts=True)
        over = u[cnt > T // C - 1]
        per = torch.bincount((over % G) // (n_local // T), minlength=world).double()
        rep["overflow_row_tiles"] = per.tolist()
        rep["overflow_imbalance"] = (per.max() / per.mean()).item() if per.sum() > 0 else 1.0
        rep["sample_active"] = torch.bincount(pos[cols] // n_local, minlength=world).tolist()
    return rep


def permuted_copy(module: TwELLGatedMLP, perm: torch.Tensor) -> TwELLGatedMLP:
    """A TwELLGatedMLP equal to `module` with its neurons reordered: neuron j of the copy is
    neuron perm[j] of the original (rows of gate/up, columns of down). The same function (see the
    module docstring of twellrt.balance)."""
    N = module.gate_proj.weight.shape[0]
    perm = check_layout(perm.view(1, -1), N, 1, module.T)[0]
    w = module.gate_proj.weight
    new = TwELLGatedMLP(
        w.shape[1], N, module.l1_coef, module.T, module.C, module.path, module.train_path, w.device, w.dtype
    )
    new.load_state_dict(shard_weights(module.state_dict(), perm))
    return new


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------


def _table(name, counts, world, T, C, pad, sample=None, held=None, probs=None):
    before = contiguous_layout(counts.numel(), world, T, pad)
    after = balanced_layout(counts, world, T, pad)
    rows = {}
    for tag, lay in (("contiguous", before), ("balanced", after)):
        r = layout_report(counts, lay, T, C, sample)
        if held is not None:  # the same layout judged on held-out data
            hc, hs = held
            r["held_out"] = layout_report(hc, lay, T, C, hs)
        if probs is not None:  # and on the true firing probabilities (no sampling noise)
            r["expected_imbalance"] = imbalance(probs, lay)
        rows[tag] = r
    return after, rows


def _fmt(r):
    s = f"imbalance {r['imbalance']:.3f}"
    if "overflow_imbalance" in r:
        s += f", overflow row-tiles {'/'.join(f'{v:.0f}' for v in r['overflow_row_tiles'])} ({r['overflow_imbalance']:.2f})"
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
                print(f"  {k:18s} {tag:10s} calibration {_fmt(r)} | held-out {_fmt(r['held_out'])} | "
                      f"expected {r['expected_imbalance']:.3f}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
        return 0
    if not a.counts:
        ap.error("give --counts FILE or --demo")
    data = torch.load(a.counts)
    counts = data["counts"] if isinstance(data, dict) and "counts" in data else data
    layouts, report = {}, {}
    for name, c in counts.items():
        N = c.numel()
        lay, rows = _table(name, c, a.world, a.T, a.C, a.pad)
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
