"""Hugging Face causal LMs (Llama, Qwen2, Mistral with hidden_act="relu") swapped to twellrt MLPs
against the same dense model: logits, greedy generate (dynamic and static cache, eager and
compiled), save_pretrained / from_pretrained, a training step, torch.compile of the whole model.
Tiny models (_hf.py) whose MLPs are as sparse as a trained ReLU model's."""

import os

import pytest
import torch

transformers = pytest.importorskip("transformers")

import twellrt  # noqa: E402
import _hf  # noqa: E402
from _data import rel  # noqa: E402

ULP = 2.0**-7  # bf16
GEN = dict(max_new_tokens=12, do_sample=False, output_logits=True, return_dict_in_generate=True)


def _kw(arch):
    # a window shorter than prompt + generated tokens, so Mistral's sliding-window cache is used
    return {"sliding_window": 8} if arch == "mistral" else {}


def _pair(arch, device, seed=0, l1_coef=0.0, **kw):
    dense = _hf.dense_model(arch, device, seed=seed, **_kw(arch), **kw)
    return dense, _hf.twell_copy(dense, l1_coef=l1_coef)


@pytest.mark.parametrize("arch", _hf.ARCHS)
def test_swap_keeps_state_dict_and_logits(arch, device):
    dense, tw = _pair(arch, device)
    assert all(isinstance(l.mlp, twellrt.TwELLGatedMLP) for l in tw.model.layers)
    ids = _hf.prompt(2, 12, device)
    act = _hf.activity(dense, ids)
    assert all(0 < a < 0.1 * _hf.INTER for a in act), act  # real sparse data, as trained models have
    sd, sw = dense.state_dict(), tw.state_dict()
    assert list(sw) == list(sd)
    for k, v in sd.items():
        assert sw[k].shape == v.shape and torch.equal(sw[k], v), k
    with torch.no_grad():
        a = dense(ids, output_hidden_states=True)
        b = tw(ids, output_hidden_states=True)
    err = rel(b.logits, a.logits)
    print(f"{arch} {device}: logits rel {err:.2e}, last hidden rel {rel(b.hidden_states[-1], a.hidden_states[-1]):.2e}")
    assert err < 4 * ULP
    assert rel(b.hidden_states[-1], a.hidden_states[-1]) < 4 * ULP


def _generate(model, ids, **kw):
    out = model.generate(ids, attention_mask=torch.ones_like(ids), **GEN, **kw)
    return out.sequences, torch.stack(out.logits, 1).float()


def _check_same_generation(dense_out, tw_out, what):
    (seq_d, log_d), (seq_t, log_t) = dense_out, tw_out
    # Greedy tokens can only differ where the dense model's top-two margin is within the logits'
    # difference; the models of _hf.py keep it far wider, which this checks first.
    top = log_d.topk(2, -1).values
    margin = (top[..., 0] - top[..., 1]).min().item()
    diff = (log_t - log_d).abs().max().item()
    print(f"{what}: min margin {margin:.3g}, max |logit diff| {diff:.3g}, rel {rel(log_t, log_d):.2e}")
    assert margin > 4 * diff
    assert torch.equal(seq_t, seq_d)
    assert rel(log_t, log_d) < 4 * ULP


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("arch", _hf.ARCHS)
def test_generate_matches_dense(arch, cache, device):
    dense, tw = _pair(arch, device)
    ids = _hf.prompt(2, 6, device)
    kw = {} if cache == "dynamic" else dict(cache_implementation="static", disable_compile=True)
    _check_same_generation(_generate(dense, ids, **kw), _generate(tw, ids, **kw), f"{arch} {cache} {device}")


def test_compiled_static_decode(device):
    """Transformers' compiled decode step with a static cache: on the GPU its default (inductor,
    "reduce-overhead": CUDA graphs, so the modules reserve first); on the CPU, where Transformers
    compiles only when asked, Dynamo + AOTAutograd (aot_eager) with fullgraph, which proves the
    step traces into one graph without compiling C++ on a small CI machine."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    dense, tw = _pair("llama", device)
    ids = _hf.prompt(2, 6, device)
    want = _generate(dense, ids, cache_implementation="static", disable_compile=True)
    if device.type == "cuda":
        for l in tw.model.layers:
            l.mlp.reserve(ids.numel(), 64.0)
        cc = None
    else:
        cc = transformers.CompileConfig(backend="aot_eager", fullgraph=True, mode=None)
        cc._compile_all_devices = True  # Transformers' switch for compiling on the CPU
    got = _generate(tw, ids, cache_implementation="static", compile_config=cc)
    assert hasattr(tw, "_compiled_call"), "generate did not compile the decode step"
    assert not counters["graph_break"], dict(counters["graph_break"])
    if device.type == "cuda" and "inductor" in counters:
        assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])
    _check_same_generation(want, got, f"compiled static decode {device}")
    torch._dynamo.reset()


@pytest.mark.parametrize("arch", _hf.ARCHS)
def test_save_pretrained_round_trip(arch, device, tmp_path):
    dense, tw = _pair(arch, device)
    tw.save_pretrained(tmp_path)
    sd = {k: v.cpu() for k, v in dense.state_dict().items()}
    from safetensors import safe_open

    with safe_open(os.path.join(tmp_path, "model.safetensors"), "pt") as f:
        assert sorted(f.keys()) == sorted(sd)  # the Hugging Face names and layouts
        for k in f.keys():
            assert torch.equal(f.get_tensor(k), sd[k]), k
    back, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, output_loading_info=True)
    assert not any(info.values()), info
    assert type(back) is type(dense)
    for k, v in back.state_dict().items():
        assert torch.equal(v, sd[k]), k
    back = back.to(device).eval()
    assert twellrt.swap_mlps(back, T=_hf.T, C=_hf.C) == _hf.LAYERS
    ids = _hf.prompt(2, 9, device)
    with torch.no_grad():
        assert torch.equal(back(ids).logits, tw(ids).logits)
    # and a dense state_dict loads into a swapped model as it is
    dense2 = _hf.dense_model(arch, device, seed=1, **_kw(arch))
    tw.load_state_dict(dense2.state_dict())
    with torch.no_grad():
        assert rel(tw(ids).logits, dense2(ids).logits) < 4 * ULP


def _train_step(model, ids, lam_dense=None):
    """CE loss of one forward + backward. lam_dense adds the L1 term that twellrt's backward adds
    itself (l1_coef · Σ|h| / tokens per layer) to a dense model's loss."""
    model.train()
    model.zero_grad()
    hs, hooks = [], []
    if lam_dense is not None:
        hooks = [l.mlp.down_proj.register_forward_pre_hook(lambda m, i: hs.append(i[0])) for l in model.model.layers]
    try:
        out = model(ids, labels=ids)
    finally:
        for h in hooks:
            h.remove()
    loss = out.loss + sum(lam_dense * h.float().abs().sum() / ids.numel() for h in hs)
    loss.backward()
    return out.loss.item(), _hf.grads(getattr(model, "_orig_mod", model))  # torch.compile's wrapper


# Gradients that depend on the ReLU masks only through values near zero: the last layer's up and
# down projections, the final norm and the head. In a layer fed by an earlier twellrt or dense MLP,
# inputs differ by rounding, a neuron near its threshold can fire in one model only, and the
# gradients through its gate (dWg, dx, and everything below) jump by that neuron's term; such
# gradients are compared only on one-layer models, whose MLP inputs are the same in both.
def _mask_free(name, layers):
    last = f"model.layers.{layers - 1}.mlp."
    return name in ("lm_head.weight", "model.norm.weight", last + "up_proj.weight", last + "down_proj.weight")


@pytest.mark.parametrize("arch", _hf.ARCHS)
def test_training_step_matches_dense(arch, device):
    lam = 0.01  # large enough that the check fails without the L1 term (tried: all three models)
    ids = _hf.prompt(2, 16, device, seed=5)
    for layers in (1, _hf.LAYERS):
        dense, tw = _pair(arch, device, l1_coef=lam, num_hidden_layers=layers)
        with torch.no_grad():  # a flatter head than generation wants: loss ≈ log(vocab)
            dense.lm_head.weight.mul_(0.125)
            tw.lm_head.weight.mul_(0.125)
        ld, gd = _train_step(dense, ids, lam)
        lt, gt = _train_step(tw, ids)
        assert list(gt) == list(gd)
        assert abs(lt - ld) < 2e-3 * abs(ld)
        for k in gd:
            assert torch.isfinite(gt[k]).all() and gt[k].abs().sum() > 0, k
            if layers == 1 or _mask_free(k, layers):
                assert rel(gt[k], gd[k]) < 4 * ULP, (layers, k, rel(gt[k], gd[k]))
        worst = max(rel(gt[k], gd[k]) for k in gd)
        print(f"{arch} {device} {layers} layer(s): loss {lt:.5f} vs {ld:.5f}, worst grad rel {worst:.3g}")
        assert tw.model.layers[0].mlp.l0.item() > 0


def _backend(device):
    # as test_modules: inductor on the GPU; on the CPU aot_eager traces the same graph (Dynamo +
    # AOTAutograd with the ops' fake implementations). Inductor on the CPU compiles C++ for this
    # model for about two minutes on a two-core machine, too slow for CI.
    return "inductor" if device.type == "cuda" else "aot_eager"


def test_compile_whole_model_inference(device):
    torch._dynamo.reset()
    _, tw = _pair("llama", device)
    ids = _hf.prompt(2, 16, device)
    with torch.no_grad():
        want = tw(ids, use_cache=False).logits
        got = torch.compile(tw, fullgraph=True, backend=_backend(device))(ids, use_cache=False).logits
    # aot_eager runs the same kernels as eager; inductor fuses the dense ops and rounds them anew
    assert rel(got, want) < (2 if device.type == "cpu" else 4) * ULP
    torch._dynamo.reset()


def test_compile_whole_model_training(device):
    torch._dynamo.reset()
    _, tw = _pair("llama", device, l1_coef=0.01)
    ids = _hf.prompt(2, 16, device, seed=5)
    le, ge = _train_step(tw, ids)
    cm = torch.compile(tw, fullgraph=True, backend=_backend(device))
    lc, gc_ = _train_step(cm, ids)
    assert abs(lc - le) < 2e-3 * abs(le)
    for k in ge:
        # inductor rounds the dense ops differently: the second layer's masks can differ, as
        # between dense and twellrt (see _mask_free)
        if device.type == "cpu":
            assert rel(gc_[k], ge[k]) < 2 * ULP, k
        elif _mask_free(k, _hf.LAYERS):
            assert rel(gc_[k], ge[k]) < 4 * ULP, k
    torch._dynamo.reset()
