"""Synthetic feed-forward layers with a chosen firing probability per neuron, for the shard
balancing tool's demo, its tests and the tensor-parallel benchmark.

Made the way trained ReLU models show sparsity: x[:, 0] is a constant 1 and Wg[n, 0] = -t_n, the
other entries N(0, 1/K), so neuron n's pre-activation is N(-t_n, ~1) and it fires with
probability p_n = P(Z > t_n). Activity profiles:
  uniform    every neuron p = mean / N;
  skewed     30% dead (never fire), the others log-normal (σ = 1.5) summing to `mean`, capped at
             0.5: a few hot neurons carry much of the activity; placed at random indices (as in a
             model trained from a random init: neuron order means nothing);
  clustered  the same probabilities, but the index follows the activity (hot neurons first, dead
             last, with noise): the case where contiguous shards are most unequal."""

from __future__ import annotations

import math
from statistics import NormalDist

import torch

__all__ = ["PROFILES", "firing_probs", "synthetic_layer", "synthetic_inputs", "layer_probs"]

PROFILES = ("uniform", "skewed", "clustered")
DEAD_FRAC, SIGMA, P_MAX = 0.30, 1.5, 0.5


def firing_probs(N: int, mean: float = 29.0, profile: str = "skewed", seed: int = 0) -> torch.Tensor:
    """Firing probability of each of N neurons (float64 [N]); their sum is `mean` active neurons
    per token (up to the cap)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    if profile == "uniform":
        return torch.full((N,), mean / N, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    p = torch.zeros(N, dtype=torch.float64)
    live = torch.randperm(N, generator=g)[int(DEAD_FRAC * N):]
    w = torch.exp(SIGMA * torch.randn(live.numel(), generator=g, dtype=torch.float64))
    q = w / w.sum() * mean
    for _ in range(20):  # cap, and give what the cap removed back to the others
        q = q.clamp(max=P_MAX)
        q = q * (mean / q.sum())
    p[live] = q.clamp(max=P_MAX)
    if profile == "clustered":
        rank = torch.empty(N, dtype=torch.float64)
        rank[torch.argsort(p, descending=True, stable=True)] = torch.arange(N, dtype=torch.float64)
        key = rank + 0.25 * N * torch.randn(N, generator=g, dtype=torch.float64)
        p = p[torch.argsort(key, stable=True)]
    return p


def _threshold(p: torch.Tensor) -> torch.Tensor:
    nd = NormalDist()
    return torch.tensor([nd.inv_cdf(1.0 - v) if v > 0 else 12.0 for v in p.tolist()], dtype=torch.float64)


def synthetic_layer(K: int, N: int, probs: torch.Tensor, seed: int = 0, dtype=torch.bfloat16, device="cpu") -> dict:
    """Weights of a gated layer whose neuron n fires with probability probs[n] on
    synthetic_inputs: gate_proj.weight, up_proj.weight [N, K] and down_proj.weight [K, N] (the
    state_dict of a TwELLGatedMLP). Generated on `device` (fast on a GPU) from `seed`."""
    g = torch.Generator(device=device).manual_seed(seed)
    s = 1.0 / math.sqrt(K)
    wg = torch.randn(N, K, generator=g, device=device) * s
    wg[:, 0] = -_threshold(probs).to(device=device, dtype=torch.float32)
    wu = torch.randn(N, K, generator=g, device=device) * s
    wd = torch.randn(K, N, generator=g, device=device) * s
    return {
        "gate_proj.weight": wg.to(dtype).contiguous(),
        "up_proj.weight": wu.to(dtype).contiguous(),
        "down_proj.weight": wd.to(dtype).contiguous(),
    }


def synthetic_inputs(M: int, K: int, seed: int = 1, dtype=torch.bfloat16, device="cpu", bos_every: int = 0) -> torch.Tensor:
    """x [M, K]: column 0 the constant 1, the rest N(0, 1). With bos_every = S, every S-th token
    (the first of each sequence of S) has column 0 = 1/4, so it fires far more neurons (about a
    quarter of the live ones) and overflows the TwELL slots, as real models' first tokens do."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, K, generator=g, device=device)
    x[:, 0] = 1.0
    if bos_every:
        x[::bos_every, 0] = 0.25
    return x.to(dtype)


def layer_probs(state_dict) -> torch.Tensor:
    """The firing probability of each neuron of a synthetic_layer on (non-BOS) synthetic_inputs,
    from its actual weights: P(N(0, ‖Wg[n, 1:]‖²) > -Wg[n, 0]) with the weights as stored (the
    nominal firing_probs shift with the rounding of the threshold and each row's norm)."""
    wg = state_dict["gate_proj.weight"].double().cpu()
    t = -wg[:, 0]
    s = wg[:, 1:].norm(dim=1)
    return 0.5 * torch.erfc(t / (s * math.sqrt(2.0)))
