"""The models the Hugging Face benchmark runs: transformers' LlamaForCausalLM at the paper's shapes
with synthetic weights whose ReLU MLPs have trained-like activity (calibrated by
bench_model.calibrate, reached through a small adapter), or a SparseLM checkpoint
(twellrt.load_sparse_lm); and the twellrt copy of a dense model, sharing its weights."""

from __future__ import annotations

import copy
import os
import time

import torch

import bench_model as bm

# hidden, intermediate, layers, heads. 1.5b and 2b as bench_model's; 7b Llama-2-7B's widths.
SHAPES = {
    "1.5b": (2048, 5632, 28, 16),
    "2b": (2304, 6144, 30, 18),
    "7b": (4096, 11008, 32, 32),
    "smoke": (128, 512, 2, 4),  # --smoke: any device, under a minute on a CPU
}
# Mean active neurons per token over layers: bench_model's 29 at N = 5632 (0.51% of N), the same
# fraction of N at the other widths.
DENSITY = bm.MEAN_ACTIVE / 5632


def default_active(N: int) -> float:
    return DENSITY * N


def llama_config(shape: str, layers: int = 0, max_positions: int = 4096):
    import transformers

    d, n, L, H = SHAPES[shape]
    return transformers.LlamaConfig(
        vocab_size=bm.VOCAB, hidden_size=d, intermediate_size=n, num_hidden_layers=layers or L,
        num_attention_heads=H, num_key_value_heads=H, hidden_act="relu",
        max_position_embeddings=max_positions, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=bm.BOS, eos_token_id=None, pad_token_id=None,
    )


def make_ids(B: int, S: int, vocab: int, bos, gen: torch.Generator, device) -> torch.Tensor:
    """Random token ids [B, S] (never 0 or the BOS id), the first of each sequence the BOS token
    when the model has one (bench_model's first-token convention)."""
    ids = torch.randint(2, vocab, (B, S), generator=gen)
    if bos is not None:
        ids[:, 0] = bos
    return ids.to(device)


class _Layer:
    """A decoder layer of transformers' Llama seen as bench_model's Layer: self_attn(x, cos, sin)."""

    def __init__(self, layer):
        self._layer = layer
        self.input_layernorm = layer.input_layernorm
        self.post_attention_layernorm = layer.post_attention_layernorm
        self.mlp = layer.mlp

    def self_attn(self, x, cos, sin):
        # no mask: causal SDPA (the model is built with attn_implementation="sdpa")
        return self._layer.self_attn(x, position_embeddings=(cos, sin), attention_mask=None)[0]


class _Adapter:
    """What bench_model.calibrate reads of a model (embed_tokens, layers, rope_tables), over a
    transformers LlamaForCausalLM, so the same calibration sets its weights."""

    def __init__(self, model):
        self._model = model
        self.embed_tokens = model.model.embed_tokens
        self.layers = [_Layer(l) for l in model.model.layers]

    def rope_tables(self, S, device):
        pos = torch.arange(S, device=device)[None]
        like = torch.empty(1, S, 1, device=device, dtype=self._model.lm_head.weight.dtype)
        return self._model.model.rotary_emb(like, pos)


@torch.no_grad()
def init_weights(model, seed: int) -> None:
    """bench_model.init_weights's recipe on a transformers Llama, drawn on the model's device:
    N(0, 0.02²) matrices, embeddings N(0, 1), o_proj N(0, 0.005²); channel 0 of the residual
    stream a constant (the embedding's column 0, which no layer writes: row 0 of every o_proj and
    down_proj is zero), smaller for the BOS token."""
    dev = model.lm_head.weight.device
    g = torch.Generator(device=dev).manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 1.0 if "embed_tokens" in name else 0.005 if "o_proj" in name else 0.02
            p.copy_((torch.randn(p.shape, generator=g, device=dev) * std).to(p.dtype))
    E = model.model.embed_tokens.weight
    E[:, 0] = bm.C_CONST
    E[bm.BOS, 0] = bm.C_BOS
    for lyr in model.model.layers:
        lyr.self_attn.o_proj.weight[0].zero_()
        lyr.mlp.down_proj.weight[0].zero_()


@torch.no_grad()
def activity(model, ids) -> list:
    """Per layer of a dense model on ids: mean active neurons per token (all, non-first, first
    tokens), the most in one token, and the fraction of neurons never active (relu output > 0)."""
    rows, hooks = [], []
    first = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    first[:, 0] = True
    first = first.flatten()

    def hook(mod, args, out):
        a = out.flatten(0, -2) > 0
        per = a.sum(-1).float()
        rows.append(dict(mean=per.mean().item(), body=per[~first].mean().item(), first=per[first].mean().item(),
                         max=per.max().item(), dead=(~a.any(0)).float().mean().item()))

    for lyr in model.model.layers:
        hooks.append(lyr.mlp.act_fn.register_forward_hook(hook))
    try:
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
    finally:
        for h in hooks:
            h.remove()
    return rows


def synthetic(shape: str, device, seed: int, seq: int, calib_batch: int, active: float = 0.0, layers: int = 0):
    """A dense LlamaForCausalLM (bf16, SDPA) of `shape` with calibrated activity, and what was done:
    {"targets": per-layer targets, "activity": measured on a held-out batch, "build_s"}."""
    import transformers

    t0 = time.time()
    cfg = llama_config(shape, layers, max(4096, 2 * seq))
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    init_weights(model, seed)
    L, N = cfg.num_hidden_layers, cfg.intermediate_size
    targets = bm.layer_targets(L, active or default_active(N))
    gen = torch.Generator().manual_seed(seed + 7)
    bm.calibrate(_Adapter(model), targets, make_ids(calib_batch, seq, bm.VOCAB, bm.BOS, gen, device), seed)
    act = activity(model, make_ids(calib_batch, seq, bm.VOCAB, bm.BOS, gen, device))  # held out
    return model, dict(targets=targets, activity=act, build_s=time.time() - t0, source="synthetic")


def checkpoint(path: str, device, l1_coef: float = 0.0):
    """The dense and the twellrt model of a local SparseLM checkpoint, each loaded by
    twellrt.load_sparse_lm (twell=False / True), and what was done."""
    import twellrt

    t0 = time.time()
    dense = twellrt.load_sparse_lm(path, twell=False, device=device, attn_implementation="sdpa")
    tw = twellrt.load_sparse_lm(path, twell=True, device=device, l1_coef=l1_coef, attn_implementation="sdpa")
    return dense, tw, dict(build_s=time.time() - t0, source=f"checkpoint:{os.path.abspath(path)}")


def twell_copy(dense, l1_coef: float, T: int = 256):
    """A copy of dense whose MLPs are twellrt's (twellrt.swap_mlps): every other parameter is the
    dense model's own Parameter object (no second copy of the weights; gradients are shared too,
    so the benchmark zeroes them before each step), the down projections copied into the
    library's layout."""
    import twellrt

    memo = {id(p): p for p in dense.parameters()}
    tw = copy.deepcopy(dense, memo)
    n = twellrt.swap_mlps(tw, l1_coef=l1_coef, T=T)
    if n != dense.config.num_hidden_layers:
        raise RuntimeError(f"swap_mlps swapped {n} MLPs of {dense.config.num_hidden_layers} layers")
    return tw.eval()


def shape_of(model) -> dict:
    c = model.config
    return dict(hidden=c.hidden_size, intermediate=c.intermediate_size, layers=c.num_hidden_layers,
                heads=c.num_attention_heads, kv_heads=getattr(c, "num_key_value_heads", None),
                vocab=c.vocab_size, params=sum(p.numel() for p in model.parameters()))
