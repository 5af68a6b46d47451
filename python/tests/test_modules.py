"""Modules, opcheck, torch.compile, the Hugging Face swap helper and CUDA-graph capture."""

import gc

import pytest
import torch
from torch import nn

import twellrt
from _data import layer, rel

ULP = 2.0**-7  # bf16


class DenseMLP(nn.Module):
    """A Llama-style MLP with ReLU, as Hugging Face writes it."""

    def __init__(self, K, N, device, dtype=torch.bfloat16):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate_proj = nn.Linear(K, N, **kw)
        self.up_proj = nn.Linear(K, N, **kw)
        self.down_proj = nn.Linear(N, K, **kw)
        self.act_fn = nn.ReLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, K, N, device, l1=0.0, twell=True):
        super().__init__()
        self.norm = nn.RMSNorm(K, device=device, dtype=torch.bfloat16)
        self.mlp = DenseMLP(K, N, device)
        if twell:
            twellrt.swap_mlps(self, l1_coef=l1, T=64, C=8)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


def _sparse_weights(mlp, K, N, device, seed=0):
    d = layer(8, K, N, torch.bfloat16, device, nnz=6, seed=seed)
    with torch.no_grad():
        mlp.gate_proj.weight.copy_(d["wg"])
        mlp.up_proj.weight.copy_(d["wu"])
        mlp.down_proj.weight.copy_(d["wd"].t())


def _inputs(B, S, K, device, seed=1):
    x = torch.randn(B, S, K, generator=torch.Generator().manual_seed(seed))
    x[..., 0] = 1.0
    return x.to(torch.bfloat16).to(device)


def test_gated_module_matches_dense_module(device):
    K, N, lam = 64, 256, 0.02
    dense = DenseMLP(K, N, device)
    _sparse_weights(dense, K, N, device)
    tw = twellrt.TwELLGatedMLP(K, N, l1_coef=lam, T=64, C=8, gate_proj=dense.gate_proj, up_proj=dense.up_proj, down_proj=dense.down_proj)
    x = _inputs(3, 11, K, device)
    with torch.no_grad():
        assert rel(tw(x), dense(x)) < 2 * ULP
    # training: grads against dense autograd with the L1 term added to the loss by hand
    xa = x.clone().requires_grad_()
    ya = tw(xa)
    ya.float().square().sum().backward()
    l0, l1 = tw.l0.item(), tw.l1.item()
    grads = [p.grad.clone() for p in (dense.gate_proj.weight, dense.up_proj.weight, dense.down_proj.weight)]
    for p in dense.parameters():
        p.grad = None
    xb = x.clone().requires_grad_()
    h = torch.relu(dense.gate_proj(xb)) * dense.up_proj(xb)
    yb = dense.down_proj(h)
    M = x.shape[0] * x.shape[1]
    (yb.float().square().sum() + lam * h.float().abs().sum() / M).backward()
    assert rel(ya, yb) < 2 * ULP
    assert rel(xa.grad, xb.grad) < 4 * ULP
    for g, p in zip(grads, (dense.gate_proj.weight, dense.up_proj.weight, dense.down_proj.weight)):
        assert rel(g, p.grad) < 4 * ULP
    assert abs(l0 - (h != 0).float().sum().item() / M) < 0.05 * l0 + 0.1
    assert abs(l1 - h.float().abs().sum().item() / M) < 0.02 * l1


def test_nongated_module(device):
    K, N = 64, 256
    d = layer(10, K, N, torch.bfloat16, device, nnz=6, gated=False)
    m = twellrt.TwELLMLP(K, N, T=64, C=8, device=device)
    with torch.no_grad():
        m.up_proj.weight.copy_(d["wu"])
        m.down_proj.weight.copy_(d["wd"].t())
        y = m(d["x"])
        ref = torch.relu(d["x"].float() @ d["wu"].float().T).bfloat16().float() @ d["wd"].float()
        assert rel(y, ref) < 2 * ULP
    with pytest.raises(NotImplementedError):
        m(d["x"])  # parameters require grad: training a non-gated layer is not in the library


def test_down_cache_follows_weight_updates(device):
    K, N = 64, 256
    blk = Block(K, N, device)
    _sparse_weights(blk.mlp, K, N, device)
    x = _inputs(1, 9, K, device)
    with torch.no_grad():
        y1 = blk(x)
        blk.mlp.down_proj.weight.mul_(2)  # in place: the transposed copy must be refreshed
        y2 = blk(x)
    assert rel(y2 - x, 2 * (y1 - x)) < 2 * ULP


def _opcheck_cases(device):
    d = layer(13, 64, 256, torch.bfloat16, device, nnz=8, heavy=[3])
    n = layer(13, 64, 256, torch.bfloat16, device, nnz=8, gated=False)
    p = twellrt.gate_pack(d["x"], d["wg"], 64, 8)
    pn = twellrt.gate_pack(n["x"], n["wu"], 64, 8, False)
    return d, n, p, pn


def test_opcheck(device):
    """torch.library.opcheck, every test util, for every registered op (issue 26: ffn_train's
    per-call handle failed test_aot_dispatch_dynamic)."""
    from torch.library import opcheck

    d, n, p, pn = _opcheck_cases(device)
    ops = torch.ops.twellrt
    checked = set()

    def check(op, args):
        opcheck(op, args)
        checked.add(op.name())

    check(ops.gate_pack.default, (d["x"], d["wg"], 64, 8, True))
    check(ops.gate_pack.default, (n["x"], n["wu"], 64, 8, False))
    for path in ("sparse", "auto"):
        check(ops.ffn_infer.default, (d["x"], p, d["wg"], d["wu"], d["wd"], 64, 8, path))
        check(ops.ffn_infer.default, (n["x"], pn, None, n["wu"], n["wd"], 64, 8, path))
    tr = [t.clone().requires_grad_() for t in (d["x"], d["wg"], d["wu"], d["wd"])]
    check(ops.ffn_train.default, (*tr, 0.01, 64, 8, "auto"))
    check(ops.ffn_train.default, (d["x"], d["wg"], d["wu"], d["wd"], 0.0, 64, 8, "sparse"))
    y, st, saved = twellrt.ffn_train(d["x"], d["wg"], d["wu"], d["wd"], 0.01, 64, 8)
    check(ops.ffn_train_backward.default, (saved, d["x"], d["wg"], d["wu"], d["wd"], torch.ones_like(d["x"]), 0.01, 64, 8, "auto"))
    registered = {f"twellrt::{name}" for name in dir(ops) if isinstance(getattr(ops, name), torch._ops.OpOverloadPacket)}
    assert registered and checked == registered, registered - checked


def _backend(device):
    # inductor on the GPU; on the CPU aot_eager traces the same graph (Dynamo + AOTAutograd with
    # the fake implementations) without compiling C++ for every test on a small CI machine
    return "inductor" if device.type == "cuda" else "aot_eager"


class Model(nn.Module):
    def __init__(self, K, N, device, layers=2, l1=0.01):
        super().__init__()
        self.blocks = nn.ModuleList(Block(K, N, device, l1) for _ in range(layers))
        for i, b in enumerate(self.blocks):
            _sparse_weights(b.mlp, K, N, device, seed=i)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def test_compile_fullgraph_inference(device):
    torch._dynamo.reset()
    m = Model(64, 256, device)
    x = _inputs(2, 7, 64, device)
    with torch.no_grad():
        ref = m(x)
        got = torch.compile(m, fullgraph=True, backend=_backend(device))(x)
    assert torch.equal(got, ref) or rel(got, ref) < 2 * ULP


def test_compile_fullgraph_training(device):
    torch._dynamo.reset()
    m = Model(64, 256, device)
    x = _inputs(2, 7, 64, device)
    xe = x.clone().requires_grad_()
    m(xe).float().square().sum().backward()
    ref = [xe.grad] + [p.grad.clone() for p in m.parameters()]
    l0_eager = m.blocks[0].mlp.l0.item()
    m.zero_grad()
    xc = x.clone().requires_grad_()
    cm = torch.compile(m, fullgraph=True, backend=_backend(device))
    recomputed = twellrt._lib.recomputed_forwards
    cm(xc).float().square().sum().backward()
    assert twellrt._lib.recomputed_forwards == recomputed  # the backward found its forward's state
    got = [xc.grad] + [p.grad for p in m.parameters()]
    for a, b in zip(got, ref):
        assert rel(a, b) < 2 * ULP
    assert m.blocks[0].mlp.l0.item() == l0_eager
    del cm
    gc.collect()


def test_swap_hf_llama(device):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, hidden_act="relu", max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16).eval()
    for i, lyr in enumerate(model.model.layers):
        _sparse_weights(lyr.mlp, 64, 256, device, seed=i)
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(3)).to(device)
    before = {k: (v.data_ptr(), v.clone()) for k, v in model.state_dict().items()}
    with torch.no_grad():
        ref = model(ids).logits
    n = twellrt.swap_mlps(model, l1_coef=0.0, T=64, C=8)
    assert n == 2 and all(isinstance(l.mlp, twellrt.TwELLGatedMLP) for l in model.model.layers)
    after = model.state_dict()
    assert list(after) == list(before)
    for k, v in after.items():
        assert v.data_ptr() == before[k][0] and torch.equal(v, before[k][1]), k
    with torch.no_grad():
        got = model(ids).logits
    assert rel(got, ref) < 4 * ULP
    # training through the swapped model
    model.train()
    out = model(ids, labels=ids)
    out.loss.backward()
    g = model.model.layers[0].mlp.gate_proj.weight.grad
    assert g is not None and torch.isfinite(g.float()).all() and g.abs().sum() > 0
    # an MLP with another activation is left alone
    cfg.hidden_act = "silu"
    other = transformers.LlamaForCausalLM(cfg)
    assert twellrt.swap_mlps(other) == 0
