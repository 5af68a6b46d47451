"""Tensor parallelism for TwELL feed-forward layers over torch.distributed (NCCL on GPUs, gloo on
the CPU): each rank holds a shard of the hidden width (column-parallel gate/up, row-parallel
down), computes a partial y with the ordinary twellrt ops, and the partials are summed by one
collective (all-reduce, or reduce-scatter under sequence parallelism).

    import torch.distributed as dist, twellrt
    dist.init_process_group("nccl")                       # one process per GPU (torchrun)
    torch.cuda.set_device(dist.get_rank())
    full = twellrt.TwELLGatedMLP(4096, 11008)             # or any Llama-style MLP state_dict
    tp = twellrt.TensorParallelGatedMLP.from_full(full, pad=True, device="cuda")
    y = tp(x)                                             # x replicated on every rank, y too

A shard is an ordinary layer of n_local neurons, n_local a multiple of the TwELL tile T (the
library's rule). Which neurons a rank holds is its row of a *layout*: an int64 tensor
[world, n_local] of neuron indices, -1 for a padding neuron (zero weights: it never fires and adds
nothing, so padding is exact). The default layout is contiguous; twellrt.balance computes one that
balances active entries across ranks. Numerics: every shard computes its partial y exactly as
the single-device module computes the whole (fp32 accumulation, rounded to the dtype), so the
result differs from the single-device module only by the rounding of the partials to bf16/fp16
and the all-reduce's own sum order and precision (NCCL and gloo sum bf16 in bf16).

Collectives are issued with async_op=False, which torch.distributed passes to the backend as
asyncOp=false; since pytorch/pytorch#150398 (2025, before the 2.11 this package pins)
ProcessGroupNCCL launches such collectives on the caller's current stream, so a forward is ordered
on the current stream like any other op and never synchronises the host."""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from ._lib import invalid
from .modules import TwELLGatedMLP

__all__ = [
    "TensorParallelGatedMLP",
    "shard_width",
    "contiguous_layout",
    "check_layout",
    "shard_weights",
    "tensor_parallel_mlps",
]

REDUCE_MODES = ("all_reduce", "reduce_scatter", "none")


def _world(group) -> int:
    return dist.get_world_size(group) if dist.is_initialized() else 1


def _rank(group) -> int:
    return dist.get_rank(group) if dist.is_initialized() else 0


def shard_width(N: int, world: int, T: int = 256, pad: bool = False) -> int:
    """Neurons per shard for a hidden width N over `world` ranks: N / world, which must be a
    multiple of T; with pad=True the smallest multiple of T that holds N / world (the rest are
    zero padding neurons). Raises TwellInvalidArgument otherwise."""
    if world < 1 or N < 1:
        raise invalid(f"twellrt.parallel: need N >= 1 and world >= 1, got N={N} world={world}")
    if pad:
        tiles = -(-N // (world * T))
        return tiles * T
    if N % world or (N // world) % T:
        raise invalid(
            f"twellrt.parallel: intermediate size N={N} over {world} ranks gives {N / world:g} neurons "
            f"per shard, not a multiple of the tile T={T}; pass pad=True to pad each shard to "
            f"{-(-N // (world * T)) * T} with zero neurons (exact), or use another world size"
        )
    return N // world


def contiguous_layout(N: int, world: int, T: int = 256, pad: bool = False) -> torch.Tensor:
    """The default layout [world, n_local]: rank r holds neurons r·n_local … in order, padding
    (-1) at the end of the last shards when pad=True."""
    n_local = shard_width(N, world, T, pad)
    idx = torch.arange(world * n_local, dtype=torch.int64)
    idx[N:] = -1
    return idx.view(world, n_local)


def check_layout(layout: torch.Tensor, N: int, world: int, T: int = 256) -> torch.Tensor:
    """Validates a layout for a layer of N neurons on `world` ranks: shape [world, n_local] with
    n_local a multiple of T, every neuron 0..N-1 exactly once, the rest -1. Returns it as a CPU
    int64 tensor; raises TwellInvalidArgument naming what is wrong."""
    if not isinstance(layout, torch.Tensor) or layout.dim() != 2 or layout.shape[0] != world:
        shape = tuple(layout.shape) if isinstance(layout, torch.Tensor) else type(layout).__name__
        raise invalid(f"twellrt.parallel: layout must be an int64 tensor [world={world}, n_local], got {shape}")
    layout = layout.detach().to("cpu", torch.int64)
    n_local = layout.shape[1]
    if n_local == 0 or n_local % T:
        raise invalid(f"twellrt.parallel: layout gives {n_local} neurons per shard, not a positive multiple of T={T}")
    flat = layout.flatten()
    real = flat[flat >= 0]
    if (flat < -1).any() or (real >= N).any() or real.numel() != N or torch.unique(real).numel() != N:
        raise invalid(f"twellrt.parallel: layout must hold every neuron 0..{N - 1} exactly once (and -1 for padding)")
    return layout


def _rows(w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """w[idx] along dim 0 with zero rows where idx is -1."""
    idx = idx.to(w.device)
    out = w.new_zeros((idx.numel(),) + tuple(w.shape[1:]))
    keep = idx >= 0
    out[keep] = w[idx[keep]]
    return out


def shard_weights(state_dict, neurons: torch.Tensor, prefix: str = "", gated: bool = True) -> dict:
    """The shard of a full Llama-style MLP state_dict (gate_proj.weight, up_proj.weight [N, K],
    down_proj.weight [K, N]) holding `neurons` (one row of a layout): the rows of gate/up and
    the columns of down, zeros for padding. Keys as in the input, without `prefix`."""
    out = {}
    names = ("gate_proj", "up_proj") if gated else ("up_proj",)
    for n in names:
        key = f"{prefix}{n}.weight"
        if key not in state_dict:
            raise invalid(f"twellrt.parallel: state_dict has no {key!r}")
        out[f"{n}.weight"] = _rows(state_dict[key], neurons)
    key = f"{prefix}down_proj.weight"
    if key not in state_dict:
        raise invalid(f"twellrt.parallel: state_dict has no {key!r}")
    out["down_proj.weight"] = _rows(state_dict[key].t(), neurons).t().contiguous()
    return out


# ---------------------------------------------------------------------------------------------
# collectives with autograd (Megatron's f/g pairs), on torch.distributed
# ---------------------------------------------------------------------------------------------


def _all_reduce(t, group):
    dist.all_reduce(t, group=group)
    return t


def _reduce_scatter(t, group, world):
    out = t.new_empty((t.shape[0] // world,) + tuple(t.shape[1:]))
    dist.reduce_scatter_tensor(out, t.contiguous(), group=group)
    return out


def _all_gather(t, group, world):
    out = t.new_empty((t.shape[0] * world,) + tuple(t.shape[1:]))
    dist.all_gather_into_tensor(out, t.contiguous(), group=group)
    return out


class _CopyIn(torch.autograd.Function):
    """Identity forward; all-reduce of dx backward (x is replicated, each shard gives part of dx)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, dx):
        return _all_reduce(dx.contiguous().clone(), ctx.group), None


class _ReduceOut(torch.autograd.Function):
    """All-reduce forward; identity backward (dy is replicated)."""

    @staticmethod
    def forward(ctx, y, group):
        ctx.mark_dirty(y)  # summed in place
        return _all_reduce(y, group)

    @staticmethod
    def backward(ctx, dy):
        return dy, None


class _ReduceScatterOut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, group, world):
        ctx.group, ctx.world = group, world
        return _reduce_scatter(y, group, world)

    @staticmethod
    def backward(ctx, dy):
        return _all_gather(dy, ctx.group, ctx.world), None, None


class _GatherIn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, world):
        ctx.group, ctx.world = group, world
        return _all_gather(x, group, world)

    @staticmethod
    def backward(ctx, dx):
        return _reduce_scatter(dx, ctx.group, ctx.world), None, None


# ---------------------------------------------------------------------------------------------
# the tensor-parallel module
# ---------------------------------------------------------------------------------------------


class TensorParallelGatedMLP(nn.Module):
    """This rank's shard of a gated TwELL layer (y = down(relu(gate(x)) ⊙ up(x))) of hidden width
    `intermediate_size` split over the ranks of `group` (default: the whole world).

    `local` is an ordinary TwELLGatedMLP of n_local neurons (its gate_proj/up_proj rows and
    down_proj columns are this rank's neurons, `neurons` says which: -1 = padding). Forward:
      reduce="all_reduce"      x replicated on every rank → y replicated (the usual TP layer);
      reduce="reduce_scatter"  x replicated → this rank's 1/world of y along dim 0 (sequence
                               parallelism: dim 0 must be divisible by world; sequence-first
                               [S, B, K] or flattened [M, K] inputs split by sequence);
      reduce="none"            x replicated → this rank's partial y (the caller sums them).
    gather_input=True all-gathers x along dim 0 first (x is this rank's sequence shard), the
    other half of sequence parallelism. Training works (autograd through the collectives: dx is
    all-reduced or reduce-scattered, weight gradients are this shard's slices of the full ones,
    and each shard's L1 term covers its own neurons, so their sum is the full layer's)."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        group=None,
        l1_coef: float = 0.0,
        T: int = 256,
        C: int = 8,
        path: str = "auto",
        train_path: str = "auto",
        device=None,
        dtype=torch.bfloat16,
        *,
        reduce: str = "all_reduce",
        gather_input: bool = False,
        layout: Optional[torch.Tensor] = None,
        pad: bool = False,
    ):
        super().__init__()
        if reduce not in REDUCE_MODES:
            raise invalid(f"twellrt.TensorParallelGatedMLP: reduce must be one of {REDUCE_MODES}, got {reduce!r}")
        self.group = group
        self.world, self.rank = _world(group), _rank(group)
        self.hidden_size, self.intermediate_size = int(hidden_size), int(intermediate_size)
        self.reduce, self.gather_input = reduce, bool(gather_input)
        if layout is None:
            layout = contiguous_layout(self.intermediate_size, self.world, T, pad)
        layout = check_layout(layout, self.intermediate_size, self.world, T)
        self.n_local = layout.shape[1]
        self.register_buffer("layout", layout, persistent=False)
        self.register_buffer("neurons", layout[self.rank].clone(), persistent=False)
        self.local = TwELLGatedMLP(hidden_size, self.n_local, l1_coef, T, C, path, train_path, device, dtype)

    @classmethod
    def from_full(cls, full, group=None, *, layout=None, pad=False, device=None, **kw) -> "TensorParallelGatedMLP":
        """This rank's shard of `full`: a TwELLGatedMLP (or any module / state_dict with
        gate_proj.weight, up_proj.weight, down_proj.weight). T, C, l1_coef and the paths are
        taken from a TwELLGatedMLP unless given in kw; device defaults to the weights'."""
        sd = full.state_dict() if isinstance(full, nn.Module) else full
        N, K = sd["gate_proj.weight"].shape
        for a in ("l1_coef", "T", "C", "path", "train_path"):
            if a not in kw and hasattr(full, a):
                kw[a] = getattr(full, a)
        w = sd["gate_proj.weight"]
        dev = device if device is not None else w.device
        m = cls(K, N, group, device=dev, dtype=w.dtype, layout=layout, pad=pad, **kw)
        m.load_full_state_dict(sd)
        return m

    @torch.no_grad()
    def load_full_state_dict(self, state_dict, prefix: str = "") -> None:
        """Copies this rank's shard out of a full layer's state_dict (keys `prefix` +
        gate_proj.weight / up_proj.weight [N, K], down_proj.weight [K, N]; tensors on any
        device). Only the shard is copied to the module's device."""
        g = state_dict[f"{prefix}gate_proj.weight"]
        if tuple(g.shape) != (self.intermediate_size, self.hidden_size):
            raise invalid(
                f"twellrt.TensorParallelGatedMLP: {prefix}gate_proj.weight has shape {tuple(g.shape)}, "
                f"expected ({self.intermediate_size}, {self.hidden_size})"
            )
        shard = shard_weights(state_dict, self.neurons, prefix)
        self.local.load_state_dict({k: v.to(self.local.gate_proj.weight.device) for k, v in shard.items()})

    def reserve(self, max_rows: int, nnz_per_row: float) -> None:
        """TwELLGatedMLP.reserve for this rank's shard (twell_plan_reserve): max_rows = the rows
        the shard computes (world × the local rows under gather_input), nnz_per_row = active
        neurons per row in this shard (about the layer's ÷ world with a balanced layout)."""
        self.local.reserve(max_rows, nnz_per_row)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g, world = self.group, self.world
        if world == 1:  # every collective is the identity (also without an initialised group)
            return self.local(x)
        grad = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters()))
        if self.gather_input:
            x = _GatherIn.apply(x, g, world) if grad else _all_gather(x, g, world)
        elif self.reduce == "reduce_scatter" and x.shape[0] % world:
            raise invalid(f"twellrt.TensorParallelGatedMLP: reduce_scatter needs dim 0 ({x.shape[0]}) divisible by world ({world})")
        elif grad and self.reduce != "none":
            x = _CopyIn.apply(x, g)
        y = self.local(x)
        if self.reduce == "all_reduce":
            return _ReduceOut.apply(y, g) if grad else _all_reduce(y, g)
        if self.reduce == "reduce_scatter":
            return _ReduceScatterOut.apply(y, g, world) if grad else _reduce_scatter(y, g, world)
        return y

    def extra_repr(self) -> str:
        return (
            f"hidden={self.hidden_size}, intermediate={self.intermediate_size}, rank={self.rank}/{self.world}, "
            f"n_local={self.n_local}, reduce={self.reduce!r}, gather_input={self.gather_input}"
        )


def tensor_parallel_mlps(model: nn.Module, group=None, layouts: Optional[dict] = None, **kw) -> int:
    """Replaces, in place, every TwELLGatedMLP of `model` by this rank's TensorParallelGatedMLP
    shard of it (weights copied out of the full module, which is then dropped). `layouts` maps a
    module's name (as in model.named_modules()) to its layout; others are contiguous. kw goes to
    TensorParallelGatedMLP.from_full (reduce, pad, ...). Returns how many were replaced."""
    layouts = layouts or {}
    n = 0
    mods = list(model.named_modules())
    inside = tuple(nm + "." for nm, m in mods if isinstance(m, TensorParallelGatedMLP))
    for name, mod in mods:
        if type(mod) is not TwELLGatedMLP or (inside and (name + ".").startswith(inside)):
            continue  # not a full layer, or the `local` of a shard
        parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        tp = TensorParallelGatedMLP.from_full(mod, group, layout=layouts.get(name), **kw)
        tp.train(mod.training)
        setattr(parent, name.rpartition(".")[2], tp)
        n += 1
    return n
