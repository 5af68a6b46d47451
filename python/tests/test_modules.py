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
    # gate_proj and up_proj are shared with the dense module, down_proj is tw's own copy
    grads = [p.grad.clone() for p in (dense.gate_proj.weight, dense.up_proj.weight, tw.down_proj.weight)]
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


def _doubled(w):
    return (2 * w.detach()).contiguous()  # [K, N] row-major, as a checkpoint hands it over


# every route by which the down weight is written; each must reach the next call
WRITES = {
    "weight.data.mul_": lambda d: d.weight.data.mul_(2),
    "weight.data.copy_": lambda d: d.weight.data.copy_(_doubled(d.weight)),
    "weight.data =": lambda d: setattr(d.weight, "data", _doubled(d.weight)),
    "weight.mul_ (no_grad)": lambda d: d.weight.mul_(2),
    "weight.copy_ (no_grad)": lambda d: d.weight.copy_(_doubled(d.weight)),
    "weight = Parameter": lambda d: setattr(d, "weight", nn.Parameter(_doubled(d.weight))),
    "load_state_dict": lambda d: d.load_state_dict({"weight": _doubled(d.weight)}),
    "weight_t.data.mul_": lambda d: d.weight_t.data.mul_(2),
    "weight_t.data =": lambda d: setattr(d.weight_t, "data", (2 * d.weight_t.detach()).contiguous()),
}


def _twell_module(kind, K, N, device):
    # path and train_path "sparse": AUTO may change route between two calls on a GPU, and the
    # tests compare calls bit for bit
    if kind == "gated":
        m = twellrt.TwELLGatedMLP(K, N, T=64, C=8, path="sparse", train_path="sparse", device=device)
        _sparse_weights(m, K, N, device)
        return m
    d = layer(10, K, N, torch.bfloat16, device, nnz=6, gated=False)
    m = twellrt.TwELLMLP(K, N, T=64, C=8, path="sparse", device=device)
    with torch.no_grad():
        m.up_proj.weight.copy_(d["wu"])
        m.down_proj.weight.copy_(d["wd"].t())
    return m


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("kind", ["gated", "nongated"])
def test_down_weight_writes_reach_the_next_call(device, kind, write):
    # issue 26: the transposed copy cached on weight._version missed .data writes (stale y)
    K, N = 64, 256
    m = _twell_module(kind, K, N, device)
    param = m.down_proj.weight_t
    x = _inputs(1, 9, K, device)
    with torch.no_grad():
        y1 = m(x)
        WRITES[write](m.down_proj)
        y2 = m(x)
    # y = h·Wd in fp32, rounded once: doubling Wd doubles y exactly
    assert torch.equal(y2, 2 * y1), write
    assert m.down_proj.weight_t is param and param.is_contiguous() and param.shape == (N, K)


@pytest.mark.parametrize("write", ["weight.data.mul_", "weight.data =", "weight.data.copy_"])
def test_down_weight_writes_reach_training(device, write):
    K, N = 64, 256
    m = _twell_module("gated", K, N, device)
    x = _inputs(1, 9, K, device)
    y1 = m(x.clone().requires_grad_())
    with torch.no_grad():
        WRITES[write](m.down_proj)
    y2 = m(x.clone().requires_grad_())
    assert torch.equal(y2, 2 * y1)
    y2.float().sum().backward()
    d = m.down_proj
    assert d.weight_t.grad.shape == (N, K) and torch.equal(d.weight.grad, d.weight_t.grad.t())


def test_down_weight_view(device, tmp_path):
    K, N = 64, 256
    dense = DenseMLP(K, N, device)
    want = dense.down_proj.weight.detach().clone()
    m = twellrt.TwELLGatedMLP(K, N, T=64, C=8, gate_proj=dense.gate_proj, up_proj=dense.up_proj, down_proj=dense.down_proj)
    d = m.down_proj
    assert isinstance(d, twellrt.modules.DownProj) and (d.in_features, d.out_features) == (N, K)
    # the parameter is [N, K] contiguous, the layout the library reads: the ops get it as it is
    assert d.weight_t.shape == (N, K) and d.weight_t.is_contiguous() and torch.equal(d.weight_t, want.t())
    assert [n for n, _ in m.named_parameters()] == ["gate_proj.weight", "up_proj.weight", "down_proj.weight_t"]
    assert not hasattr(m, "_wd_cache")
    # weight: nn.Linear's [K, N], a view of it (no copy), plain tensors out of it
    w = d.weight
    assert w.shape == (K, N) and w.data_ptr() == d.weight_t.data_ptr() and torch.equal(w, want)
    assert type(w * 1) is torch.Tensor and type(w.t()) is torch.Tensor
    h = torch.randn(3, N).to(want.dtype).to(device)
    assert rel(d(h), dense.down_proj(h)) < ULP  # DownProj itself computes densely
    assert w.requires_grad and d.weight.requires_grad_(False) is not None and not d.weight_t.requires_grad
    d.weight_t.requires_grad_(True)
    # a held view follows `.data =` like a Parameter would
    w.data = _doubled(want)
    assert torch.equal(w, 2 * want) and torch.equal(d.weight, 2 * want)
    # saved or copied: a plain tensor, not the module
    torch.save(d.weight, tmp_path / "w.pt")
    t = torch.load(tmp_path / "w.pt")
    assert type(t) is torch.Tensor and torch.equal(t, 2 * want)
    import copy

    c = copy.deepcopy(m)
    assert torch.equal(c.down_proj.weight, 2 * want) and c.down_proj.weight_t.data_ptr() != d.weight_t.data_ptr()
    # grad: the parameter's, transposed; settable through the view
    assert d.weight.grad is None
    d.weight.grad = torch.ones(K, N, dtype=want.dtype, device=device)
    assert d.weight_t.grad.shape == (N, K)
    d.weight.grad = None
    assert d.weight_t.grad is None
    # wrong shapes are refused, naming the layout
    with pytest.raises(twellrt.TwellError, match=r"\[K, N\]"):
        d.weight = torch.zeros(N, K, dtype=want.dtype)
    with pytest.raises(twellrt.TwellError, match="bias-free"):
        twellrt.TwELLGatedMLP(K, N, down_proj=nn.Linear(N, K))
    # conversions keep it what it is
    assert m.to(torch.float16).down_proj.weight_t.dtype == torch.float16


def test_state_dict_round_trip_hf_layout(device, tmp_path):
    K, N = 64, 256
    src = DenseMLP(K, N, device)
    _sparse_weights(src, K, N, device)
    sd = src.state_dict()
    m = twellrt.TwELLGatedMLP(K, N, T=64, C=8, device=device)
    m.load_state_dict(sd)  # Hugging Face keys and layout in
    out = m.state_dict()
    assert list(out) == list(sd)
    for k in sd:
        assert out[k].shape == sd[k].shape and torch.equal(out[k], sd[k]), k
    # and out again: a dense module loads what twellrt saves, through torch.save too
    torch.save(out, tmp_path / "sd.pt")
    back = DenseMLP(K, N, device)
    back.load_state_dict(torch.load(tmp_path / "sd.pt"))
    for k, v in back.state_dict().items():
        assert torch.equal(v, sd[k]), k
    x = _inputs(2, 6, K, device)
    with torch.no_grad():
        assert torch.equal(back(x), src(x))
        assert rel(m(x), src(x)) < 2 * ULP
    # load_state_dict(assign=True) makes the given tensors the parameters
    a = twellrt.TwELLGatedMLP(K, N, T=64, C=8, device="meta")
    a.load_state_dict(sd, assign=True)
    assert a.down_proj.weight_t.is_contiguous() and torch.equal(a.down_proj.weight, sd["down_proj.weight"])
    # a missing or misshapen down weight is reported, not swallowed
    with pytest.raises(RuntimeError, match="down_proj.weight_t"):
        twellrt.TwELLGatedMLP(K, N, T=64, C=8).load_state_dict({k: v for k, v in sd.items() if "down" not in k})
    with pytest.raises(RuntimeError, match="size mismatch"):
        twellrt.TwELLGatedMLP(K, N, T=64, C=8).load_state_dict(dict(sd, **{"down_proj.weight": sd["down_proj.weight"].t()}))
    safetensors = pytest.importorskip("safetensors.torch")
    safetensors.save_file({k: v.contiguous() for k, v in out.items()}, str(tmp_path / "sd.safetensors"))
    loaded = safetensors.load_file(str(tmp_path / "sd.safetensors"), device=str(device))
    m2 = twellrt.TwELLGatedMLP(K, N, T=64, C=8, device=device)
    m2.load_state_dict(loaded)
    with torch.no_grad():
        assert torch.equal(m2(x), m(x))


def _aot_graphs():
    from torch._dynamo.backends.common import aot_autograd
    from functorch.compile import make_boxed_func

    graphs = {"fw": [], "bw": []}

    def keep(kind):
        def compiler(gm, _example_inputs):
            graphs[kind].append(gm)
            return make_boxed_func(gm.forward)
        return compiler

    return graphs, aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))


def _calls(gm):
    import operator

    return [n.target for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def _is_twell(t):
    return getattr(t, "namespace", None) == "twellrt"


def test_compile_has_no_copy_of_down(device):
    # issue 26: under torch.compile every forward transposed down_proj into a fresh [N, K] copy
    K, N = 64, 256
    m = twellrt.TwELLGatedMLP(K, N, l1_coef=0.01, T=64, C=8, device=device)
    _sparse_weights(m, K, N, device)
    x = _inputs(2, 7, K, device)
    torch._dynamo.reset()
    graphs, backend = _aot_graphs()
    with torch.no_grad():
        y = torch.compile(m, fullgraph=True, backend=backend)(x)
        assert torch.equal(y, m(x))
    torch._dynamo.reset()
    xg = x.clone().requires_grad_()
    torch.compile(m, fullgraph=True, backend=backend)(xg).float().sum().backward()
    assert len(graphs["fw"]) == 2 and len(graphs["bw"]) == 1
    for gm in graphs["fw"]:  # inference and training forward: the ops and x's reshapes only
        others = [t for t in _calls(gm) if not _is_twell(t)]
        assert others and all(t in (torch.ops.aten.view.default,) for t in others), others
    # the backward casts the three fp32 weight gradients to bf16 and does nothing else to them:
    # dWd [N, K] is weight_t's gradient as it comes
    others = [t for t in _calls(graphs["bw"][0]) if not _is_twell(t) and t is not torch.ops.aten.view.default]
    assert others == [torch.ops.aten._to_copy.default] * 3, others
    torch._dynamo.reset()


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
        check(ops.ffn_layer.default, (d["x"], d["wg"], d["wu"], d["wd"], 64, 8, path))
        check(ops.ffn_layer.default, (n["x"], None, n["wu"], n["wd"], 64, 8, path))
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
    params = dict(model.named_parameters())
    with torch.no_grad():
        ref = model(ids).logits
    n = twellrt.swap_mlps(model, l1_coef=0.0, T=64, C=8)
    assert n == 2 and all(isinstance(l.mlp, twellrt.TwELLGatedMLP) for l in model.model.layers)
    # state_dict: the same keys, shapes and values; the same tensors except down_proj's, which
    # was copied once into the library's layout
    after = model.state_dict()
    assert list(after) == list(before)
    for k, v in after.items():
        assert v.shape == before[k][1].shape and torch.equal(v, before[k][1]), k
        assert (v.data_ptr() == before[k][0]) != k.endswith("down_proj.weight"), k
    # parameters: the same objects but down_proj's, now down_proj.weight_t [N, K]
    now = dict(model.named_parameters())
    assert {k.replace("weight_t", "weight") for k in now} == set(params)
    for k, p in now.items():
        assert (p is params.get(k)) != k.endswith("down_proj.weight_t"), k
    with torch.no_grad():
        got = model(ids).logits
    assert rel(got, ref) < 4 * ULP
    # training through the swapped model
    model.train()
    out = model(ids, labels=ids)
    out.loss.backward()
    g = model.model.layers[0].mlp.gate_proj.weight.grad
    assert g is not None and torch.isfinite(g.float()).all() and g.abs().sum() > 0
    # an MLP with another activation is refused, naming the option (test_recipe.py converts)
    cfg.hidden_act = "silu"
    other = transformers.LlamaForCausalLM(cfg)
    with pytest.raises(twellrt.TwellInvalidArgument, match="convert_to_relu"):
        twellrt.swap_mlps(other)


def test_save_pretrained_round_trip(tmp_path):
    """A swapped Hugging Face model saves the checkpoint the dense model would (keys, shapes,
    values) and a dense model loads it; the loaded model swaps and runs."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, hidden_act="relu", max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(dtype=torch.bfloat16).eval()
    for i, lyr in enumerate(model.model.layers):
        _sparse_weights(lyr.mlp, 64, 256, "cpu", seed=i)
    dense_sd = {k: v.clone() for k, v in model.state_dict().items()}
    twellrt.swap_mlps(model, T=64, C=8)
    model.save_pretrained(tmp_path)
    loaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    sd = loaded.state_dict()
    assert set(sd) == set(dense_sd)
    for k, v in sd.items():
        assert v.shape == dense_sd[k].shape and torch.equal(v, dense_sd[k]), k
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = loaded(ids).logits
    assert twellrt.swap_mlps(loaded, T=64, C=8) == 2
    with torch.no_grad():
        assert rel(loaded(ids).logits, ref) < 4 * ULP
    # and a swapped model loads the dense checkpoint directly
    loaded.load_state_dict(dense_sd)
    assert torch.equal(loaded.model.layers[1].mlp.down_proj.weight, dense_sd["model.layers.1.mlp.down_proj.weight"])
