"""Loads the SparseLM checkpoints (Hugging Face directories or repositories whose config.json has
model_type "<base>_sparse_relu") as the base Transformers architecture with twellrt MLPs."""

from __future__ import annotations

import functools
import json
import os
import warnings
from typing import Dict, Optional

import torch
from torch import nn

from .modules import TwELLMLP, swap_mlps

__all__ = ["load_sparse_lm", "sparse_lm_config", "sparse_lm_state_dict", "ReLUMLP"]

SUFFIX = "_sparse_relu"
# Training-time bookkeeping saved beside the weights (activity trackers, metric sums): not weights.
DROPPED = ("tracker", "metrics_accumulator")
# Config keys naming the checkpoint's own (remote) classes; the loaded model is the base class.
_FOREIGN = ("auto_map", "architectures")
# The checkpoint's own MLP tensors: (its name, the nn.Linear weight's name, stored transposed when
# gated, when not). An nn.Linear weight is [out, in]; a transposed one is stored [in, out].
_RENAMES = (
    ("gate_weight", "gate_proj.weight", True, True),
    ("up_weight", "up_proj.weight", False, True),
    ("down_weight", "down_proj.weight", True, True),
)
_WEIGHT_FILES = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json", "pytorch_model.bin")


class ReLUMLP(nn.Module):
    """The dense non-gated MLP of a SparseLM checkpoint with sparsity_gated_mlp = false:
    y = down_proj(relu(up_proj(x))), with the parameters (and state_dict) of TwELLMLP."""

    def __init__(self, hidden_size: int, intermediate_size: int, device=None, dtype=None):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, **kw)
        self.act_fn = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.up_proj(x)))


def _base_type(model_type: str) -> str:
    return model_type[: -len(SUFFIX)] if model_type.endswith(SUFFIX) else model_type


def sparse_lm_config(config_dict: dict):
    """The base architecture's config (LlamaConfig for "llama_sparse_relu", ...) from a SparseLM
    config.json's dict. The `sparsity_*` keys stay as attributes (config.sparsity_l1_coeff, ...),
    so save_pretrained writes them back; auto_map and architectures, which name the checkpoint's
    own classes, are replaced by the base causal LM. A *_sparse_relu type means ReLU MLPs whatever
    hidden_act says (a warning when it says otherwise); a plain base type must say "relu".
    Raises ValueError for a base type Transformers does not know."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    d = {k: v for k, v in config_dict.items() if k not in _FOREIGN}
    model_type = str(d.get("model_type", ""))
    base = _base_type(model_type)
    if base not in CONFIG_MAPPING or base not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ValueError(
            f"twellrt.load_sparse_lm: model_type {model_type!r}: base type {base!r} is not a causal LM "
            f"that this transformers knows"
        )
    act = d.get("hidden_act", "relu")
    if act != "relu":
        if base == model_type:
            raise ValueError(
                f"twellrt.load_sparse_lm: hidden_act is {act!r}; twellrt computes ReLU MLPs only "
                f"(a SparseLM checkpoint has model_type '<base>{SUFFIX}')"
            )
        warnings.warn(f"twellrt.load_sparse_lm: {model_type} config says hidden_act={act!r}; its MLPs are ReLU")
    d["model_type"] = base
    d["hidden_act"] = "relu"
    cfg = CONFIG_MAPPING[base].from_dict(d)
    cfg.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[base]]
    return cfg


def _dropped(key: str) -> bool:
    return any(part in DROPPED for part in key.split("."))


def sparse_lm_state_dict(state_dict: Dict[str, torch.Tensor], gated: bool = True) -> Dict[str, torch.Tensor]:
    """A SparseLM checkpoint's tensors in the Hugging Face layout: `tracker.*` and
    `metrics_accumulator.*` entries (at any depth) dropped; `<mlp>.gate_weight` [K, N] →
    `<mlp>.gate_proj.weight` [N, K]; `<mlp>.up_weight` ([N, K] when gated, [K, N] when not) →
    `<mlp>.up_proj.weight` [N, K]; `<mlp>.down_weight` [N, K] → `<mlp>.down_proj.weight` [K, N].
    Other keys, including MLPs already saved as gate_proj/up_proj/down_proj.weight, are kept as
    they are. Raises ValueError for a renamed tensor that is not 2-D or whose target is also
    present."""
    out: Dict[str, torch.Tensor] = {}
    for key, t in state_dict.items():
        if _dropped(key):
            continue
        prefix, _, leaf = key.rpartition(".")
        for suffix, name, t_gated, t_plain in _RENAMES:
            if leaf == suffix:
                if t.dim() != 2:
                    raise ValueError(f"twellrt.load_sparse_lm: {key} has shape {tuple(t.shape)}, expected 2-D")
                if t_gated if gated else t_plain:
                    t = t.t().contiguous()
                key = f"{prefix}.{name}" if prefix else name
                if key in state_dict or key in out:
                    raise ValueError(f"twellrt.load_sparse_lm: {prefix + '.' if prefix else ''}{suffix} and {key} both present")
                break
        out[key] = t
    return out


def _is_local(p: str) -> bool:
    return os.path.isdir(p) or p.startswith(("/", "./", "../", "~")) or os.path.exists(p)


def _resolve(path_or_repo_id: str, name: str, hub: dict) -> Optional[str]:
    """A file of the checkpoint: local directory or Hub repository (downloaded into the cache by
    transformers' own resolver). None when it is not there."""
    if _is_local(path_or_repo_id):
        f = os.path.join(os.path.expanduser(path_or_repo_id), name)
        return f if os.path.isfile(f) else None
    from transformers.utils import cached_file

    return cached_file(path_or_repo_id, name, _raise_exceptions_for_missing_entries=False, **hub)


def _read_tensors(path_or_repo_id: str, hub: dict) -> Dict[str, torch.Tensor]:
    """Every tensor of the first weight format present, as Transformers prefers them: sharded or
    single safetensors, then sharded or single pytorch_model.bin."""
    for name in _WEIGHT_FILES:
        f = _resolve(path_or_repo_id, name, hub)
        if f is None:
            continue
        if name.endswith(".index.json"):
            with open(f) as fh:
                shards = sorted(set(json.load(fh)["weight_map"].values()))
            files = []
            for s in shards:
                sf = _resolve(path_or_repo_id, s, hub)
                if sf is None:
                    raise FileNotFoundError(f"twellrt.load_sparse_lm: {path_or_repo_id}: shard {s} of {name} is missing")
                files.append(sf)
        else:
            files = [f]
        sd: Dict[str, torch.Tensor] = {}
        for fn in files:
            if ".safetensors" in name:
                from safetensors.torch import load_file

                sd.update(load_file(fn))
            else:
                sd.update(torch.load(fn, map_location="cpu", weights_only=True))
        return sd
    raise FileNotFoundError(
        f"twellrt.load_sparse_lm: {path_or_repo_id}: no weights ({', '.join(_WEIGHT_FILES)})"
    )


@functools.lru_cache(maxsize=None)
def _non_gated_class(base_cls):
    """The base causal LM with ReLUMLP in every decoder layer, so that Transformers' own loading
    (meta-device construction, dtype, missing-key checks) builds a non-gated model. One class
    per base class."""

    def __init__(self, config, *args, **kwargs):
        base_cls.__init__(self, config, *args, **kwargs)
        if getattr(config, "mlp_bias", False):
            raise ValueError("twellrt.load_sparse_lm: MLPs with biases are not supported")
        for m in list(self.modules()):
            mlp = getattr(m, "mlp", None)
            if isinstance(mlp, nn.Module) and hasattr(mlp, "up_proj") and not isinstance(mlp, ReLUMLP):
                w = mlp.up_proj.weight
                m.mlp = ReLUMLP(config.hidden_size, config.intermediate_size, device=w.device, dtype=w.dtype)

    return type(base_cls.__name__.replace("ForCausalLM", "NonGatedReLUForCausalLM"), (base_cls,), {"__init__": __init__})


def _swap_non_gated(model: nn.Module, T: int, C: int, path: str) -> int:
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, ReLUMLP):
                w = child.up_proj.weight
                new = TwELLMLP(w.shape[1], w.shape[0], T=T, C=C, path=path, device=w.device, dtype=w.dtype)
                new.load_state_dict(child.state_dict())  # the modules' public (HF) layout
                new.train(child.training)
                setattr(parent, name, new)
                n += 1
    return n


def _default_T(N: int) -> int:
    for T in (256, 128, 64):
        if N % T == 0:
            return T
    raise ValueError(f"twellrt.load_sparse_lm: intermediate_size {N} is not a multiple of 64 (the smallest tile T)")


def load_sparse_lm(
    path_or_repo_id: str,
    *,
    twell: bool = True,
    dtype: torch.dtype = torch.bfloat16,
    device=None,
    l1_coef: float = 0.0,
    T: Optional[int] = None,
    C: int = 8,
    path: str = "auto",
    train_path: str = "auto",
    revision: Optional[str] = None,
    token=None,
    cache_dir: Optional[str] = None,
    local_files_only: bool = False,
    **model_kwargs,
):
    """Loads a SparseLM checkpoint (a local directory or a Hub repository id) as the base
    Transformers causal LM (LlamaForCausalLM for "llama_sparse_relu", Qwen2ForCausalLM,
    MistralForCausalLM, ...) and, with twell=True, swaps its MLPs for twellrt's; returns the model
    in eval mode on `device` (default: the CPU, or as `device_map` in model_kwargs puts it).

    - config.json → sparse_lm_config (sparsity_* keys kept as config attributes).
    - Weights: model.safetensors (sharded or not), else pytorch_model.bin (sharded or not), mapped
      by sparse_lm_state_dict (both MLP layouts; tracker.* / metrics_accumulator.* dropped), then
      loaded by Transformers' from_pretrained (config + state_dict) in `dtype`; a missing or
      unexpected tensor raises ValueError (nothing is left randomly initialised).
    - Gated checkpoints (sparsity_gated_mlp true or absent): swap_mlps(l1_coef, T, C, path,
      train_path): TwELLGatedMLP holding the same weights, trainable; the state_dict is the base
      model's, so save_pretrained writes a plain checkpoint of the base type.
    - Non-gated (sparsity_gated_mlp false): the decoder layers hold ReLUMLP (twell=False) or
      TwELLMLP (twell=True, inference only: call it under torch.no_grad()).
    T defaults to the largest of 256, 128, 64 that divides intermediate_size. `dtype` must be
    bf16 or fp16 for twell=True (the library's types). model_kwargs go to from_pretrained
    (attn_implementation, device_map, ...)."""
    import transformers

    if twell and dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"twellrt.load_sparse_lm: dtype {dtype}: twellrt layers are bf16 or fp16")
    hub = dict(revision=revision, token=token, cache_dir=cache_dir, local_files_only=local_files_only)
    path_or_repo_id = os.fspath(path_or_repo_id)
    cfg_file = _resolve(path_or_repo_id, "config.json", hub)
    if cfg_file is None:
        raise FileNotFoundError(f"twellrt.load_sparse_lm: {path_or_repo_id}: no config.json")
    with open(cfg_file) as fh:
        cfg = sparse_lm_config(json.load(fh))
    gated = bool(getattr(cfg, "sparsity_gated_mlp", True))
    sd = sparse_lm_state_dict(_read_tensors(path_or_repo_id, hub), gated)
    has_gate = any(k.endswith(".gate_proj.weight") for k in sd)
    if has_gate != gated:
        raise ValueError(
            f"twellrt.load_sparse_lm: sparsity_gated_mlp is {gated} but the checkpoint "
            f"{'has' if has_gate else 'has no'} gate weights"
        )
    base_cls = getattr(transformers, cfg.architectures[0])
    cls = base_cls if gated else _non_gated_class(base_cls)
    model, info = cls.from_pretrained(None, config=cfg, state_dict=sd, dtype=dtype, output_loading_info=True, **model_kwargs)
    bad = {k: info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs") if info.get(k)}
    if bad:
        raise ValueError(f"twellrt.load_sparse_lm: {path_or_repo_id}: the weights do not fit {cls.__name__}: {bad}")
    if device is not None:
        model.to(device)
    if twell:
        T = _default_T(cfg.intermediate_size) if T is None else T
        n = swap_mlps(model, l1_coef, T, C, path, train_path) if gated else _swap_non_gated(model, T, C, path)
        if n != cfg.num_hidden_layers:
            raise ValueError(f"twellrt.load_sparse_lm: swapped {n} MLPs of {cfg.num_hidden_layers} layers")
    return model.eval()
