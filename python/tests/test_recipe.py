"""The training recipe (twellrt.recipe): the L1 schedule, activity and dead-neuron tracking
against the activations computed directly, re-initialisation, swap_mlps on SiLU models and the
example script (examples/recipe_finetune.py) in a reduced setting."""

import copy
import importlib.util
import math
import os

import pytest
import torch
from torch import nn

import twellrt
from _data import rel

ULP = 2.0**-7  # bf16
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "recipe_finetune.py")


# ---- L1 schedule ------------------------------------------------------------------------------


def test_l1_schedule_values():
    s = twellrt.L1Schedule(2e-5, start_step=10, end_step=20)
    assert [s(i) for i in (0, 9, 10)] == [0.0, 0.0, 0.0]
    for i in range(10, 21):
        assert s(i) == pytest.approx(2e-5 * (i - 10) / 10, rel=1e-12, abs=0.0)
    assert s(20) == 2e-5 and s(21) == 2e-5 and s(10**9) == 2e-5
    # start == end: no ramp, the term is on from start_step; the default is on from step 0
    s = twellrt.L1Schedule(0.5, 5, 5)
    assert (s(4), s(5), s(6)) == (0.0, 0.5, 0.5)
    assert twellrt.L1Schedule(0.5)(0) == 0.5
    # from a SparseLM config (object or dict): the sparsity_* keys
    cfg = type("Cfg", (), dict(sparsity_l1_coeff=2e-5, sparsity_start_warmup_step=100, sparsity_end_warmup_step=300))()
    s = twellrt.L1Schedule.from_config(cfg)
    assert (s.target, s.start_step, s.end_step) == (2e-5, 100, 300)
    assert s(200) == pytest.approx(1e-5)
    s = twellrt.L1Schedule.from_config({"sparsity_l1_coeff": 1e-4})
    assert (s.start_step, s.end_step, s(0)) == (0, 0, 1e-4)
    assert twellrt.L1Schedule.from_config({}, target=3e-5).target == 3e-5
    with pytest.raises(twellrt.TwellInvalidArgument, match="sparsity_l1_coeff"):
        twellrt.L1Schedule.from_config({})
    for bad in (dict(target=-1.0), dict(target=math.inf), dict(target=1.0, start_step=5, end_step=4),
                dict(target=1.0, start_step=-1), dict(target=1.0, end_step=2.5), dict(target=True)):
        with pytest.raises(twellrt.TwellInvalidArgument):
            twellrt.L1Schedule(**bad)
    with pytest.raises(twellrt.TwellInvalidArgument, match="step"):
        twellrt.L1Schedule(1.0)(-1)


def test_l1_schedule_apply_sets_every_layer():
    _hf = pytest.importorskip("_hf")
    model = _hf.twell_copy(_hf.dense_model("llama"))
    s = twellrt.L1Schedule(0.04, 0, 4)
    assert s.apply(model, 1) == pytest.approx(0.01)
    assert [l.mlp.l1_coef for l in model.model.layers] == [pytest.approx(0.01)] * _hf.LAYERS
    assert s.apply(model, 9) == 0.04 and model.model.layers[1].mlp.l1_coef == 0.04


# ---- activity and dead neurons -----------------------------------------------------------------


def _reference_hooks(model, seen):
    """Forward pre-hooks recording, per layer and training forward, relu(x·Wgᵀ) > 0 computed
    directly (fp64) on the layer's input and current weights: [B, S, N]."""

    def make(name):
        def hook(mlp, args):
            x = args[0]
            if not (torch.is_grad_enabled() and (x.requires_grad or mlp.gate_proj.weight.requires_grad)):
                return
            seen.setdefault(name, []).append((x.detach().double() @ mlp.gate_proj.weight.detach().double().T) > 0)

        return hook

    return [m.register_forward_pre_hook(make(n)) for n, m in twellrt.recipe.twell_layers(model).items()]


@pytest.mark.parametrize("l1", [0.02, 0.0])
def test_tracker_counts_match_activations(l1):
    """With l1_coef > 0 a neuron's gradient row is non-zero exactly when it fired on some token.
    With l1_coef = 0 a firing on a token whose output gradient is zero leaves no trace: here the
    last position of each sequence (it predicts no label, and no earlier position attends to it),
    so the reference leaves those tokens out."""
    _hf = pytest.importorskip("_hf")
    model = _hf.twell_copy(_hf.dense_model("llama"), l1_coef=l1).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tracker = twellrt.ActivityTracker(model)
    assert list(tracker.layers) == [f"model.layers.{i}.mlp" for i in range(_hf.LAYERS)]
    seen = {}
    hooks = _reference_hooks(model, seen)
    steps = 4
    for s in range(steps):
        ids = _hf.prompt(2, 6, seed=10 + s)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():  # inference forwards count nothing
            model(input_ids=_hf.prompt(3, 9, seed=100 + s))
    for h in hooks:
        h.remove()
    N = _hf.INTER
    assert tracker.steps() == {n: steps for n in tracker.layers}
    active, dead, counts, l0 = tracker.active_steps(), tracker.dead(), tracker.dead_counts(), tracker.l0()
    total_dead = 0
    for name in tracker.layers:
        on = seen[name]
        assert len(on) == steps
        ref_l0 = sum(o.reshape(-1, N).sum(dim=1).double().mean().item() for o in on) / steps
        ref_all = torch.stack([o.reshape(-1, N).any(dim=0) for o in on]).sum(dim=0)
        ref = ref_all if l1 > 0 else torch.stack([o[:, :-1].reshape(-1, N).any(dim=0) for o in on]).sum(dim=0)
        assert torch.equal(active[name].cpu(), ref), name
        assert torch.equal(dead[name].cpu(), ref == 0), name
        assert counts[name] == int((ref == 0).sum())
        assert l0[name] == pytest.approx(ref_l0, rel=1e-6)  # L0 is the library's exact count
        assert 0 < counts[name] < N  # the data leave some neurons idle and fire others
        if l1 == 0:
            assert (ref <= ref_all).all() and not torch.equal(ref, ref_all)  # the case does occur
        total_dead += counts[name]
    assert tracker.dead_fraction() == pytest.approx(total_dead / (N * _hf.LAYERS))
    rate = tracker.firing_rate()["model.layers.0.mlp"]
    assert torch.allclose(rate, active["model.layers.0.mlp"].float() / steps)
    # a new window; hooks removed stop counting
    tracker.reset()
    assert tracker.steps()["model.layers.0.mlp"] == 0 and tracker.dead_counts()["model.layers.0.mlp"] == 0
    assert math.isnan(tracker.mean_l0())
    tracker.remove()
    ids = _hf.prompt(2, 6, seed=50)
    model(input_ids=ids, labels=ids).loss.backward()
    assert tracker.steps()["model.layers.0.mlp"] == 0


def test_tracker_needs_twell_layers():
    with pytest.raises(twellrt.TwellInvalidArgument, match="swap_mlps"):
        twellrt.ActivityTracker(nn.Linear(4, 4))


# ---- re-initialisation ---------------------------------------------------------------------------


class DenseMLP(nn.Module):
    def __init__(self, K, N, dtype=torch.bfloat16):
        super().__init__()
        self.gate_proj = nn.Linear(K, N, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(K, N, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(N, K, bias=False, dtype=dtype)
        self.act_fn = nn.ReLU()


def _step(mlp, opt, x):
    mlp(x.clone().requires_grad_()).float().square().sum().backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reinit_touches_only_dead(dtype):
    K, N, T = 64, 256, 64
    torch.manual_seed(0)
    mlp = twellrt.TwELLGatedMLP(K, N, l1_coef=0.01, T=T, C=8, dtype=dtype)
    x = torch.randn(24, K).to(dtype)
    opt = torch.optim.Adam(mlp.parameters(), lr=1e-3, eps=1e-3)  # eps: 1e-8 is 0 in fp16
    _step(mlp, opt, x)  # the optimizer has state
    params = {n: p for n, p in mlp.named_parameters()}
    before = {n: p.detach().clone() for n, p in params.items()}
    state_before = {n: {k: v.clone() for k, v in opt.state[p].items()} for n, p in params.items()}
    dead = torch.zeros(N, dtype=torch.bool)
    dead[[0, 3, 64, 65, 200, 255]] = True
    silenced = copy.deepcopy(mlp)  # the layer without the chosen neurons' contributions
    with torch.no_grad():
        silenced.down_proj.weight_t[dead] = 0
        y0 = silenced(x)
    assert twellrt.reinit_neurons(mlp, dead, optimizer=opt, generator=torch.Generator().manual_seed(1)) == 6
    # the same parameter objects, shapes, dtypes and devices
    assert {n: p for n, p in mlp.named_parameters()} == params
    for n, p in params.items():
        assert p.shape == before[n].shape and p.dtype == dtype and p.device == before[n].device
    for n in ("gate_proj.weight", "up_proj.weight", "down_proj.weight_t"):  # rows = neurons
        now, old = params[n].detach(), before[n]
        assert torch.equal(now[~dead], old[~dead]), n
        st, st0 = opt.state[params[n]], state_before[n]
        assert torch.equal(st["step"], st0["step"])
        for k in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(st[k][~dead], st0[k][~dead]), (n, k)
        assert torch.equal(st["exp_avg"][dead], torch.zeros_like(st["exp_avg"][dead]))
        live_mean = st0["exp_avg_sq"][~dead].mean(dim=0)
        assert torch.allclose(st["exp_avg_sq"][dead], live_mean.expand(6, -1))
    for n in ("gate_proj.weight", "up_proj.weight"):
        new, live = params[n].detach()[dead].float(), before[n][~dead].float()
        assert not torch.equal(new, before[n][dead].float()), n
        assert torch.isfinite(new).all()
        # drawn at the live rows' scale (std of 6·64 draws of N(μ_k, σ_k²))
        assert 0.7 < new.std().item() / live.std().item() < 1.3, n
    assert torch.equal(params["down_proj.weight_t"].detach()[dead], torch.zeros(6, K, dtype=dtype))
    # the new neurons add nothing to the output: their down weights are zero
    with torch.no_grad():
        assert torch.equal(mlp(x), y0)
    # the same generator seed draws the same rows
    m2 = copy.deepcopy(mlp)
    twellrt.reinit_neurons(mlp, [5, 7], generator=torch.Generator().manual_seed(3))
    twellrt.reinit_neurons(m2, torch.tensor([5, 7]), generator=torch.Generator().manual_seed(3))
    assert torch.equal(mlp.gate_proj.weight, m2.gate_proj.weight)
    m3 = copy.deepcopy(m2)
    twellrt.reinit_neurons(m2, [5, 9], generator=torch.Generator().manual_seed(4))
    twellrt.reinit_neurons(m3, [i in (5, 9) for i in range(N)], generator=torch.Generator().manual_seed(4))
    assert torch.equal(m2.up_proj.weight, m3.up_proj.weight)  # a list of bools is a mask
    assert twellrt.reinit_neurons(mlp, torch.zeros(N, dtype=torch.bool)) == 0
    with pytest.raises(twellrt.TwellInvalidArgument, match="shape"):
        twellrt.reinit_neurons(mlp, torch.zeros(N + 1, dtype=torch.bool))
    with pytest.raises(twellrt.TwellInvalidArgument, match="indices"):
        twellrt.reinit_neurons(mlp, [N])
    with pytest.raises(twellrt.TwellInvalidArgument, match="bool mask or integer"):
        twellrt.reinit_neurons(mlp, [0.5])


def test_reinit_dense_mlp_columns_and_fallback():
    """A plain nn.Linear down_proj: neuron n is column n of its weight. With fewer than two kept
    neurons the rows come from nn.Linear's default init."""
    K, N = 16, 8
    torch.manual_seed(0)
    mlp = DenseMLP(K, N)
    before = {n: p.detach().clone() for n, p in mlp.named_parameters()}
    dead = torch.tensor([True, False, True, True, True, True, True, True])
    assert twellrt.reinit_neurons(mlp, dead) == 7
    assert torch.equal(mlp.down_proj.weight[:, 1], before["down_proj.weight"][:, 1])
    assert torch.equal(mlp.down_proj.weight[:, dead], torch.zeros(K, 7, dtype=torch.bfloat16))
    assert torch.equal(mlp.gate_proj.weight[1], before["gate_proj.weight"][1])
    assert mlp.gate_proj.weight[dead].abs().max().item() <= 1.0 / math.sqrt(K)


def _train_steps(_hf, model, opt, tracker, steps=2):
    """`steps` optimiser steps on fixed prompts, then the tracker's dead masks and counts and a
    copy of every layer's gate weight."""
    for s in range(steps):
        ids = _hf.prompt(2, 6, seed=20 + s)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    gates = {n: m.gate_proj.weight.detach().clone() for n, m in tracker.layers.items()}
    return tracker.dead(), tracker.dead_counts(), gates


def test_reinit_dead_neurons_from_tracker():
    _hf = pytest.importorskip("_hf")
    model = _hf.twell_copy(_hf.dense_model("llama"), l1_coef=0.01).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tracker = twellrt.ActivityTracker(model)
    dead, counts, gates = _train_steps(_hf, model, opt, tracker)
    with pytest.raises(twellrt.TwellInvalidArgument, match="min_steps"):
        twellrt.reinit_dead_neurons(tracker, min_steps=0)
    assert twellrt.reinit_dead_neurons(tracker, min_steps=3) == {n: 0 for n in counts}  # too few steps
    assert tracker.steps() == {n: 0 for n in counts}  # it started a new window anyway
    dead, counts, gates = _train_steps(_hf, model, opt, tracker)
    assert twellrt.reinit_dead_neurons(tracker, optimizer=opt) == counts
    assert all(v > 0 for v in counts.values())
    for n, m in tracker.layers.items():
        w = m.gate_proj.weight.detach()
        assert torch.equal(w[~dead[n]], gates[n][~dead[n]])
        assert not torch.equal(w[dead[n]], gates[n][dead[n]])
    assert tracker.steps() == {n: 0 for n in counts}


# ---- swap_mlps on a SiLU model -------------------------------------------------------------------


def test_swap_silu_refuses_or_converts():
    transformers = pytest.importorskip("transformers")
    _hf = pytest.importorskip("_hf")
    torch.manual_seed(0)
    silu = transformers.LlamaForCausalLM(_hf.config("llama", hidden_act="silu")).to(torch.bfloat16).eval()
    model = copy.deepcopy(silu)
    with pytest.raises(twellrt.TwellInvalidArgument, match="convert_to_relu=True") as e:
        twellrt.swap_mlps(model, T=_hf.T, C=_hf.C)
    assert "SiLU" in str(e.value)
    # refused before anything was swapped
    assert not any(isinstance(m, twellrt.TwELLGatedMLP) for m in model.modules())
    assert model.config.hidden_act == "silu"
    with pytest.warns(UserWarning, match="fine-tuning"):
        assert twellrt.swap_mlps(model, T=_hf.T, C=_hf.C, convert_to_relu=True) == _hf.LAYERS
    assert all(isinstance(l.mlp, twellrt.TwELLGatedMLP) for l in model.model.layers)
    assert model.config.hidden_act == "relu"
    # it computes the same model with ReLU in place of SiLU
    relu = copy.deepcopy(silu)
    for l in relu.model.layers:
        l.mlp.act_fn = nn.ReLU()
    ids = _hf.prompt(2, 10)
    with torch.no_grad():
        ref, got, orig = relu(ids).logits, model(ids).logits, silu(ids).logits
    assert rel(got, ref) < 4 * ULP
    assert rel(got, orig) > 10 * ULP  # and not the SiLU model any more
    # a ReLU model swaps with no warning
    import warnings

    dense = _hf.dense_model("llama")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert twellrt.swap_mlps(dense, T=_hf.T, C=_hf.C) == _hf.LAYERS


# ---- the example ---------------------------------------------------------------------------------


def test_example_l0_falls():
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("recipe_finetune", EXAMPLE)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    out = ex.main(["--steps", "60", "--log-every", "10", "--reinit-every", "30", "--l1", "0.1",
                   "--warmup-end", "20", "--quiet", "--threads", str(torch.get_num_threads())])
    l0 = [r["mean_l0"] for r in out["log"]]
    assert len(l0) == 6 and all(math.isfinite(v) for v in l0)
    assert l0[-1] < 0.5 * l0[0], l0
    assert out["log"][-1]["l1_coef"] == 0.1
    assert [r["step"] for r in out["reinit"]] == [30]
    assert math.isfinite(out["final_loss"])
