"""Drop-in feed-forward modules with the parameters of a Llama-style MLP, running on twellrt's
ops, and a helper that swaps them into a Hugging Face model in place."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from . import ops

__all__ = ["TwELLGatedMLP", "TwELLMLP", "swap_mlps"]


def _down_t(down: nn.Linear) -> torch.Tensor:
    """down_proj.weight is [K, N] (nn.Linear(N, K)); the library reads Wd as [N, K]."""
    return down.weight.t().contiguous()


class _Base(nn.Module):
    def __init__(self, l1_coef: float, T: int, C: int, path: str, train_path: str):
        super().__init__()
        self.l1_coef = float(l1_coef)
        self.T, self.C = int(T), int(C)
        self.path = path
        self.train_path = train_path
        self.last_stats: Optional[torch.Tensor] = None
        self._wd_cache = None  # (weight, version, transposed) for inference in eager mode

    def _wd(self, training: bool) -> torch.Tensor:
        w = self.down_proj.weight
        if training or torch.compiler.is_compiling():
            return _down_t(self.down_proj)
        c = self._wd_cache
        if c is None or c[0] is not w or c[1] != w._version or c[2].device != w.device or c[2].dtype != w.dtype:
            c = (w, w._version, _down_t(self.down_proj))
            self._wd_cache = c
        return c[2]

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
    (gate_proj, up_proj: nn.Linear(hidden, intermediate, bias=False); down_proj:
    nn.Linear(intermediate, hidden, bias=False)).

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
        down_proj: Optional[nn.Linear] = None,
    ):
        super().__init__(l1_coef, T, C, path, train_path)
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate_proj = gate_proj if gate_proj is not None else nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = up_proj if up_proj is not None else nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = down_proj if down_proj is not None else nn.Linear(intermediate_size, hidden_size, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = self._flat(x)
        wg, wu = self.gate_proj.weight, self.up_proj.weight
        if self._training(x):
            y, stats, _h = ops.ffn_train(x2, wg, wu, self._wd(True), self.l1_coef, self.T, self.C, self.train_path)
            self.last_stats = stats
        else:
            packed = ops.gate_pack(x2, wg, self.T, self.C, True)
            y = ops.ffn_infer(x2, packed, wg, wu, self._wd(False), self.T, self.C, self.path)
        return y.view(shape)


class TwELLMLP(_Base):
    """Non-gated: y = down_proj(relu(up_proj(x))). Inference only in this version (the library's
    training ops are for gated layers): with grad enabled it raises."""

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
        down_proj: Optional[nn.Linear] = None,
    ):
        super().__init__(0.0, T, C, path, "auto")
        kw = dict(bias=False, device=device, dtype=dtype)
        self.up_proj = up_proj if up_proj is not None else nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = down_proj if down_proj is not None else nn.Linear(intermediate_size, hidden_size, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._training(x):
            raise NotImplementedError(
                "twellrt.TwELLMLP: training a non-gated layer is not supported by libtwellrt "
                "(training ops are gated only); use torch.no_grad() or TwELLGatedMLP"
            )
        shape = x.shape
        x2 = self._flat(x)
        wu = self.up_proj.weight
        packed = ops.gate_pack(x2, wu, self.T, self.C, False)
        y = ops.ffn_infer(x2, packed, None, wu, self._wd(False), self.T, self.C, self.path)
        return y.view(shape)


def _is_relu(act) -> bool:
    if isinstance(act, nn.ReLU):
        return True
    return act is torch.relu or act is torch.nn.functional.relu


def _plain_linear(m) -> bool:
    return isinstance(m, nn.Linear) and m.bias is None


def swap_mlps(model: nn.Module, l1_coef: float = 0.0, T: int = 256, C: int = 8, path: str = "auto", train_path: str = "auto") -> int:
    """Replaces, in place, every Llama-style MLP of `model` (a module with gate_proj, up_proj,
    down_proj bias-free nn.Linear children and a ReLU `act_fn`, as Hugging Face's LlamaMLP with
    hidden_act="relu") by a TwELLGatedMLP that holds the same nn.Linear modules: the weights are
    shared, parameter names and state_dict are unchanged. Returns how many were swapped. An MLP
    with another activation is left alone (twellrt computes ReLU only)."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, TwELLGatedMLP):
                continue
            g, u, d = (getattr(child, a, None) for a in ("gate_proj", "up_proj", "down_proj"))
            if not (_plain_linear(g) and _plain_linear(u) and _plain_linear(d)):
                continue
            if not _is_relu(getattr(child, "act_fn", None)):
                continue
            new = TwELLGatedMLP(
                g.in_features, g.out_features, l1_coef, T, C, path, train_path,
                gate_proj=g, up_proj=u, down_proj=d,
            )
            new.train(child.training)
            setattr(parent, name, new)
            swapped += 1
    return swapped
