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
    twellrt.TensorParallelMLP.from_full(twellrt.TwELLMLP(4096, 11008), pad=True)  # non-gated
    twellrt.tensor_parallel_mlps(hf_model, pad=True)      # every ReLU MLP of a model, in place

A shard is an ordinary layer of n_local neurons, n_local a multiple of the TwELL tile T (the
library's rule). Which neurons a rank holds is its row of a *layout*: an int64 tensor
[world, n_local] of neuron indices, -1 for a padding neuron (zero weights: it never fires and adds
nothing, so padding is exact). The default layout is contiguous; twellrt.balance computes one that
balances the work across ranks. Numerics: every shard computes its partial y exactly as the
single-device module computes the whole (fp32 accumulation, rounded to the dtype), so the result
differs from the single-device module only by the rounding of the partials to bf16/fp16 and the
all-reduce's own sum order and precision (NCCL and gloo sum bf16 in bf16).

Collectives. Eagerly they are torch.distributed's in-place collectives with async_op=False, which
torch.distributed passes to the backend as asyncOp=false; since pytorch/pytorch#150398 (2025,
before the 2.11 this package pins) ProcessGroupNCCL launches such collectives on the caller's
current stream, so a forward is ordered on the current stream like any other op and never
synchronises the host. Under torch.compile they are the functional collectives
(torch.distributed._functional_collectives: _c10d_functional ops and wait_tensor in the graph), so
a shard traces with fullgraph=True, training included. Not Dynamo's own rewrite of the in-place
calls: in torch 2.11 that rewrite drops the result of all_gather_into_tensor into a fresh tensor
inside an autograd.Function's backward (zero gradients under sequence parallelism).

CUDA graphs (inference): call reserve() on every rank and run one eager forward (the NCCL
communicator is made on first use, which a capture must not do), then capture the forward with
torch.cuda.graph; the twellrt ops and the all-reduce are both issued on the capturing stream and
nothing is reserved or loaded at replay. torch.compile(mode="reduce-overhead") captures the same."""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn

from ._lib import invalid
from .modules import TwELLGatedMLP, TwELLMLP, _is_relu, _plain_linear

__all__ = [
    "TensorParallelGatedMLP",
    "TensorParallelMLP",
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


def _pg(group):
    return group if group is not None else dist.group.WORLD


def _all_reduce(t, group):
    """t summed over the ranks of `group`: in place eagerly (t is returned), a new tensor under
    torch.compile (the module docstring says why)."""
    if torch.compiler.is_compiling():
        return funcol.all_reduce(t, "sum", _pg(group))
    dist.all_reduce(t, group=group)
    return t


def _reduce_scatter(t, group, world):
    if torch.compiler.is_compiling():
        return funcol.reduce_scatter_tensor(t.contiguous(), "sum", 0, _pg(group))
    out = t.new_empty((t.shape[0] // world,) + tuple(t.shape[1:]))
    dist.reduce_scatter_tensor(out, t.contiguous(), group=group)
    return out


def _all_gather(t, group, world):
    if torch.compiler.is_compiling():
        return funcol.all_gather_tensor(t.contiguous(), 0, _pg(group))
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
        if not torch.compiler.is_compiling():
            ctx.mark_dirty(y)  # summed in place (under compile: out of place)
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
# the tensor-parallel modules
# ---------------------------------------------------------------------------------------------


class _TensorParallel(nn.Module):
    """What the gated and the non-gated shard share: the layout, loading a shard out of the full
    layer's weights, reserve, and a forward around `self.local` (a TwELLGatedMLP or TwELLMLP of
    n_local neurons). Subclasses set `gated`, the full layer's class and the module attributes
    from_full copies from a full twellrt layer."""

    gated = True
    _full_attrs = ()

    def _setup(self, hidden_size, intermediate_size, group, T, reduce, gather_input, layout, pad) -> None:
        name = type(self).__name__
        if reduce not in REDUCE_MODES:
            raise invalid(f"twellrt.{name}: reduce must be one of {REDUCE_MODES}, got {reduce!r}")
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

    @property
    def _packing_key(self) -> str:
        return "gate_proj.weight" if self.gated else "up_proj.weight"

    @classmethod
    def from_full(cls, full, group=None, *, layout=None, pad=False, device=None, **kw):
        """This rank's shard of `full`: a full twellrt layer of this kind, a dense Llama-style MLP
        (any module whose state_dict has the keys below) or a state_dict: gate_proj.weight
        (gated only), up_proj.weight [N, K], down_proj.weight [K, N]. T, C, path (and l1_coef,
        train_path for the gated shard) are taken from a twellrt layer unless given in kw;
        device defaults to the weights'. Only the shard is copied."""
        sd = full.state_dict() if isinstance(full, nn.Module) else full
        key = "gate_proj.weight" if cls.gated else "up_proj.weight"
        if key not in sd:
            raise invalid(f"twellrt.{cls.__name__}.from_full: the full layer has no {key!r}")
        if not cls.gated and "gate_proj.weight" in sd:
            raise invalid(f"twellrt.{cls.__name__}.from_full: the full layer is gated (has gate_proj.weight); "
                          "use TensorParallelGatedMLP")
        N, K = sd[key].shape
        for a in cls._full_attrs:
            if a not in kw and hasattr(full, a):
                kw[a] = getattr(full, a)
        w = sd[key]
        dev = device if device is not None else w.device
        m = cls(K, N, group, device=dev, dtype=w.dtype, layout=layout, pad=pad, **kw)
        m.load_full_state_dict(sd)
        return m

    @torch.no_grad()
    def load_full_state_dict(self, state_dict, prefix: str = "") -> None:
        """Copies this rank's shard out of a full layer's state_dict (keys `prefix` +
        gate_proj.weight (gated only), up_proj.weight [N, K], down_proj.weight [K, N]; tensors on
        any device). Only the shard is copied to the module's device."""
        key = prefix + self._packing_key
        w = state_dict.get(key)
        if w is None or tuple(w.shape) != (self.intermediate_size, self.hidden_size):
            got = "is missing" if w is None else f"has shape {tuple(w.shape)}"
            raise invalid(
                f"twellrt.{type(self).__name__}: {key} {got}, expected ({self.intermediate_size}, {self.hidden_size})"
            )
        shard = shard_weights(state_dict, self.neurons, prefix, gated=self.gated)
        dev = self.local.up_proj.weight.device
        self.local.load_state_dict({k: v.to(dev) for k, v in shard.items()})

    def reserve(self, max_rows: int, nnz_per_row: float) -> None:
        """The local layer's reserve (twell_plan_reserve) for this rank's shard: max_rows = the
        rows the shard computes (world × the local rows under gather_input), nnz_per_row = active
        neurons per row in this shard (about the layer's ÷ world with a balanced layout). With it
        (and one eager forward) the inference forward can be captured in a CUDA graph."""
        self.local.reserve(max_rows, nnz_per_row)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g, world = self.group, self.world
        if world == 1:  # every collective is the identity (also without an initialised group)
            return self.local(x)
        grad = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters()))
        if self.gather_input:
            x = _GatherIn.apply(x, g, world) if grad else _all_gather(x, g, world)
        elif self.reduce == "reduce_scatter" and x.shape[0] % world:
            raise invalid(
                f"twellrt.{type(self).__name__}: reduce_scatter needs dim 0 ({x.shape[0]}) divisible by world ({world})"
            )
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


class TensorParallelGatedMLP(_TensorParallel):
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

    gated = True
    _full_attrs = ("l1_coef", "T", "C", "path", "train_path")

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
        self._setup(hidden_size, intermediate_size, group, T, reduce, gather_input, layout, pad)
        self.local = TwELLGatedMLP(hidden_size, self.n_local, l1_coef, T, C, path, train_path, device, dtype)


class TensorParallelMLP(_TensorParallel):
    """This rank's shard of a non-gated TwELL layer (y = down(relu(up(x))), TwELLMLP) split as
    TensorParallelGatedMLP splits a gated one: `local` is a TwELLMLP of n_local neurons (up_proj
    rows and down_proj columns of this rank's `neurons`), the same reduce / gather_input modes
    and layouts. Inference only, as TwELLMLP (with grad enabled it raises)."""

    gated = False
    _full_attrs = ("T", "C", "path")

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        group=None,
        T: int = 256,
        C: int = 8,
        path: str = "auto",
        device=None,
        dtype=torch.bfloat16,
        *,
        reduce: str = "all_reduce",
        gather_input: bool = False,
        layout: Optional[torch.Tensor] = None,
        pad: bool = False,
    ):
        super().__init__()
        self._setup(hidden_size, intermediate_size, group, T, reduce, gather_input, layout, pad)
        self.local = TwELLMLP(hidden_size, self.n_local, T, C, path, device, dtype)


def _shard_kind(m: nn.Module):
    """The tensor-parallel class for a full feed-forward layer, or None: twellrt layers by type,
    dense ones as swap_mlps finds them (bias-free nn.Linear children and a ReLU act_fn)."""
    if type(m) is TwELLGatedMLP:
        return TensorParallelGatedMLP
    if type(m) is TwELLMLP:
        return TensorParallelMLP
    if not _is_relu(getattr(m, "act_fn", None)):
        return None
    g, u, d = (getattr(m, a, None) for a in ("gate_proj", "up_proj", "down_proj"))
    if not (_plain_linear(u) and _plain_linear(d)):
        return None
    if g is None:
        return TensorParallelMLP
    return TensorParallelGatedMLP if _plain_linear(g) else None


_GATED_ONLY = ("l1_coef", "train_path")


def tensor_parallel_mlps(model: nn.Module, group=None, layouts: Optional[dict] = None, **kw) -> int:
    """Replaces, in place, every feed-forward layer of `model` that twellrt computes by this
    rank's shard of it: TwELLGatedMLP, and dense Llama-style MLPs with gate_proj, up_proj,
    down_proj (bias-free nn.Linear) and a ReLU act_fn (Hugging Face's LlamaMLP and its kind with
    hidden_act="relu", as swap_mlps finds them), by TensorParallelGatedMLP; TwELLMLP and dense
    non-gated ReLU MLPs (up_proj, down_proj, act_fn, no gate_proj: sparse_lm.ReLUMLP) by
    TensorParallelMLP. Only the shard's weights are copied (onto kw's `device` if given, else the
    weights' device) and the full layer is dropped; a dense MLP is sharded directly, with no full
    twellrt layer made first. Serving a Hugging Face model: every rank loads the same checkpoint
    (from_pretrained), then calls this; attention, norms and embeddings stay replicated.

    `layouts` maps a module's name (as in model.named_modules()) to its layout; others are
    contiguous. kw goes to from_full (T, C, path, l1_coef, train_path, reduce, pad, device;
    l1_coef and train_path only to gated shards); a twellrt layer's own T, C, path, ... are kept
    unless kw gives them, a dense layer gets the defaults (T = 256). Shards already in the
    model are left alone, and so are MLPs with another activation. Returns how many were
    replaced."""
    layouts = layouts or {}
    names = {id(m): n for n, m in model.named_modules()}
    n = 0
    for parent in list(model.modules()):
        if isinstance(parent, _TensorParallel):
            continue  # a shard's `local` is not a full layer
        for child_name, child in list(parent.named_children()):
            cls = _shard_kind(child)
            if cls is None:
                continue
            name = names[id(child)]
            args = kw if cls.gated else {k: v for k, v in kw.items() if k not in _GATED_ONLY}
            tp = cls.from_full(child, group, layout=layouts.get(name), **args)
            tp.train(child.training)
            setattr(parent, child_name, tp)
            n += 1
    return n
