"""Synthetic sparse layers and dense fp32 references for the tests.

Sparsity is made the way trained ReLU models show it: x[:, 0] is a constant 1 and column 0 of the
packing weight is -t, so pre-activations are N(-t, ~1) and a neuron fires with probability
P(Z > t) = nnz / N. Rows listed in `heavy` get x[:, 0] = 0 (half the neurons fire), so their
row-tiles overflow the TwELL slots."""

import math
from statistics import NormalDist

import torch


def layer(M, K, N, dtype=torch.bfloat16, device="cpu", nnz=8.0, heavy=(), seed=0, gated=True):
    g = torch.Generator().manual_seed(seed)
    s = 1.0 / math.sqrt(K)
    x = torch.randn(M, K, generator=g)
    x[:, 0] = 1.0
    for r in heavy:
        x[r, 0] = 0.0
    t = NormalDist().inv_cdf(1.0 - nnz / N)
    wp = torch.randn(N, K, generator=g) * s
    wp[:, 0] = -t
    wu = torch.randn(N, K, generator=g) * s if gated else wp
    wd = torch.randn(N, K, generator=g) * s
    out = dict(x=x, wg=wp if gated else None, wu=wu, wd=wd)
    return {k: (None if v is None else v.to(dtype).to(device).contiguous()) for k, v in out.items()}


def unpack(packed, N, T, C, dtype):
    """Decodes a TwELL tensor: counts [M, N/T] (exact, may exceed the slots), slots [M, N/T, W-1]
    (the raw words as int64) and the stored values scattered into a dense [M, N] float32."""
    M = packed.shape[0]
    W = T // C
    p = packed.cpu().view(M, N // T, W).long() & 0xFFFFFFFF
    counts, slots = p[:, :, 0], p[:, :, 1:]
    used = torch.arange(W - 1).view(1, 1, -1) < counts.clamp(max=W - 1).unsqueeze(-1)
    rows = torch.arange(M).view(-1, 1, 1).expand_as(slots)[used]
    cols = (slots & 0xFFFF)[used]
    vals = (slots >> 16)[used].to(torch.int32).to(torch.int16).view(dtype).float()
    dense = torch.zeros(M, N)
    dense[rows, cols] = vals
    return counts, slots, dense


def gate_ref(x, w, dtype):
    """relu(x·wᵀ) in fp32, then rounded to dtype as the library stores it."""
    return torch.relu(x.double() @ w.double().T).to(dtype).float()


def infer_ref(x, wg, wu, wd, dtype):
    if wg is not None:
        h = gate_ref(x, wg, dtype) * (x.double() @ wu.double().T).float()
    else:
        h = gate_ref(x, wu, dtype)
    return (h.double() @ wd.double()).float()


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def train_ref(x, wg, wu, wd, dy, lam, dtype):
    """Dense autograd of the library's training contract in fp64: P rounded to dtype (gradient
    straight through on its support), y = (P ⊙ x·Wuᵀ)·Wd, loss = <y, dy> + lam·Σ|Tm|/M."""
    xs, wgs, wus, wds = [t.detach().double().cpu().requires_grad_() for t in (x, wg, wu, wd)]
    pre = xs @ wgs.T
    P = torch.relu(pre)
    P = P + (P.to(dtype).double() - P).detach()
    U = xs @ wus.T
    Tm = U * P
    y = Tm @ wds
    M = x.shape[0]
    L1 = Tm.abs().sum() / M
    loss = (y * dy.double().cpu()).sum() + lam * L1
    loss.backward()
    L0 = (P > 0).double().sum() / M
    return dict(y=y.detach(), dx=xs.grad, dwg=wgs.grad, dwu=wus.grad, dwd=wds.grad, L0=L0.item(), L1=L1.item())
