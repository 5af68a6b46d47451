"""Drop-in feed-forward modules with the parameters of a Llama-style MLP, running on twellrt's
ops, and a helper that swaps them into a Hugging Face model in place.

Layout of the down projection. The library reads Wd as a row-major [N, K] matrix (row n =
neuron n), the transpose of nn.Linear(N, K)'s weight [K, N]. So the modules' down_proj is a
DownProj, which holds Wd as its parameter `weight_t` [N, K], contiguous: the ops get the
parameter itself, nothing is cached or transposed per call (eagerly or under torch.compile),
every write to it reaches the next call, and the library's dWd [N, K] becomes weight_t.grad
without a transpose. state_dict hooks present it under Hugging Face's key and shape
(`down_proj.weight`, [K, N], a transposed view of the parameter) and load_state_dict takes that
key and shape, so checkpoints, save_pretrained / from_pretrained and swap_mlps keep the keys and
shapes of the dense model; `named_parameters()` names the parameter `down_proj.weight_t`.
`down_proj.weight` stays usable as nn.Linear's [K, N] weight (DownProj.weight says how). Not an
nn.Linear whose weight is stored column-major (the same memory): FSDP2 refuses non-contiguous
parameters, and rebinding such a weight's .data to a row-major tensor would cost a copy per call."""

from __future__ import annotations

import math
import warnings
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import ops
from ._lib import invalid

__all__ = ["TwELLGatedMLP", "TwELLMLP", "DownProj", "swap_mlps"]


class _WeightView(torch.Tensor):
    """DownProj.weight: a [K, N] view of the [N, K] parameter weight_t (shares its memory, so
    reads and in-place writes, .data.mul_ and .data.copy_ included, are the parameter's). What
    would rebind a plain Parameter goes to weight_t instead: `.data = t` takes t ([K, N]) as the
    new value, `.grad` is weight_t.grad transposed, `requires_grad_` sets weight_t's. Operations
    on it return plain tensors."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def of(owner: "DownProj") -> "_WeightView":
        v = torch.Tensor._make_subclass(_WeightView, owner.weight_t.detach().t(), False)
        v._owner = owner
        return v

    @property
    def data(self):
        return self._owner.weight_t.data.t()

    @data.setter
    def data(self, value):
        self._owner._set_weight(value)
        torch._C.TensorBase.data.__set__(self, self._owner.weight_t.data.t())  # this view follows

    @property
    def grad(self):
        g = self._owner.weight_t.grad
        return None if g is None else g.t()

    @grad.setter
    def grad(self, value):
        self._owner.weight_t.grad = None if value is None else value.t()

    @property
    def requires_grad(self):
        return self._owner.weight_t.requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        self._owner.weight_t.requires_grad = value

    def requires_grad_(self, requires_grad: bool = True):
        self._owner.weight_t.requires_grad_(requires_grad)
        return self

    # a plain tensor when saved or copied (not the owning module with it)
    def __reduce_ex__(self, protocol):
        return self._owner.weight_t.detach().t().__reduce_ex__(protocol)

    def __deepcopy__(self, memo):
        return self._owner.weight_t.detach().t().clone()

    def __repr__(self, **kw):
        return repr(self._owner.weight_t.detach().t())


class DownProj(nn.Module):
    """y = h · Wd for h [.., N] (N = in_features), y [.., K] (K = out_features), bias-free like
    the Llama MLP's down_proj, with Wd stored as the library reads it: the parameter `weight_t`
    [N, K], contiguous (row n = neuron n). The TwELL modules pass weight_t to the ops; calling
    DownProj itself computes the product densely.

    `weight` is nn.Linear's [K, N] weight, a view of weight_t (no copy): shape, values, reads and
    in-place writes (`weight.mul_`, `weight.data.copy_(w)`, `weight[0].zero_()`) behave as on
    nn.Linear's; `weight.data = w`, `down_proj.weight = w` (a [K, N] tensor or Parameter) copy w
    into weight_t (one transposed copy; weight_t stays the same Parameter object, so optimizers
    holding it are unaffected, and takes w's dtype and device as `.data =` would); `weight.grad`
    is weight_t.grad transposed; `weight.requires_grad_()` sets weight_t's. Optimizers, FSDP and
    named_parameters see weight_t. state_dict / load_state_dict use `weight` [K, N]."""

    def __init__(self, in_features: int, out_features: int, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight_t = nn.Parameter(torch.empty(self.in_features, self.out_features, device=device, dtype=dtype))
        self.reset_parameters()
        self.register_state_dict_post_hook(DownProj._hf_state_dict)
        self.register_load_state_dict_pre_hook(DownProj._hf_load_state_dict)

    def reset_parameters(self) -> None:
        # nn.Linear(N, K)'s initialisation (fan-in N), drawn into the [K, N] view
        nn.init.kaiming_uniform_(self.weight_t.data.t(), a=math.sqrt(5))

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "DownProj":
        """A DownProj holding a copy of a bias-free nn.Linear's weight, transposed (one copy)."""
        if not isinstance(linear, nn.Linear) or linear.bias is not None:
            raise invalid(f"twellrt.DownProj.from_linear: need a bias-free nn.Linear, got {linear!r}")
        w = linear.weight
        d = cls(linear.in_features, linear.out_features, device="meta", dtype=w.dtype)
        d.weight_t = nn.Parameter(w.detach().t().contiguous(), requires_grad=w.requires_grad)
        return d

    @property
    def weight(self) -> torch.Tensor:
        return _WeightView.of(self)

    def __setattr__(self, name, value):
        if name == "weight":  # nn.Module would register a second parameter under this name
            self._set_weight(value)
        else:
            super().__setattr__(name, value)

    def _set_weight(self, value) -> None:
        shape = (self.out_features, self.in_features)
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise invalid(f"twellrt.DownProj: weight must be a tensor of shape {shape} ([K, N], nn.Linear's layout), got {got}")
        with torch.no_grad():
            self.weight_t.data = value.detach().t().contiguous()

    @staticmethod
    def _hf_state_dict(module, state_dict, prefix, local_metadata) -> None:
        w = state_dict.pop(prefix + "weight_t", None)
        if w is not None:
            state_dict[prefix + "weight"] = w.t()

    @staticmethod
    def _hf_load_state_dict(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors) -> None:
        w = state_dict.pop(prefix + "weight", None)
        if w is None:
            return  # absent (load_state_dict reports weight_t missing), or given as weight_t
        if not isinstance(w, torch.Tensor) or w.dim() != 2:
            errors.append(f"{prefix}weight: expected a 2-D tensor [K, N], got {type(w).__name__}")
            return
        # contiguous: load_state_dict(assign=True) makes the given tensor the parameter
        state_dict[prefix + "weight_t"] = w.t().contiguous()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.weight_t.t())

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias=False, stored as weight_t [N, K]"


def _down(down, N: int, K: int, device, dtype) -> DownProj:
    if down is None:
        return DownProj(N, K, device=device, dtype=dtype)
    if isinstance(down, DownProj):
        return down
    if isinstance(down, nn.Linear):
        return DownProj.from_linear(down)
    raise invalid(f"twellrt: down_proj must be a DownProj or a bias-free nn.Linear, got {type(down).__name__}")


class _Base(nn.Module):
    def __init__(self, l1_coef: float, T: int, C: int, path: str, train_path: str):
        super().__init__()
        self.l1_coef = float(l1_coef)
        self.T, self.C = int(T), int(C)
        self.path = path
        self.train_path = train_path
        self.last_stats: Optional[torch.Tensor] = None

    @property
    def l0(self) -> Optional[torch.Tensor]:
        """Mean active neurons per token of the last training forward (a 0-d tensor on the
        module's device: reading it does not synchronise until you call .item())."""
        return None if self.last_stats is None else self.last_stats[0]

    @property
    def l1(self) -> Optional[torch.Tensor]:
        """Σ|h| / tokens of the last training forward (0-d tensor)."""
        return None if self.last_stats is None else self.last_stats[1]

    def reserve(self, max_tokens: int, nnz_per_row: float) -> None:
        """Prepares the library for inference calls of up to max_tokens tokens with about
        nnz_per_row active neurons each (twell_plan_reserve): nothing is loaded or allocated
        later, so the module can be captured into a CUDA graph."""
        w = self.up_proj.weight
        ops.reserve(w.device, w.shape[1], w.shape[0], max_tokens, nnz_per_row, self.T, self.C, w.dtype,
                    hasattr(self, "gate_proj"))

    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, x.shape[-1]).contiguous()

    def _training(self, x: torch.Tensor) -> bool:
        return torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters()))

    def extra_repr(self) -> str:
        return f"l1_coef={self.l1_coef}, T={self.T}, C={self.C}, path={self.path!r}, train_path={self.train_path!r}"


class TwELLGatedMLP(_Base):
    """y = down_proj(relu(gate_proj(x)) * up_proj(x)), with the parameters of a Llama-style MLP
    (gate_proj, up_proj: nn.Linear(hidden, intermediate, bias=False); down_proj: a DownProj of
    nn.Linear(intermediate, hidden, bias=False)'s shape, storing Wd as the library reads it: see
    the module docstring). gate_proj and up_proj given are used as they are; a down_proj given
    as an nn.Linear is copied into a DownProj (its weight transposed, once).

    Inference (no grad needed): twellrt gate-pack + fused sparse inference; `path` ("auto",
    "sparse", "dense") as the library's twell_path. Training (grad enabled and x or a parameter
    requires grad): the library's training forward/backward, whose backward adds the L1 penalty
    l1_coef · Σ|h| / tokens to the loss (do not add it yourself); `l0`, `l1` give the last
    training forward's statistics for logging. bf16 or fp16 parameters and inputs; weight
    gradients are computed in fp32 and cast to the parameters' dtype."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        l1_coef: float = 0.0,
        T: int = 256,
        C: int = 8,
        path: str = "auto",
        train_path: str = "auto",
        device=None,
        dtype=torch.bfloat16,
        *,
        gate_proj: Optional[nn.Linear] = None,
        up_proj: Optional[nn.Linear] = None,
        down_proj=None,
    ):
        super().__init__(l1_coef, T, C, path, train_path)
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate_proj = gate_proj if gate_proj is not None else nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = up_proj if up_proj is not None else nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = _down(down_proj, intermediate_size, hidden_size, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = self._flat(x)
        wg, wu = self.gate_proj.weight, self.up_proj.weight
        if self._training(x):
            y, stats, _h = ops.ffn_train(x2, wg, wu, self.down_proj.weight_t, self.l1_coef, self.T, self.C, self.train_path)
            self.last_stats = stats
        else:
            y = ops.ffn_layer(x2, wg, wu, self.down_proj.weight_t, self.T, self.C, self.path)
        return y.view(shape)


class TwELLMLP(_Base):
    """Non-gated: y = down_proj(relu(up_proj(x))). Inference only in this version (the library's
    training ops are for gated layers): with grad enabled it raises. down_proj as in
    TwELLGatedMLP."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        T: int = 256,
        C: int = 8,
        path: str = "auto",
        device=None,
        dtype=torch.bfloat16,
        *,
        up_proj: Optional[nn.Linear] = None,
        down_proj=None,
    ):
        super().__init__(0.0, T, C, path, "auto")
        kw = dict(bias=False, device=device, dtype=dtype)
        self.up_proj = up_proj if up_proj is not None else nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = _down(down_proj, intermediate_size, hidden_size, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._training(x):
            raise NotImplementedError(
                "twellrt.TwELLMLP: training a non-gated layer is not supported by libtwellrt "
                "(training ops are gated only); use torch.no_grad() or TwELLGatedMLP"
            )
        shape = x.shape
        x2 = self._flat(x)
        wu = self.up_proj.weight
        y = ops.ffn_layer(x2, None, wu, self.down_proj.weight_t, self.T, self.C, self.path)
        return y.view(shape)


def _is_relu(act) -> bool:
    if isinstance(act, nn.ReLU):
        return True
    return act is torch.relu or act is torch.nn.functional.relu


def _plain_linear(m) -> bool:
    return isinstance(m, nn.Linear) and m.bias is None


def _act_name(act) -> str:
    return getattr(act, "__name__", None) or type(act).__name__


def swap_mlps(
    model: nn.Module, l1_coef: float = 0.0, T: int = 256, C: int = 8, path: str = "auto", train_path: str = "auto",
    *, convert_to_relu: bool = False,
) -> int:
    """Replaces, in place, every Llama-style MLP of `model` (a module with gate_proj, up_proj,
    down_proj bias-free nn.Linear children and an `act_fn`, as Hugging Face's LlamaMLP) by a
    TwELLGatedMLP that holds the same gate_proj and up_proj modules and a DownProj with
    down_proj's weight (transposed into the library's layout: one copy per layer, here, never
    per call; the old down_proj is dropped). state_dict keys, shapes and values are unchanged;
    named_parameters() has down_proj.weight_t [N, K] where it had down_proj.weight. Returns how
    many were swapped.

    twellrt computes ReLU gates only. An MLP whose act_fn is not ReLU (SiLU, GELU, ...) makes
    the call raise TwellInvalidArgument naming convert_to_relu, before anything is swapped,
    unless convert_to_relu=True: then it is swapped too, its activation becoming ReLU, with a
    warning (the model computes another function and needs fine-tuning with the sparsity
    recipe, twellrt.recipe, before its outputs mean anything), and model.config.hidden_act (a
    Hugging Face config) becomes "relu" so that save_pretrained writes what the model computes.
    A module with the three projections but no act_fn is left alone."""
    found = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, TwELLGatedMLP):
                continue
            g, u, d = (getattr(child, a, None) for a in ("gate_proj", "up_proj", "down_proj"))
            if not (_plain_linear(g) and _plain_linear(u) and _plain_linear(d)):
                continue
            act = getattr(child, "act_fn", None)
            if act is None:
                continue
            found.append((parent, name, child, g, u, d, _is_relu(act)))
    other = sorted({_act_name(c.act_fn) for _p, _n, c, *_r, relu in found if not relu})
    if other and not convert_to_relu:
        raise invalid(
            f"twellrt.swap_mlps: {sum(1 for f in found if not f[-1])} MLP(s) use {', '.join(other)}, not ReLU, "
            "and twellrt computes ReLU gates only; pass convert_to_relu=True to swap them with ReLU "
            "(the model then needs fine-tuning with the sparsity recipe), or use a model trained "
            "with hidden_act=\"relu\""
        )
    if other:
        warnings.warn(
            f"twellrt.swap_mlps: converting {sum(1 for f in found if not f[-1])} MLP(s) from {', '.join(other)} "
            "to ReLU: the model now computes a different function and needs fine-tuning (twellrt.recipe: "
            "L1Schedule, ActivityTracker, reinit_dead_neurons) before use",
            UserWarning,
            stacklevel=2,
        )
        cfg = getattr(model, "config", None)
        if cfg is not None and hasattr(cfg, "hidden_act"):
            cfg.hidden_act = "relu"
    for parent, name, child, g, u, d, _relu in found:
        new = TwELLGatedMLP(
            g.in_features, g.out_features, l1_coef, T, C, path, train_path,
            gate_proj=g, up_proj=u, down_proj=d,
        )
        new.train(child.training)
        setattr(parent, name, new)
    return len(found)
