"""twellrt.load_sparse_lm on SparseLM-layout checkpoints the tests write themselves (nothing is
downloaded): "<base>_sparse_relu" configs with sparsity_* keys, MLP weights under the Hugging Face
names or as gate_weight/up_weight/down_weight, tracker.* and metrics_accumulator.* entries,
safetensors (one file or sharded) or pytorch_model.bin; compared with the dense model the
checkpoint was written from."""

import json
import os

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

import twellrt  # noqa: E402
import _hf  # noqa: E402
from _data import rel  # noqa: E402
from twellrt.sparse_lm import ReLUMLP, sparse_lm_state_dict  # noqa: E402

ULP = 2.0**-7
SPARSITY = dict(
    sparsity_l1_coeff=2e-5, sparsity_start_warmup_step=0, sparsity_end_warmup_step=1000,
    sparsity_reinitialize=True, sparsity_reinitialize_every=500,
)
BASE = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
        "mistral": transformers.MistralForCausalLM}


class NonGated(nn.Module):
    """The dense reference of a non-gated SparseLM MLP, written here, not taken from the package."""

    def __init__(self, up: nn.Linear, down: nn.Linear):
        super().__init__()
        self.up_proj, self.down_proj = up, down

    def forward(self, x):
        return self.down_proj(torch.relu(self.up_proj(x)))


def _dense(arch, gated=True, device="cpu"):
    m = _hf.dense_model(arch, device)
    if not gated:  # the sparse gate weights become the non-gated layer's up projection
        for l in m.model.layers:
            l.mlp = NonGated(l.mlp.gate_proj, l.mlp.down_proj)
    return m


def _sparse_names(sd, gated):
    """The checkpoint's own MLP layout: gate_weight [K, N], up_weight [N, K] (gated) or [K, N],
    down_weight [N, K]."""
    out = {}
    for k, v in sd.items():
        p, _, leaf = k.rpartition(".mlp.")
        if leaf == "gate_proj.weight":
            out[f"{p}.mlp.gate_weight"] = v.t()
        elif leaf == "up_proj.weight":
            out[f"{p}.mlp.up_weight"] = v if gated else v.t()
        elif leaf == "down_proj.weight":
            out[f"{p}.mlp.down_weight"] = v.t()
        else:
            out[k] = v
    return out


def write_checkpoint(d, dense, arch, layout="sparse", fmt="safetensors", gated=True, dtype=None, **cfg_kw):
    cfg = dense.config.to_dict()
    cfg.update(model_type=f"{arch}_sparse_relu", architectures=[f"{BASE[arch].__name__[:-11]}SparseReluForCausalLM"],
               auto_map={"AutoModelForCausalLM": "modeling_sparse.SparseReluForCausalLM"},
               sparsity_gated_mlp=gated, **SPARSITY)
    cfg.update(cfg_kw)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    sd = {k: v.detach().cpu() for k, v in dense.state_dict().items()}
    if layout == "sparse":
        sd = _sparse_names(sd, gated)
    sd = {k: v.to(dtype or v.dtype).contiguous().clone() for k, v in sd.items()}
    sd["model.layers.0.mlp.tracker.active_counts"] = torch.arange(_hf.INTER, dtype=torch.int64)
    sd["tracker.step"] = torch.tensor(1234)
    sd["metrics_accumulator.l0_sum"] = torch.tensor(3.5)
    if fmt in ("safetensors", "sharded"):
        from safetensors.torch import save_file

        if fmt == "safetensors":
            save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        else:
            keys = sorted(sd)
            shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
            for name, ks in shards.items():
                save_file({k: sd[k] for k in ks}, os.path.join(d, name), metadata={"format": "pt"})
            index = {"metadata": {}, "weight_map": {k: n for n, ks in shards.items() for k in ks}}
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump(index, f)
    else:
        torch.save(sd, os.path.join(d, "pytorch_model.bin"))
    return d


def _check_same_weights(model, dense):
    sd, sm = dense.state_dict(), model.state_dict()
    assert sorted(sm) == sorted(sd)
    for k, v in sd.items():
        assert sm[k].dtype == v.dtype and torch.equal(sm[k].cpu(), v.cpu()), k


@pytest.mark.parametrize("arch,layout,fmt", [
    ("llama", "hf", "safetensors"),
    ("llama", "sparse", "bin"),
    ("qwen2", "sparse", "sharded"),
    ("mistral", "sparse", "safetensors"),
    ("mistral", "hf", "bin"),
])
def test_load_gated(arch, layout, fmt, tmp_path, device):
    dense = _dense(arch, device=device)
    # the fp32 case: a training checkpoint, loaded in bf16 (its values are bf16 numbers here)
    write_checkpoint(tmp_path, dense, arch, layout, fmt, dtype=torch.float32 if fmt == "bin" else None)
    m = twellrt.load_sparse_lm(tmp_path, T=_hf.T, C=_hf.C, device=device)
    assert type(m) is BASE[arch] and not m.training
    assert m.config.model_type == arch and m.config.architectures == [BASE[arch].__name__]
    assert m.config.sparsity_l1_coeff == 2e-5 and m.config.sparsity_end_warmup_step == 1000
    assert not hasattr(m.config, "auto_map") or not m.config.auto_map
    assert all(isinstance(l.mlp, twellrt.TwELLGatedMLP) for l in m.model.layers)
    _check_same_weights(m, dense)
    ids = _hf.prompt(2, 10, device)
    with torch.no_grad():
        want = dense(ids).logits
        got = m(ids).logits
        assert rel(got, want) < 4 * ULP
        d2 = twellrt.load_sparse_lm(tmp_path, twell=False, device=device)
        assert isinstance(d2.model.layers[0].mlp, type(dense.model.layers[0].mlp))
        assert torch.equal(d2(ids).logits, want)


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_load_non_gated(fmt, tmp_path, device):
    dense = _dense("llama", gated=False, device=device)
    write_checkpoint(tmp_path, dense, "llama", "sparse", fmt, gated=False)
    m = twellrt.load_sparse_lm(tmp_path, T=_hf.T, C=_hf.C, device=device)
    assert isinstance(m, transformers.LlamaForCausalLM)
    assert all(isinstance(l.mlp, twellrt.TwELLMLP) for l in m.model.layers)
    _check_same_weights(m, dense)
    ids = _hf.prompt(2, 10, device)
    with torch.no_grad():
        want = dense(ids).logits
        assert rel(m(ids).logits, want) < 4 * ULP
        seq = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
        assert torch.equal(seq, dense.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False))
        d2 = twellrt.load_sparse_lm(tmp_path, twell=False, device=device)
        assert all(isinstance(l.mlp, ReLUMLP) for l in d2.model.layers)
        assert torch.equal(d2(ids).logits, want)


def test_load_tied_embeddings(tmp_path):
    dense = _hf.dense_model("llama", tie_word_embeddings=True)
    d = write_checkpoint(tmp_path, dense, "llama")
    from safetensors.torch import load_file, save_file

    sd = load_file(os.path.join(d, "model.safetensors"))
    del sd["lm_head.weight"]  # a tied checkpoint stores the embedding once
    save_file(sd, os.path.join(d, "model.safetensors"))
    m = twellrt.load_sparse_lm(d, T=_hf.T)
    assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
    _check_same_weights(m, dense)


def test_loaded_model_trains_and_saves_as_base(tmp_path):
    dense = _dense("qwen2")
    write_checkpoint(tmp_path / "sparse", dense, "qwen2")
    m = twellrt.load_sparse_lm(tmp_path / "sparse", l1_coef=2e-5, T=_hf.T, C=_hf.C)
    assert m.model.layers[0].mlp.l1_coef == 2e-5
    m.train()
    ids = _hf.prompt(2, 8)
    m(ids, labels=ids).loss.backward()
    assert m.model.layers[0].mlp.gate_proj.weight.grad is not None and m.model.layers[0].mlp.l0.item() > 0
    # save_pretrained writes a plain Qwen2 checkpoint (the sparsity_* keys kept in its config)
    m.save_pretrained(tmp_path / "plain")
    with open(tmp_path / "plain" / "config.json") as f:
        cfg = json.load(f)
    assert cfg["model_type"] == "qwen2" and cfg["sparsity_l1_coeff"] == 2e-5 and "auto_map" not in cfg
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "plain", dtype=torch.bfloat16)
    assert type(back) is transformers.Qwen2ForCausalLM
    _check_same_weights(back, m)
    # and it loads again through load_sparse_lm as a plain ReLU model of the base type
    again = twellrt.load_sparse_lm(tmp_path / "plain", T=_hf.T, C=_hf.C)
    _check_same_weights(again, m)


def test_default_tile(tmp_path):
    dense = _dense("llama")
    write_checkpoint(tmp_path, dense, "llama")
    m = twellrt.load_sparse_lm(tmp_path)
    assert m.model.layers[0].mlp.T == 256  # the largest of 256, 128, 64 dividing intermediate_size


def test_state_dict_mapping():
    K, N = 16, 64
    g, u, d = torch.randn(K, N), torch.randn(N, K), torch.randn(N, K)
    sd = {"model.layers.3.mlp.gate_weight": g, "model.layers.3.mlp.up_weight": u, "model.layers.3.mlp.down_weight": d,
          "model.norm.weight": torch.ones(K), "model.layers.3.mlp.tracker.x": torch.ones(3),
          "metrics_accumulator.y": torch.ones(1), "tracker": torch.ones(1)}
    out = sparse_lm_state_dict(sd, gated=True)
    assert sorted(out) == ["model.layers.3.mlp.down_proj.weight", "model.layers.3.mlp.gate_proj.weight",
                           "model.layers.3.mlp.up_proj.weight", "model.norm.weight"]
    assert torch.equal(out["model.layers.3.mlp.gate_proj.weight"], g.t())
    assert torch.equal(out["model.layers.3.mlp.up_proj.weight"], u)
    assert torch.equal(out["model.layers.3.mlp.down_proj.weight"], d.t())
    assert out["model.layers.3.mlp.gate_proj.weight"].is_contiguous()
    ng = sparse_lm_state_dict({"mlp.up_weight": g, "mlp.down_weight": d}, gated=False)
    assert torch.equal(ng["mlp.up_proj.weight"], g.t()) and torch.equal(ng["mlp.down_proj.weight"], d.t())
    with pytest.raises(ValueError, match="both present"):
        sparse_lm_state_dict({"mlp.gate_weight": g, "mlp.gate_proj.weight": g.t()})
    with pytest.raises(ValueError, match="2-D"):
        sparse_lm_state_dict({"mlp.down_weight": torch.ones(3)})


def test_errors(tmp_path):
    dense = _dense("llama")
    with pytest.raises(ValueError, match="not a causal LM"):
        twellrt.load_sparse_lm(write_checkpoint(tmp_path / "a", dense, "llama", model_type="nosuchbase_sparse_relu"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.json").write_text(json.dumps({**dense.config.to_dict(), "model_type": "llama_sparse_relu"}))
    with pytest.raises(FileNotFoundError, match="no weights"):
        twellrt.load_sparse_lm(tmp_path / "b")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        twellrt.load_sparse_lm(tmp_path / "nothing-here")
    # the config says non-gated, the tensors are gated
    with pytest.raises(ValueError, match="gate weights"):
        twellrt.load_sparse_lm(write_checkpoint(tmp_path / "c", dense, "llama", sparsity_gated_mlp=False))
    # a tensor missing from the checkpoint is an error, not a random initialisation
    d = write_checkpoint(tmp_path / "d", dense, "llama", fmt="bin")
    sd = torch.load(os.path.join(d, "pytorch_model.bin"), weights_only=True)
    del sd["model.layers.1.self_attn.k_proj.weight"]
    torch.save(sd, os.path.join(d, "pytorch_model.bin"))
    with pytest.raises(ValueError, match="k_proj"):
        twellrt.load_sparse_lm(d)
    # a plain base type must be ReLU; a *_sparse_relu type is ReLU whatever hidden_act says
    with pytest.raises(ValueError, match="ReLU"):
        twellrt.load_sparse_lm(write_checkpoint(tmp_path / "e", dense, "llama", model_type="llama", hidden_act="silu"))
    with pytest.warns(UserWarning, match="hidden_act"):
        m = twellrt.load_sparse_lm(write_checkpoint(tmp_path / "f", dense, "llama", hidden_act="silu"), T=_hf.T)
    assert m.config.hidden_act == "relu"
    with pytest.raises(ValueError, match="bf16 or fp16"):
        twellrt.load_sparse_lm(tmp_path / "f", dtype=torch.float32)
