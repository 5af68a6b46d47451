"""PyTorch custom operators (torch.library) over libtwellrt's ops, with fake implementations for
torch.compile and autograd for training. Tensors must be contiguous, of one dtype (bf16 or fp16)
and on one device: CPU tensors run on the library's exact CPU backend, CUDA tensors on their
device, enqueued on PyTorch's current stream. The packed TwELL tensor is an ordinary int32
tensor [M, N/C] (the library's uint32 words, bit for bit).

Ops (namespace `twellrt`, also callable as the Python functions below):
  gate_pack(x, w, T, C, gated)                           -> packed
  ffn_infer(x, packed, wg, wu, wd, T, C, path)           -> y        (wg None: non-gated)
  ffn_train(x, wg, wu, wd, lam, T, C, path)              -> y, stats, handle   (autograd)
  ffn_train_backward(handle, x, wg, wu, wd, dy, lam, T, C) -> dx, dwg, dwu, dwd (fp32)
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Optional, Tuple

import torch

from . import _lib
from ._lib import invalid

__all__ = ["gate_pack", "ffn_infer", "ffn_train", "ffn_train_backward", "packed_cols", "reserve"]

_DTYPES = {torch.bfloat16: _lib.DTYPE_BF16, torch.float16: _lib.DTYPE_FP16}

try:  # the raw cudaStream_t of the current stream, without building a torch.cuda.Stream
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _stream(dev: torch.device):
    return _raw_stream(dev.index if dev.index is not None else torch.cuda.current_device()) if dev.type == "cuda" else None


def _ptr(t: Optional[torch.Tensor]):
    return None if t is None else t.data_ptr()


def _check(op: str, what: str, t, dtype, device, shape):
    """Rejects what the library cannot see through a raw pointer: type, dtype, device, shape and
    layout. Raised as TwellInvalidArgument before anything is allocated or written."""
    if not isinstance(t, torch.Tensor):
        raise invalid(f"twellrt.{op}: {what} must be a tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise invalid(f"twellrt.{op}: {what} has dtype {t.dtype}, expected {dtype}")
    if t.device != device:
        raise invalid(f"twellrt.{op}: {what} is on {t.device}, expected {device} (where x is)")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise invalid(f"twellrt.{op}: {what} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if not t.is_contiguous():
        raise invalid(f"twellrt.{op}: {what} must be contiguous (row-major); call .contiguous()")


def _check_x(op: str, x):
    if not isinstance(x, torch.Tensor):
        raise invalid(f"twellrt.{op}: x must be a tensor, got {type(x).__name__}")
    if x.dtype not in _DTYPES:
        raise invalid(f"twellrt.{op}: x has dtype {x.dtype}; supported: torch.bfloat16, torch.float16")
    if x.dim() != 2:
        raise invalid(f"twellrt.{op}: x must be 2-D [M, K], got shape {tuple(x.shape)}")
    _check(op, "x", x, x.dtype, x.device, None)


def _weights(op, x, ws, names):
    """Checks [N, K] weights against x; returns N."""
    K = x.shape[1]
    first = next(w for w in ws if w is not None)
    if not isinstance(first, torch.Tensor) or first.dim() != 2:
        raise invalid(f"twellrt.{op}: {names[ws.index(first)]} must be a 2-D tensor [N, K]")
    N = first.shape[0]
    for w, n in zip(ws, names):
        if w is not None:
            _check(op, n, w, x.dtype, x.device, (N, K))
    return N


def _shape_words(K, N, T, C, dtype_code, gated, M):
    """Words per row of the packed tensor for a shape (0 for an invalid one): the library's own
    twell_packed_words, so the fake implementations and the real ops agree with the C side."""
    lib = _lib.library()
    s = _lib.shape(K, N, T, C, dtype_code, gated)
    w = lib.twell_packed_words(ctypes.byref(s), M)
    return w // M if M else 0


def packed_cols(K: int, N: int, T: int = 256, C: int = 8) -> int:
    """Columns of the packed int32 tensor for one row (N / C), 0 for an unsupported shape."""
    return _shape_words(K, N, T, C, _lib.DTYPE_BF16, True, 1)


def _plan(op, x, N, T, C, gated, path="auto"):
    if path not in _lib.PATHS:
        raise invalid(f"twellrt.{op}: path must be one of {sorted(_lib.PATHS)}, got {path!r}")
    ctx = _lib.context(x.device)
    return _lib.get_plan(ctx, x.shape[1], N, T, C, _DTYPES[x.dtype], gated)


def reserve(device, K: int, N: int, max_M: int, nnz_per_row: float, T: int = 256, C: int = 8,
            dtype=torch.bfloat16, gated: bool = True) -> None:
    """twell_plan_reserve for the plan the ops use for this shape on `device`: later gate_pack /
    ffn_infer calls of up to max_M rows load, tune, look up and allocate nothing and can be
    captured into a CUDA graph; nnz_per_row (expected active values per row) sizes the sparse
    lists and is AUTO's density estimate until real counts arrive. Host call; may wait for the
    plan's earlier work. A no-op check on the CPU backend."""
    device = torch.device(device)
    if dtype not in _DTYPES:
        raise invalid(f"twellrt.reserve: dtype {dtype}; supported: torch.bfloat16, torch.float16")
    lib = _lib.library()
    if not hasattr(lib, "twell_plan_reserve"):
        raise _lib.TwellError("TWELL_ERR_UNSUPPORTED", 2, f"twellrt.reserve: {_lib.library_path()} has no twell_plan_reserve")
    plan = _lib.get_plan(_lib.context(device), K, N, T, C, _DTYPES[dtype], gated)
    with plan.ctx.lock:
        plan.ctx.check(lib.twell_plan_reserve(plan.handle, max_M, float(nnz_per_row)), "twell_plan_reserve")


# ---------------------------------------------------------------------------------------------
# gate_pack
# ---------------------------------------------------------------------------------------------


@torch.library.custom_op("twellrt::gate_pack", mutates_args=())
def gate_pack(x: torch.Tensor, w: torch.Tensor, T: int = 256, C: int = 8, gated: bool = True) -> torch.Tensor:
    """packed = TwELL(relu(x · wᵀ)) as int32 [M, N/C]; w is Wg (gated) or Wu (non-gated) [N, K].
    `gated` says which layer kind the plan serves (the packing itself is the same)."""
    _check_x("gate_pack", x)
    N = _weights("gate_pack", x, [w], ["w"])
    plan = _plan("gate_pack", x, N, T, C, gated)
    M = x.shape[0]
    out = torch.empty((M, plan.packed_words(1)), dtype=torch.int32, device=x.device)
    if M == 0:
        return out
    lib = _lib.library()
    ctx = plan.ctx
    with ctx.lock:
        st = lib.twell_gate_pack(plan.handle, M, x.data_ptr(), w.data_ptr(), out.data_ptr(), _stream(x.device))
        ctx.check(st, "twell_gate_pack")
    return out


@gate_pack.register_fake
def _(x, w, T=256, C=8, gated=True):
    _check_x("gate_pack", x)
    N = _weights("gate_pack", x, [w], ["w"])
    cols = _shape_words(x.shape[1], N, T, C, _DTYPES[x.dtype], gated, 1)
    if cols == 0:
        raise invalid(f"twellrt.gate_pack: unsupported shape K={x.shape[1]} N={N} T={T} C={C}")
    return x.new_empty((x.shape[0], cols), dtype=torch.int32)


# ---------------------------------------------------------------------------------------------
# ffn_infer
# ---------------------------------------------------------------------------------------------


def _infer_check(x, packed, wg, wu, wd, T, C):
    _check_x("ffn_infer", x)
    N = _weights("ffn_infer", x, [wg, wu, wd], ["wg", "wu", "wd"])
    cols = _shape_words(x.shape[1], N, T, C, _DTYPES[x.dtype], wg is not None, 1)
    if cols == 0:
        raise invalid(f"twellrt.ffn_infer: unsupported shape K={x.shape[1]} N={N} T={T} C={C}")
    _check("ffn_infer", "packed", packed, torch.int32, x.device, (x.shape[0], cols))
    return N


@torch.library.custom_op("twellrt::ffn_infer", mutates_args=())
def ffn_infer(
    x: torch.Tensor,
    packed: torch.Tensor,
    wg: Optional[torch.Tensor],
    wu: torch.Tensor,
    wd: torch.Tensor,
    T: int = 256,
    C: int = 8,
    path: str = "auto",
) -> torch.Tensor:
    """y [M, K] from the packed gate (gated: wg = Wg, y = (g ⊙ x·Wuᵀ)·Wd) or packed h (wg None:
    y = h·Wd). wd is [N, K] (row n = neuron n), i.e. the transpose of nn.Linear's down_proj
    weight. path: "auto" (the library's choice), "sparse" or "dense"."""
    N = _infer_check(x, packed, wg, wu, wd, T, C)
    gated = wg is not None
    plan = _plan("ffn_infer", x, N, T, C, gated, path)
    y = torch.empty_like(x)
    M = x.shape[0]
    if M == 0:
        return y
    lib = _lib.library()
    ctx = plan.ctx
    with ctx.lock:
        plan.set_path(_lib.PATHS[path])
        st = lib.twell_ffn_infer(
            plan.handle, M, x.data_ptr(), packed.data_ptr(), _ptr(wg), wu.data_ptr(), wd.data_ptr(),
            y.data_ptr(), _stream(x.device),
        )
        ctx.check(st, "twell_ffn_infer")
    return y


@ffn_infer.register_fake
def _(x, packed, wg, wu, wd, T=256, C=8, path="auto"):
    _infer_check(x, packed, wg, wu, wd, T, C)
    return torch.empty_like(x)


# ---------------------------------------------------------------------------------------------
# training: forward (with autograd) and backward
# ---------------------------------------------------------------------------------------------


def _train_check(op, x, wg, wu, wd, lam):
    _check_x(op, x)
    if not isinstance(lam, float) or not (lam >= 0.0 and lam != float("inf")):
        raise invalid(f"twellrt.{op}: lam (the L1 coefficient) must be a finite float >= 0, got {lam!r}")
    return _weights(op, x, [wg, wu, wd], ["wg", "wu", "wd"])


@torch.library.custom_op("twellrt::ffn_train", mutates_args=())
def ffn_train(
    x: torch.Tensor,
    wg: torch.Tensor,
    wu: torch.Tensor,
    wd: torch.Tensor,
    lam: float = 0.0,
    T: int = 256,
    C: int = 8,
    path: str = "auto",
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training forward of a gated layer: y [M, K], stats float32 [2] = (L0, L1) on x's device,
    and a handle (int64 [1], CPU) naming the library state the backward reads. The state stays
    reserved until the handle is freed (normally with the autograd graph). lam is the L1
    coefficient the backward applies: the L1 term's gradient comes from the op, so do not add
    lam * L1 to the loss yourself (stats carry no gradient)."""
    N = _train_check("ffn_train", x, wg, wu, wd, lam)
    plan = _plan("ffn_train", x, N, T, C, True, path)
    M = x.shape[0]
    y = torch.empty_like(x)
    stats = torch.zeros(2, dtype=torch.float32, device=x.device)
    if M == 0:
        return y, stats, torch.zeros(1, dtype=torch.int64)
    lib = _lib.library()
    ctx = plan.ctx
    with ctx.lock:
        sid, ref = _lib.state_acquire(plan)
        try:
            plan.set_path(_lib.PATHS[path])
            st = lib.twell_ffn_forward_train(
                plan.handle, M, x.data_ptr(), wg.data_ptr(), wu.data_ptr(), wd.data_ptr(),
                y.data_ptr(), stats.data_ptr(), ref.state, _stream(x.device),
            )
            ctx.check(st, "twell_ffn_forward_train")
        except BaseException:
            _lib._states.pop(sid, None)
            plan.free_states.append(ref.state)
            raise
    ref.M = M
    handle = torch.tensor([sid], dtype=torch.int64)
    weakref.finalize(handle, _lib.state_release, sid)
    return y, stats, handle


@ffn_train.register_fake
def _(x, wg, wu, wd, lam=0.0, T=256, C=8, path="auto"):
    _train_check("ffn_train", x, wg, wu, wd, lam)
    return (
        torch.empty_like(x),
        x.new_empty((2,), dtype=torch.float32),
        torch.empty((1,), dtype=torch.int64, device="cpu"),
    )


@torch.library.custom_op("twellrt::ffn_train_backward", mutates_args=())
def ffn_train_backward(
    handle: torch.Tensor,
    x: torch.Tensor,
    wg: torch.Tensor,
    wu: torch.Tensor,
    wd: torch.Tensor,
    dy: torch.Tensor,
    lam: float = 0.0,
    T: int = 256,
    C: int = 8,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward of the forward that returned `handle` (same x and weights, unchanged): dx [M, K]
    in x's dtype, dwg, dwu, dwd [N, K] float32, including the L1 term lam·Σ|U ⊙ P| / M."""
    N = _train_check("ffn_train_backward", x, wg, wu, wd, lam)
    _check("ffn_train_backward", "dy", dy, x.dtype, x.device, x.shape)
    _check("ffn_train_backward", "handle", handle, torch.int64, torch.device("cpu"), (1,))
    M, K = x.shape
    dx = torch.empty_like(x)
    dws = [torch.empty((N, K), dtype=torch.float32, device=x.device) for _ in range(3)]
    if M == 0:
        for d in dws:
            d.zero_()
        return dx, dws[0], dws[1], dws[2]
    ref = _lib.state_lookup(int(handle[0]))
    plan = ref.plan
    if plan.ctx.key != _lib.context(x.device).key or (plan.K, plan.N, plan.T, plan.C) != (K, N, T, C) or ref.M != M:
        raise invalid(
            "twellrt.ffn_train_backward: x, the weights or T/C do not match the forward that made "
            f"this handle (forward: M={ref.M} K={plan.K} N={plan.N} T={plan.T} C={plan.C})"
        )
    lib = _lib.library()
    ctx = plan.ctx
    with ctx.lock:
        st = lib.twell_ffn_backward(
            plan.handle, ref.state, M, x.data_ptr(), wg.data_ptr(), wu.data_ptr(), wd.data_ptr(),
            dy.data_ptr(), ctypes.c_float(lam), dx.data_ptr(), dws[0].data_ptr(), dws[1].data_ptr(),
            dws[2].data_ptr(), _stream(x.device),
        )
        ctx.check(st, "twell_ffn_backward")
    return dx, dws[0], dws[1], dws[2]


@ffn_train_backward.register_fake
def _(handle, x, wg, wu, wd, dy, lam=0.0, T=256, C=8):
    N = _train_check("ffn_train_backward", x, wg, wu, wd, lam)
    _check("ffn_train_backward", "dy", dy, x.dtype, x.device, x.shape)
    K = x.shape[1]
    return (torch.empty_like(x),) + tuple(x.new_empty((N, K), dtype=torch.float32) for _ in range(3))


def _train_setup(ctx, inputs, output):
    x, wg, wu, wd, lam, T, C, _path = inputs
    _y, _stats, handle = output
    ctx.save_for_backward(x, wg, wu, wd, handle)
    ctx.lam, ctx.T, ctx.C = lam, T, C
    ctx.mark_non_differentiable(_stats, handle)


def _train_backward(ctx, dy, _dstats, _dhandle):
    x, wg, wu, wd, handle = ctx.saved_tensors
    dx, dwg, dwu, dwd = ffn_train_backward(handle, x, wg, wu, wd, dy.contiguous(), ctx.lam, ctx.T, ctx.C)
    return dx, dwg.to(wg.dtype), dwu.to(wu.dtype), dwd.to(wd.dtype), None, None, None, None


ffn_train.register_autograd(_train_backward, setup_context=_train_setup)
