"""End-to-end model benchmark: a Llama-style model with dense PyTorch MLPs against the same model
with twellrt MLPs (same weights, swapped in place), on one GPU, in one run.

    PYTHONPATH=python python bench/python/bench_model.py [--shape 0.5b|1.5b|2b] [--batch 8]
        [--train-batch 8] [--seq 2048] [--l1 2e-5] [--json out.json]
    PYTHONPATH=python python bench/python/bench_model.py --overhead   # host overhead per call only

Outside the installed package, over its public API (PYTHONPATH=python, or twellrt installed);
hf_synth.py, bench_tp.py and the package's tests import it from this folder.

Model: RMSNorm, multi-head attention with RoPE through PyTorch's SDPA (causal), ReLU gated MLP,
untied lm_head, bf16. Reported: forward (prefill) tokens/ms over batches of `--seq` tokens,
training-step tokens/ms (forward + cross-entropy + the L1 term + backward), the FFN share of each
(every layer's MLP timed alone on its own captured inputs), per-layer FFN speedups, and the
activity actually measured on held-out data.

Synthetic weights with the activity of trained ReLU + L1 models (see `calibrate`):
  * weights N(0, 0.02²) (embeddings N(0, 1)), o_proj N(0, 0.005²): a smaller attention output keeps
    the residual stream token-specific, so thresholds calibrated on some sequences hold on others
    (with 0.02 the per-sequence part of the attention output grows with depth and a layer's
    activity on new sequences drifted up to 5x from its calibration);
  * channel 0 of the residual stream is a constant c (the embedding sets it; no layer writes it:
    row 0 of every o_proj and down_proj is zero), so column 0 of gate_proj acts as a per-neuron
    bias: neuron n fires iff r_n = Σ_{k>0} γ_k h_k Wg[n,k] / (γ_0 c) > -Wg[n,0], independent of the
    RMSNorm scale;
  * layer by layer, on calibration batches run through the model itself, Wg[n,0] is set to minus
    the (1 - p_n) quantile of r_n, with firing probabilities p_n log-normal over the live neurons
    (σ = 1) and summing to the layer's target; 30% of the neurons get a threshold above every
    calibration value (dead);
  * per-layer targets: the first two layers sparse, a bump in the early-middle layers, a slow
    decline after, scaled to a mean of 29 active per token over layers;
  * the first token of every sequence is a BOS token whose constant channel is c/4: its ratios are
    4x larger, so it fires far more neurons (as real models' first tokens do).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

SHAPES = {
    # hidden, intermediate, layers, heads. 1.5b is the (the paper's) shape; 0.5b and 2b are
    # Llama-style shapes of about those sizes with widths that are multiples of 256.
    "0.5b": (1280, 3584, 24, 10),
    "1.5b": (2048, 5632, 28, 16),
    "2b": (2304, 6144, 30, 18),
    "tiny": (256, 1024, 4, 4),  # smoke test (runs on the CPU backend too)
}
VOCAB = 32000
BOS = 1


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, x):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(v + self.eps)).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, d, heads, device, dtype):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.h, self.hd = heads, d // heads
        self.q_proj, self.k_proj = nn.Linear(d, d, **kw), nn.Linear(d, d, **kw)
        self.v_proj, self.o_proj = nn.Linear(d, d, **kw), nn.Linear(d, d, **kw)

    def forward(self, x, cos, sin):
        B, S, D = x.shape

        def heads(t):
            return t.view(B, S, self.h, self.hd).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, S, D))


def rope(t, cos, sin):
    h = t.shape[-1] // 2
    rot = torch.cat((-t[..., h:], t[..., :h]), dim=-1)
    return t * cos + rot * sin


class DenseMLP(nn.Module):
    """Hugging Face's LlamaMLP with ReLU; keeps Σ|h| / tokens for the L1 term when training."""

    def __init__(self, d, n, device, dtype):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate_proj, self.up_proj = nn.Linear(d, n, **kw), nn.Linear(d, n, **kw)
        self.down_proj = nn.Linear(n, d, **kw)
        self.act_fn = nn.ReLU()
        self.l1 = None

    def forward(self, x):
        h = self.act_fn(self.gate_proj(x)) * self.up_proj(x)
        if torch.is_grad_enabled():
            self.l1 = h.abs().sum(dtype=torch.float32) / (h.numel() // h.shape[-1])
        return self.down_proj(h)


class Layer(nn.Module):
    def __init__(self, d, n, heads, device, dtype):
        super().__init__()
        self.input_layernorm = RMSNorm(d, device=device, dtype=dtype)
        self.self_attn = Attention(d, heads, device, dtype)
        self.post_attention_layernorm = RMSNorm(d, device=device, dtype=dtype)
        self.mlp = DenseMLP(d, n, device, dtype)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, d, n, layers, heads, device, dtype=torch.bfloat16):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, d, device=device, dtype=dtype)
        self.layers = nn.ModuleList(Layer(d, n, heads, device, dtype) for _ in range(layers))
        self.norm = RMSNorm(d, device=device, dtype=dtype)
        self.lm_head = nn.Linear(d, VOCAB, bias=False, device=device, dtype=dtype)
        self.hd = d // heads

    def rope_tables(self, S, device):
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, device=device).float() / self.hd))
        f = torch.outer(torch.arange(S, device=device).float(), inv)
        e = torch.cat((f, f), dim=-1)
        return e.cos().to(self.lm_head.weight.dtype), e.sin().to(self.lm_head.weight.dtype)

    def forward(self, ids):
        cos, sin = self.rope_tables(ids.shape[1], ids.device)
        x = self.embed_tokens(ids)
        for lyr in self.layers:
            x = lyr(x, cos, sin)
        return self.lm_head(self.norm(x))


# ------------------------------------------------------------------------------------------------
# synthetic weights with realistic activity
# ------------------------------------------------------------------------------------------------

C_CONST, C_BOS, DEAD_FRAC, MEAN_ACTIVE = 1.0, 0.25, 0.30, 29.0


def layer_targets(L, mean=MEAN_ACTIVE):
    """Mean active neurons per (non-BOS) token per layer: layers 0-1 sparse, a bump around 30% of
    the depth (early-middle layers denser), a slow decline after; mean over layers = `mean`."""
    raw = []
    for i in range(L):
        t = i / max(L - 1, 1)
        v = 0.45 + 1.1 * math.exp(-(((t - 0.3) / 0.2) ** 2)) + 0.25 * (1 - t)
        if i < 2:
            v = 0.35 + 0.1 * i
        raw.append(v)
    s = mean * L / sum(raw)
    return [v * s for v in raw]


def make_ids(B, S, gen, device):
    ids = torch.randint(2, VOCAB, (B, S), generator=gen)
    ids[:, 0] = BOS
    return ids.to(device)


@torch.no_grad()
def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 1.0 if "embed" in name else 0.005 if "o_proj" in name else 0.02
            p.copy_((torch.randn(p.shape, generator=g) * std).to(p.dtype))
    E = model.embed_tokens.weight
    E[:, 0] = C_CONST
    E[BOS, 0] = C_BOS
    for lyr in model.layers:  # no layer writes channel 0 of the residual stream
        lyr.self_attn.o_proj.weight[0].zero_()
        lyr.mlp.down_proj.weight[0].zero_()


@torch.no_grad()
def calibrate(model, targets, ids, seed, probs=None):
    """Sets column 0 of every gate_proj (the per-neuron threshold), layer by layer, from the
    ratios r_n measured on `ids` run through the already calibrated layers below. probs(i, N,
    target) gives layer i's firing probabilities (a CPU tensor [N], summing to about target);
    default: 30% dead neurons, the others log-normal (DEAD_FRAC)."""
    g = torch.Generator().manual_seed(seed + 1)

    def lognormal(i, N, target):
        perm = torch.randperm(N, generator=g)
        live = perm[int(DEAD_FRAC * N):]
        p = torch.zeros(N)
        w = torch.exp(torch.randn(live.numel(), generator=g))
        p[live] = (w / w.sum() * target).clamp(max=0.3)
        return p

    probs = probs or lognormal
    cos, sin = model.rope_tables(ids.shape[1], ids.device)
    h = model.embed_tokens(ids)
    body = torch.ones_like(ids, dtype=torch.bool)
    body[:, 0] = False
    for i, (lyr, target) in enumerate(zip(model.layers, targets)):
        h = h + lyr.self_attn(lyr.input_layernorm(h), cos, sin)
        wg = lyr.mlp.gate_proj.weight
        N = wg.shape[0]
        gam = lyr.post_attention_layernorm.weight.float()
        hr = h.float() * gam
        hr[..., 0] = 0
        # ratio of every token (BOS: its own constant channel) and of the calibration body
        r_all = (hr.flatten(0, 1) @ wg.float().T) / (gam[0] * h.float()[..., 0].reshape(-1, 1))
        r = r_all[body.flatten()]
        Mc = r.shape[0]
        p = probs(i, N, target).float().to(r.device)  # firing probabilities, summing to target
        srt = r.sort(dim=0, descending=True).values  # [Mc, N]
        kk = (p * Mc).round().long().clamp(0, Mc - 1)  # samples above the threshold
        idx = torch.arange(N, device=r.device)
        thr = 0.5 * (srt[(kk - 1).clamp(min=0), idx] + srt[kk, idx])
        thr = torch.where(kk >= 1, thr, srt[0] + 1e-3 * srt[0].abs())  # p_n·Mc < 0.5: above every sample
        dead = p == 0
        thr = torch.where(dead, r_all.max(0).values.abs() * 4 + 1.0, thr)
        wg[:, 0] = (-thr).to(wg.dtype)
        h = h + lyr.mlp(lyr.post_attention_layernorm(h))
    return h


@torch.no_grad()
def measure_activity(model, ids):
    """Per layer: mean active per token (all tokens, non-BOS, BOS), max per token, dead fraction
    (never active on these tokens), from the gate values as the library stores them (bf16)."""
    rows = []
    hooks = []

    def hook(mod, args):
        x = args[0].flatten(0, 1)
        a = torch.relu(x @ mod.gate_proj.weight.T) > 0
        per_tok = a.sum(1).float()
        bos = torch.zeros(ids.shape, dtype=torch.bool, device=x.device)
        bos[:, 0] = True
        bos = bos.flatten()
        rows.append(
            dict(
                mean=per_tok.mean().item(),
                body=per_tok[~bos].mean().item(),
                bos=per_tok[bos].mean().item(),
                max=per_tok.max().item(),
                dead=(~a.any(0)).float().mean().item(),
            )
        )

    for lyr in model.layers:
        hooks.append(lyr.mlp.register_forward_pre_hook(hook))
    try:
        model(ids)
    finally:
        for h in hooks:
            h.remove()
    return rows


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------


def cuda_time(fn, reps, warmup=1, setup=None):
    """Median ms of fn() over reps (CUDA events), after warmup calls; setup() runs untimed."""
    for _ in range(warmup):
        if setup:
            setup()
        fn()
    ts = []
    for _ in range(reps):
        if setup:
            setup()
        if not torch.cuda.is_available():
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
            continue
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def _empty_cache():
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def outside_torch_gib():
    """Device memory in use that torch's allocator does not hold (CUDA context, cuBLAS, and the
    library's plans and training states), GiB."""
    if not torch.cuda.is_available():
        return float("nan")
    free, total = torch.cuda.mem_get_info()
    return (total - free - torch.cuda.memory_reserved()) / 2**30


def set_mlps(model, mlps):
    for lyr, m in zip(model.layers, mlps):
        lyr.mlp = m


def train_step(model, ids, labels, lam, dense):
    logits = model(ids)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
    if dense and lam:
        loss = loss + lam * sum(lyr.mlp.l1 for lyr in model.layers)
    loss.backward()
    return loss


def ffn_layer_times(mlps, inputs, lam, train, reps):
    """ms of each layer's MLP alone on its captured input: forward, or forward + backward."""
    out = []
    for m, x in zip(mlps, inputs):
        if train:
            xg = x.detach().requires_grad_()
            dy = torch.randn_like(x) * 1e-2

            def step():
                y = m(xg)
                if isinstance(m, DenseMLP) and lam:
                    torch.autograd.backward([y, lam * m.l1], [dy, None])
                else:
                    y.backward(dy)

            def zero():
                xg.grad = None
                for p in m.parameters():
                    p.grad = None

            out.append(cuda_time(step, reps, 1, zero))
        else:
            with torch.no_grad():
                out.append(cuda_time(lambda: m(x), reps, 1))
    return out


def overhead(device, K=2048, N=5632, M=1, calls=2000):
    """Host time per call (µs) of the inference ops at decode size, at four levels: the raw ctypes
    call, the op's Python implementation, the registered torch op, and a module forward; and
    the GPU time per call for comparison."""
    import ctypes

    import twellrt
    from twellrt import _lib, ops

    from statistics import NormalDist

    dt = torch.bfloat16
    # sparse data as in the tests: x[:, 0] = 1, column 0 of the weights a threshold for ~29 active
    x = torch.randn(M, K, device=device)
    x[:, 0] = 1
    w = torch.randn(N, K, device=device) / math.sqrt(K)
    w[:, 0] = -NormalDist().inv_cdf(1 - 29 / N)
    x, w = x.to(dt), w.to(dt)
    mlp = twellrt.TwELLGatedMLP(K, N, path="sparse", device=device, dtype=dt)
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(w if p.shape == w.shape else w.t())
    packed = ops.gate_pack(x, w)
    ops.ffn_infer(x, packed, w, w, w, path="sparse")
    plan = _lib.get_plan(_lib.context(x.device), K, N, 256, 8, _lib.DTYPE_BF16, True)
    y = torch.empty_like(x)
    lib = _lib.library()
    s = ops._stream(x.device)
    plan.set_path(_lib.PATHS["sparse"])
    args = (plan.handle, M, x.data_ptr(), packed.data_ptr(), w.data_ptr(), w.data_ptr(), w.data_ptr(), y.data_ptr(), s)
    impl = ops._ffn_infer_op._init_fn if hasattr(ops._ffn_infer_op, "_init_fn") else None
    cases = {
        "ctypes twell_ffn_infer": lambda: lib.twell_ffn_infer(*args),
        "torch.ops.twellrt.ffn_infer": lambda: torch.ops.twellrt.ffn_infer(x, packed, w, w, w, path="sparse"),
        "torch.ops.twellrt.gate_pack": lambda: torch.ops.twellrt.gate_pack(x, w),
        "TwELLGatedMLP forward (pack + infer)": lambda: mlp(x),
    }
    if impl is not None:
        cases["op Python body (no dispatcher)"] = lambda: impl(x, packed, w, w, w, path="sparse")
    res = {}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        for name, fn in cases.items():
            for _ in range(50):
                fn()
            sync()
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(calls // 5):
                    fn()
                t1 = time.perf_counter()
                sync()
                best = min(best, (t1 - t0) / (calls // 5) * 1e6)
            res[name] = best
        if device.type == "cuda":
            res["GPU time per ffn_infer (events)"] = cuda_time(lambda: torch.ops.twellrt.ffn_infer(x, packed, w, w, w, path="sparse"), 50, 5) * 1e3
            res["GPU time per module forward (events)"] = cuda_time(lambda: mlp(x), 50, 5) * 1e3
    return res


@torch.no_grad()
def diag(model, ids, dense_mlps, tw_mlps, a):
    """Where the forward's time goes: GPU and host time per variant, and the top kernels."""
    set_mlps(model, tw_mlps)
    model(ids)
    _sync()
    for name, mlps, path in (("dense", dense_mlps, None), ("twellrt auto", tw_mlps, "auto"),
                             ("twellrt sparse", tw_mlps, "sparse"), ("twellrt auto", tw_mlps, "auto")):
        set_mlps(model, mlps)
        if path:
            for m in mlps:
                m.path = path
        gpu = cuda_time(lambda: model(ids), 3, 1)
        _sync()
        t0 = time.perf_counter()
        model(ids)
        host = (time.perf_counter() - t0) * 1e3
        _sync()
        print(f"diag forward {name:16s} GPU {gpu:7.1f} ms, host issue {host:7.1f} ms")
    # each layer's MLP alone on the input it gets in the forward, dense and twellrt
    set_mlps(model, dense_mlps)
    inputs = []
    hooks = [lyr.mlp.register_forward_pre_hook(lambda mod, args: inputs.append(args[0].detach()))
             for lyr in model.layers]
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    with torch.no_grad():
        for i, x in enumerate(inputs):
            td = cuda_time(lambda: dense_mlps[i](x), 5, 2)
            tt = cuda_time(lambda: tw_mlps[i](x), 5, 2)
            print(f"diag layer {i:2d} MLP dense {1e3 * td:7.1f} us, twellrt {1e3 * tt:7.1f} us ({td / tt:.2f}x)")
    from torch.profiler import ProfilerActivity, profile

    for name, mlps in (("dense", dense_mlps), ("twellrt", tw_mlps)):
        set_mlps(model, mlps)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model(ids)
            _sync()
        rows = [e for e in prof.key_averages() if e.device_time_total > 0]
        rows.sort(key=lambda e: -e.device_time_total)
        tot = sum(e.self_device_time_total for e in prof.key_averages()) / 1e3
        print(f"diag profile {name}: total kernel time {tot:.1f} ms; top by device time:")
        for e in rows[:14]:
            print(f"   {e.device_time_total / 1e3:8.2f} ms  x{e.count:4d}  cpu {e.cpu_time_total / 1e3:7.2f} ms  {e.key[:90]}")
        for e in rows[14:]:  # the library's own kernels, all of them
            if e.key.startswith("twell_"):
                print(f"   {e.device_time_total / 1e3:8.2f} ms  x{e.count:4d}  {e.key[:90]}")
    set_mlps(model, dense_mlps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1.5b")
    ap.add_argument("--layers", type=int, default=0, help="override the layer count (quick runs)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per forward")
    ap.add_argument("--train-batch", type=int, default=8, help="sequences per training step")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--l1", type=float, default=2e-5, help="L1 coefficient (both variants)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--path", default="auto", help="twellrt inference path")
    ap.add_argument("--train-path", default="auto", help="twellrt training path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="")
    ap.add_argument("--overhead", action="store_true", help="only the host overhead per call")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--diag", action="store_true", help="forward diagnostics only (paths, host time, kernel profile)")
    a = ap.parse_args(argv)

    import twellrt

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rec = dict(torch=torch.__version__, twellrt=twellrt.version(), args=vars(a))
    if dev.type == "cuda":
        rec["gpu"] = torch.cuda.get_device_name(dev)
    if a.overhead or (dev.type == "cpu" and a.shape != "tiny"):
        o = overhead(dev) if dev.type == "cuda" else overhead(dev, K=256, N=1024)
        rec["overhead_us"] = o
        for k, v in o.items():
            print(f"overhead  {k:42s} {v:8.1f} µs")
        if dev.type == "cpu" and not a.overhead:
            print("no GPU: the model benchmark needs CUDA (--shape tiny runs on the CPU backend)")
        _dump(a, rec)
        return 0

    d, n, L, H = SHAPES[a.shape]
    if a.layers:
        L = a.layers
    torch.manual_seed(a.seed)
    t0 = time.time()
    model = Model(d, n, L, H, dev)
    init_weights(model, a.seed)
    targets = layer_targets(L)
    gen = torch.Generator().manual_seed(a.seed + 7)
    calibrate(model, targets, make_ids(4, a.seq, gen, dev), a.seed)
    act = measure_activity(model, make_ids(4, a.seq, gen, dev))  # held-out batch
    rec["activity"] = act
    rec["targets"] = targets
    mean_all = statistics.mean(r["mean"] for r in act)
    print(f"model {a.shape}: hidden {d}, intermediate {n}, {L} layers, {H} heads, "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params; built+calibrated in {time.time() - t0:.1f}s")
    print("activity (held-out 4x%d tokens): layer: mean/token (target) | BOS | max | dead" % a.seq)
    for i, (r, t) in enumerate(zip(act, targets)):
        print(f"  {i:2d}: {r['mean']:6.1f} ({t:5.1f}) | BOS {r['bos']:6.0f} | max {r['max']:5.0f} | dead {100 * r['dead']:4.1f}%")
    print(f"  mean over layers {mean_all:.1f} active/token, dead {100 * statistics.mean(r['dead'] for r in act):.1f}%, "
          f"BOS {statistics.mean(r['bos'] for r in act):.0f}")

    dense_mlps = [lyr.mlp for lyr in model.layers]
    tw_mlps = []
    # gate/up shared with the dense MLPs; down_proj copied into twellrt's [N, K] layout (the
    # weights are not trained here, so the copies stay equal)
    for m in dense_mlps:
        t = twellrt.TwELLGatedMLP(d, n, a.l1, path=a.path, train_path=a.train_path,
                                  gate_proj=m.gate_proj, up_proj=m.up_proj, down_proj=m.down_proj)
        tw_mlps.append(t)

    # ---- forward (prefill) ----
    ids = make_ids(a.batch, a.seq, gen, dev)
    if a.diag:
        diag(model, ids, dense_mlps, tw_mlps, a)
        o = overhead(dev)
        for k, v in o.items():
            print(f"overhead  {k:42s} {v:8.1f} µs")
        return 0
    tok = a.batch * a.seq
    inputs = []
    hooks = [m.register_forward_pre_hook(lambda mod, args: inputs.append(args[0].detach().flatten(0, 1).contiguous())) for m in dense_mlps]
    with torch.no_grad():
        ref = model(ids)
    for h in hooks:
        h.remove()
    set_mlps(model, tw_mlps)
    with torch.no_grad():
        t1 = time.time()
        got = model(ids)  # first use: kernels compile/load
        _sync()
        print(f"twellrt first forward (plans, JIT/cache) {time.time() - t1:.1f}s")
        err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
    print(f"logits relative error twellrt vs dense: {err:.2e}")
    rec["logits_rel_err"] = err
    fwd = {}
    with torch.no_grad():
        for rnd in range(2):  # interleaved blocks: dense, twellrt, dense, twellrt
            for name, mlps in (("dense", dense_mlps), ("twellrt", tw_mlps)):
                set_mlps(model, mlps)
                fwd.setdefault(name, []).append(cuda_time(lambda: model(ids), a.reps // 2 or 1, 2))
    fwd = {k: statistics.median(v) for k, v in fwd.items()}
    ffn_fwd = {name: ffn_layer_times(mlps, inputs, a.l1, False, 5) for name, mlps in (("dense", dense_mlps), ("twellrt", tw_mlps))}
    rec["forward_ms"] = fwd
    rec["lib_mem_gib"] = {"after forward": outside_torch_gib()}
    rec["ffn_forward_layer_ms"] = ffn_fwd
    del ref, got
    _empty_cache()

    # ---- training step ----
    train = {}
    if not a.no_train:
        while True:
            tids = make_ids(a.train_batch, a.seq, gen, dev)
            labels = torch.roll(tids, -1, 1)
            ttok = a.train_batch * a.seq
            try:
                for name, mlps in (("dense", dense_mlps), ("twellrt", tw_mlps)):
                    set_mlps(model, mlps)
                    model.zero_grad(set_to_none=True)
                    _empty_cache()
                    train[name] = cuda_time(lambda: train_step(model, tids, labels, a.l1, name == "dense"),
                                            max(a.reps // 2, 3), 3, lambda: model.zero_grad(set_to_none=True))
                    if dev.type == "cuda":
                        train[name + "_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
                        torch.cuda.reset_peak_memory_stats()
                    else:
                        train[name + "_peak_gib"] = float("nan")
                rec["lib_mem_gib"]["after training"] = outside_torch_gib()
                break
            except (torch.OutOfMemoryError, twellrt.TwellError) as e:
                if a.train_batch == 1 or (isinstance(e, twellrt.TwellError) and e.status != "TWELL_ERR_NO_MEMORY"):
                    raise
                print(f"training at batch {a.train_batch} ran out of memory ({str(e)[:120]}...): halving")
                a.train_batch //= 2
                train = {}
                model.zero_grad(set_to_none=True)
                _empty_cache()
        model.zero_grad(set_to_none=True)
        l0s = [m.l0.item() for m in tw_mlps]
        rec["train_l0"] = l0s
        tinp = [x[: ttok] for x in inputs] if ttok <= tok else None
        if tinp is not None:
            rec["ffn_train_layer_ms"] = {name: ffn_layer_times(mlps, tinp, a.l1, True, 3) for name, mlps in (("dense", dense_mlps), ("twellrt", tw_mlps))}
        rec["train_ms"] = train
    set_mlps(model, dense_mlps)

    # ---- report ----
    o = overhead(dev) if dev.type == "cuda" else overhead(dev, K=256, N=1024, calls=200)
    rec["overhead_us"] = o
    _report(a, rec, tok, fwd, ffn_fwd, train, a.train_batch * a.seq)
    _dump(a, rec)
    return 0


def _report(a, rec, tok, fwd, ffn_fwd, train, ttok):
    gpu = rec.get("gpu", "?")
    print(f"\n== {a.shape} model, {gpu}, bf16, seq {a.seq}, forward batch {a.batch}, train batch {a.train_batch}, λ {a.l1} ==")
    sf_d, sf_t = sum(ffn_fwd["dense"]), sum(ffn_fwd["twellrt"])
    print("| run | dense tokens/ms | twellrt tokens/ms | speedup | FFN share dense | FFN share twellrt | FFN alone dense→twellrt ms |")
    print("|---|---|---|---|---|---|---|")
    print(f"| forward ({tok} tokens) | {tok / fwd['dense']:.1f} | {tok / fwd['twellrt']:.1f} | {fwd['dense'] / fwd['twellrt']:.3f}× | "
          f"{100 * sf_d / fwd['dense']:.0f}% | {100 * sf_t / fwd['twellrt']:.0f}% | {sf_d:.1f} → {sf_t:.1f} ({sf_d / sf_t:.2f}×) |")
    if train:
        ft = rec.get("ffn_train_layer_ms")
        sd, st = (sum(ft["dense"]), sum(ft["twellrt"])) if ft else (float("nan"),) * 2
        print(f"| training step ({ttok} tokens) | {ttok / train['dense']:.1f} | {ttok / train['twellrt']:.1f} | {train['dense'] / train['twellrt']:.3f}× | "
              f"{100 * sd / train['dense']:.0f}% | {100 * st / train['twellrt']:.0f}% | {sd:.1f} → {st:.1f} ({sd / st:.2f}×) |")
        print(f"step ms: dense {train['dense']:.1f}, twellrt {train['twellrt']:.1f}; peak memory GiB: dense {train['dense_peak_gib']:.1f}, "
              f"twellrt {train['twellrt_peak_gib']:.1f} (torch allocator only; the library's own state is outside it)")
    print(f"forward ms: dense {fwd['dense']:.1f}, twellrt {fwd['twellrt']:.1f}")
    if "lib_mem_gib" in rec:
        print("device memory outside torch's allocator (GiB): " + ", ".join(f"{k} {v:.2f}" for k, v in rec["lib_mem_gib"].items()))
    sp = [d / t for d, t in zip(ffn_fwd["dense"], ffn_fwd["twellrt"])]
    print("per-layer FFN forward speedup: " + " ".join(f"{s:.2f}" for s in sp))
    if train and rec.get("ffn_train_layer_ms"):
        ft = rec["ffn_train_layer_ms"]
        print("per-layer FFN train speedup:   " + " ".join(f"{d / t:.2f}" for d, t in zip(ft["dense"], ft["twellrt"])))
        print("train L0 per layer: " + " ".join(f"{v:.0f}" for v in rec["train_l0"]))
    for k, v in rec["overhead_us"].items():
        print(f"overhead  {k:42s} {v:8.1f} µs")


def _dump(a, rec):
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
