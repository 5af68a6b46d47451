"""PyTorch custom operators (torch.library) over libtwellrt's ops, with fake implementations for
torch.compile and autograd for training. Tensors must be contiguous, of one dtype (bf16 or fp16)
and on one device: CPU tensors run on the library's exact CPU backend, CUDA tensors on their
device, enqueued on PyTorch's current stream. The packed TwELL tensor is an ordinary int32
tensor [M, N/C] (the library's uint32 words, bit for bit).

Ops (namespace `twellrt`, also callable as the Python functions below):
  gate_pack(x, w, T, C, gated)                           -> packed
  ffn_infer(x, packed, wg, wu, wd, T, C, path)           -> y        (wg None: non-gated)
  ffn_train(x, wg, wu, wd, lam, T, C, path)              -> y, stats, saved   (autograd)
  ffn_train_backward(saved, x, wg, wu, wd, dy, lam, T, C) -> dx, dwg, dwu, dwd (fp32)

Every bad argument of the Python functions here (None or a non-tensor where a tensor belongs, a
wrong dtype, device, shape or layout, an int, bool, float or string of the wrong type or out of
range) raises TwellInvalidArgument (a TwellError and a ValueError) naming the argument, before
anything is allocated or written. Called as torch.ops.twellrt.* directly, the dispatcher checks
the schema's Python types first and raises its own error for those; everything else is the same.

`saved`, the training forward's third output, is an int64 CPU tensor [5] holding (M, K, N, T,
C): the same values for the same inputs, so both training ops are functions of their inputs, as
torch.compile and opcheck expect (the per-call handle id this replaced was not). The library
state the backward reads (backend memory, owned by the library) belongs to that tensor's
storage: the backward finds it from the storage's address, and it goes back to its plan's pool
when torch frees the storage (normally with the autograd graph). A copy of `saved` (opcheck
copies every input) carries the values but not the state: the backward then recomputes the
forward from x and the weights first, so it returns the same gradients at the cost of one more
forward (counted in twellrt._lib.recomputed_forwards; autograd, eager or compiled, passes the
forward's own tensor and never recomputes)."""

from __future__ import annotations

import ctypes
import functools
import math
import struct
from typing import Optional, Tuple

import torch

from . import _lib
from ._lib import invalid

__all__ = ["gate_pack", "ffn_infer", "ffn_train", "ffn_train_backward", "packed_cols", "reserve"]

_DTYPES = {torch.bfloat16: _lib.DTYPE_BF16, torch.float16: _lib.DTYPE_FP16}
_U32_MAX = (1 << 32) - 1  # shape fields are uint32 in twellrt.h: larger values must not wrap
_SAVED_LEN = 5  # (M, K, N, T, C)

try:  # the raw cudaStream_t of the current stream, without building a torch.cuda.Stream
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _stream(dev: torch.device):
    return _raw_stream(dev.index if dev.index is not None else torch.cuda.current_device()) if dev.type == "cuda" else None


def _ptr(t: Optional[torch.Tensor]):
    return None if t is None else t.data_ptr()


# ---------------------------------------------------------------------------------------------
# argument checks: what the library cannot see through a raw pointer (type, dtype, device,
# shape, layout) and what ctypes would silently wrap (negative or too large ints)
# ---------------------------------------------------------------------------------------------


def _kind(v) -> str:
    return "None" if v is None else type(v).__name__


def _check_int(op: str, name: str, v, lo: int = 1, hi: int = _U32_MAX):
    # SymInts appear where torch.compile traces with dynamic ints; their range is checked by
    # the op itself when it runs
    if isinstance(v, torch.SymInt):
        return
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid(f"twellrt.{op}: {name} must be an int, got {_kind(v)}")
    if not lo <= v <= hi:
        raise invalid(f"twellrt.{op}: {name} = {v} is out of range [{lo}, {hi}]")


def _check_bool(op: str, name: str, v):
    if not isinstance(v, bool):
        raise invalid(f"twellrt.{op}: {name} must be a bool, got {_kind(v)}")


def _check_path(op: str, path):
    if not isinstance(path, str) or path not in _lib.PATHS:
        raise invalid(f"twellrt.{op}: path must be one of {sorted(_lib.PATHS)}, got {path!r}")


def _check_lam(op: str, lam):
    if isinstance(lam, torch.SymFloat):
        return
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not (0.0 <= lam < math.inf):
        raise invalid(f"twellrt.{op}: lam (the L1 coefficient) must be a finite float >= 0, got {lam!r}")


def _check_tensors(op: str, optional=(), **tensors):
    """In the Python functions, before the dispatcher (which rejects a non-tensor with its own
    error and lets None through to the op)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor) and not (t is None and name in optional):
            raise invalid(f"twellrt.{op}: {name} must be a tensor, got {_kind(t)}")


def _check_tc(op: str, T, C):
    _check_int(op, "T", T)
    _check_int(op, "C", C)


def _check(op: str, what: str, t, dtype, device, shape):
    """Raised as TwellInvalidArgument before anything is allocated or written."""
    if not isinstance(t, torch.Tensor):
        raise invalid(f"twellrt.{op}: {what} must be a tensor, got {_kind(t)}")
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
        raise invalid(f"twellrt.{op}: x must be a tensor, got {_kind(x)}")
    if x.dtype not in _DTYPES:
        raise invalid(f"twellrt.{op}: x has dtype {x.dtype}; supported: torch.bfloat16, torch.float16")
    if x.dim() != 2:
        raise invalid(f"twellrt.{op}: x must be 2-D [M, K], got shape {tuple(x.shape)}")
    _check(op, "x", x, x.dtype, x.device, None)


def _weights(op, x, ws, names, optional=()):
    """Checks [N, K] weights against x (a name in `optional` may be None); returns N, taken from
    the first weight given."""
    for w, n in zip(ws, names):
        if w is None and n not in optional:
            raise invalid(f"twellrt.{op}: {n} must be a tensor [N, K], got None")
    first, fname = next((w, n) for w, n in zip(ws, names) if w is not None)
    if not isinstance(first, torch.Tensor) or first.dim() != 2:
        got = tuple(first.shape) if isinstance(first, torch.Tensor) else _kind(first)
        raise invalid(f"twellrt.{op}: {fname} must be a 2-D tensor [N, K], got {got}")
    N = first.shape[0]
    for w, n in zip(ws, names):
        if w is not None:
            _check(op, n, w, x.dtype, x.device, (N, x.shape[1]))
    return N


@functools.lru_cache(maxsize=256)
def _row_words(K, N, T, C, dtype_code, gated):
    """Words of one packed row for a shape (0 for an invalid one): the library's own
    twell_packed_words, asked once per shape (a pure function of it; the ops ask on every call)."""
    lib = _lib.library()
    s = _lib.shape(K, N, T, C, dtype_code, gated)
    return int(lib.twell_packed_words(ctypes.byref(s), 1))


def _shape_words(K, N, T, C, dtype_code, gated, M):
    """Words per row of the packed tensor for a shape (0 for an invalid one), so the fake
    implementations and the real ops agree with the C side. Symbolic sizes (torch.compile with
    dynamic shapes) are asked of the library directly."""
    if all(type(v) is int for v in (K, N, T, C)):
        return _row_words(K, N, T, C, dtype_code, bool(gated)) if M else 0
    lib = _lib.library()
    s = _lib.shape(K, N, T, C, dtype_code, gated)
    w = lib.twell_packed_words(ctypes.byref(s), M)
    return w // M if M else 0


def packed_cols(K: int, N: int, T: int = 256, C: int = 8) -> int:
    """Columns of the packed int32 tensor for one row (N / C), 0 for an unsupported shape."""
    for name, v in (("K", K), ("N", N), ("T", T), ("C", C)):
        _check_int("packed_cols", name, v)
    return _shape_words(K, N, T, C, _lib.DTYPE_BF16, True, 1)


def _plan(op, x, N, T, C, gated, path="auto"):
    _check_path(op, path)
    ctx = _lib.context(x.device)
    return _lib.get_plan(ctx, x.shape[1], N, T, C, _DTYPES[x.dtype], gated)


def reserve(device, K: int, N: int, max_M: int, nnz_per_row: float, T: int = 256, C: int = 8,
            dtype=torch.bfloat16, gated: bool = True) -> None:
    """twell_plan_reserve for the plan the ops use for this shape on `device`: later gate_pack /
    ffn_infer calls of up to max_M rows load, tune, look up and allocate nothing and can be
    captured into a CUDA graph; nnz_per_row (expected active values per row) sizes the sparse
    lists and is AUTO's density estimate until real counts arrive. Host call; may wait for the
    plan's earlier work. A no-op check on the CPU backend."""
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError) as e:
        raise invalid(f"twellrt.reserve: device {device!r} is not a torch device ({e})") from None
    for name, v in (("K", K), ("N", N), ("T", T), ("C", C)):
        _check_int("reserve", name, v)
    _check_int("reserve", "max_M", max_M, 1, (1 << 63) - 1)
    if isinstance(nnz_per_row, bool) or not isinstance(nnz_per_row, (int, float)):
        raise invalid(f"twellrt.reserve: nnz_per_row must be a float, got {_kind(nnz_per_row)}")
    if dtype not in _DTYPES:
        raise invalid(f"twellrt.reserve: dtype {dtype}; supported: torch.bfloat16, torch.float16")
    _check_bool("reserve", "gated", gated)
    lib = _lib.library()
    if not hasattr(lib, "twell_plan_reserve"):
        raise _lib.TwellError("TWELL_ERR_UNSUPPORTED", 2, f"twellrt.reserve: {_lib.library_path()} has no twell_plan_reserve")
    plan = _lib.get_plan(_lib.context(device), K, N, T, C, _DTYPES[dtype], gated)
    with plan.ctx.lock:
        plan.ctx.check(lib.twell_plan_reserve(plan.handle, max_M, float(nnz_per_row)), "twell_plan_reserve")


# ---------------------------------------------------------------------------------------------
# gate_pack
# ---------------------------------------------------------------------------------------------


def _pack_check(x, w, T, C):
    _check_x("gate_pack", x)
    _check_tc("gate_pack", T, C)
    return _weights("gate_pack", x, [w], ["w"])


@torch.library.custom_op("twellrt::gate_pack", mutates_args=())
def _gate_pack_op(x: torch.Tensor, w: torch.Tensor, T: int = 256, C: int = 8, gated: bool = True) -> torch.Tensor:
    N = _pack_check(x, w, T, C)
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


@_gate_pack_op.register_fake
def _(x, w, T=256, C=8, gated=True):
    N = _pack_check(x, w, T, C)
    cols = _shape_words(x.shape[1], N, T, C, _DTYPES[x.dtype], gated, 1)
    if cols == 0:
        raise invalid(f"twellrt.gate_pack: unsupported shape K={x.shape[1]} N={N} T={T} C={C}")
    return x.new_empty((x.shape[0], cols), dtype=torch.int32)


def gate_pack(x: torch.Tensor, w: torch.Tensor, T: int = 256, C: int = 8, gated: bool = True) -> torch.Tensor:
    """packed = TwELL(relu(x · wᵀ)) as int32 [M, N/C]; w is Wg (gated) or Wu (non-gated) [N, K].
    `gated` says which layer kind the plan serves (the packing itself is the same)."""
    _check_tensors("gate_pack", x=x, w=w)
    _check_tc("gate_pack", T, C)
    _check_bool("gate_pack", "gated", gated)
    return _gate_pack_op(x, w, T, C, gated)


# ---------------------------------------------------------------------------------------------
# ffn_infer
# ---------------------------------------------------------------------------------------------


def _layer_check(x, wg, wu, wd, T, C, path, op="ffn_layer"):
    """The checks of an inference layer's x and weights (op names the caller in messages); returns
    N and the packed words per row."""
    _check_x(op, x)
    _check_tc(op, T, C)
    _check_path(op, path)
    N = _weights(op, x, [wg, wu, wd], ["wg", "wu", "wd"], optional=("wg",))
    cols = _shape_words(x.shape[1], N, T, C, _DTYPES[x.dtype], wg is not None, 1)
    if cols == 0:
        raise invalid(f"twellrt.{op}: unsupported shape K={x.shape[1]} N={N} T={T} C={C}")
    return N, cols


def _infer_check(x, packed, wg, wu, wd, T, C, path):
    N, cols = _layer_check(x, wg, wu, wd, T, C, path, "ffn_infer")
    _check("ffn_infer", "packed", packed, torch.int32, x.device, (x.shape[0], cols))
    return N


@torch.library.custom_op("twellrt::ffn_infer", mutates_args=())
def _ffn_infer_op(
    x: torch.Tensor,
    packed: torch.Tensor,
    wg: Optional[torch.Tensor],
    wu: torch.Tensor,
    wd: torch.Tensor,
    T: int = 256,
    C: int = 8,
    path: str = "auto",
) -> torch.Tensor:
    N = _infer_check(x, packed, wg, wu, wd, T, C, path)
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


@_ffn_infer_op.register_fake
def _(x, packed, wg, wu, wd, T=256, C=8, path="auto"):
    _infer_check(x, packed, wg, wu, wd, T, C, path)
    return torch.empty_like(x)


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
    weight: the twellrt modules hold it as down_proj.weight_t. path: "auto" (the library's
    choice), "sparse" or "dense"."""
    _check_tensors("ffn_infer", ("wg",), x=x, packed=packed, wg=wg, wu=wu, wd=wd)
    _check_tc("ffn_infer", T, C)
    _check_path("ffn_infer", path)
    return _ffn_infer_op(x, packed, wg, wu, wd, T, C, path)


# ---------------------------------------------------------------------------------------------
# ffn_layer: the layer from x in one call
# ---------------------------------------------------------------------------------------------


@torch.library.custom_op("twellrt::ffn_layer", mutates_args=())
def _ffn_layer_op(
    x: torch.Tensor,
    wg: Optional[torch.Tensor],
    wu: torch.Tensor,
    wd: torch.Tensor,
    T: int = 256,
    C: int = 8,
    path: str = "auto",
) -> torch.Tensor:
    N, _ = _layer_check(x, wg, wu, wd, T, C, path)
    gated = wg is not None
    plan = _plan("ffn_layer", x, N, T, C, gated, path)
    y = torch.empty_like(x)
    M = x.shape[0]
    if M == 0:
        return y
    lib = _lib.library()
    if not hasattr(lib, "twell_ffn_layer"):  # an older library: its two calls
        packed = _gate_pack_op(x, wg if gated else wu, T, C, gated)
        return _ffn_infer_op(x, packed, wg, wu, wd, T, C, path)
    # the packed gate's scratch, from torch's allocator (a captured call's comes from the graph's
    # pool); the library may leave it unwritten (its dense route packs nothing)
    scratch = torch.empty((M, plan.packed_words(1)), dtype=torch.int32, device=x.device)
    ctx = plan.ctx
    with ctx.lock:
        plan.set_path(_lib.PATHS[path])
        st = lib.twell_ffn_layer(
            plan.handle, M, x.data_ptr(), _ptr(wg), wu.data_ptr(), wd.data_ptr(), y.data_ptr(),
            scratch.data_ptr(), _stream(x.device),
        )
        ctx.check(st, "twell_ffn_layer")
    return y


@_ffn_layer_op.register_fake
def _(x, wg, wu, wd, T=256, C=8, path="auto"):
    _layer_check(x, wg, wu, wd, T, C, path)
    return torch.empty_like(x)


def ffn_layer(
    x: torch.Tensor,
    wg: Optional[torch.Tensor],
    wu: torch.Tensor,
    wd: torch.Tensor,
    T: int = 256,
    C: int = 8,
    path: str = "auto",
) -> torch.Tensor:
    """y [M, K] of the whole inference layer from x in one library call (twell_ffn_layer): the
    same y as ffn_infer(x, gate_pack(x, wg or wu), wg, wu, wd), but where the library runs its
    dense route (path "dense", or AUTO's choice) nothing is packed, and it is one op dispatch
    instead of two. wg None: non-gated (wu carries the sparsity). wd is [N, K], as for
    ffn_infer."""
    _check_tensors("ffn_layer", ("wg",), x=x, wg=wg, wu=wu, wd=wd)
    _check_tc("ffn_layer", T, C)
    _check_path("ffn_layer", path)
    return _ffn_layer_op(x, wg, wu, wd, T, C, path)


# ---------------------------------------------------------------------------------------------
# training: forward (with autograd) and backward
# ---------------------------------------------------------------------------------------------


def _train_check(op, x, wg, wu, wd, lam, T, C):
    _check_x(op, x)
    _check_lam(op, lam)
    _check_tc(op, T, C)
    return _weights(op, x, [wg, wu, wd], ["wg", "wu", "wd"])


class _SavedBuffer(bytearray):
    """The memory of a `saved` tensor (torch.frombuffer over it). It owns a library training
    state: torch keeps the buffer alive as long as any tensor views that storage, so the state
    goes back to its plan's pool exactly when the last of them is freed, whichever tensor
    objects (autograd's saved copy, a compiled graph's output) held it."""

    __slots__ = ("ref",)

    def __del__(self):
        _lib.state_release(self.ref)


def _saved_tensor(ref, values) -> torch.Tensor:
    buf = _SavedBuffer(8 * _SAVED_LEN)
    struct.pack_into(f"={_SAVED_LEN}q", buf, 0, *values)
    buf.ref = ref
    t = torch.frombuffer(buf, dtype=torch.int64)
    _lib.state_register(ref, t.data_ptr())
    return t


@torch.library.custom_op("twellrt::ffn_train", mutates_args=())
def _ffn_train_op(
    x: torch.Tensor,
    wg: torch.Tensor,
    wu: torch.Tensor,
    wd: torch.Tensor,
    lam: float = 0.0,
    T: int = 256,
    C: int = 8,
    path: str = "auto",
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    N = _train_check("ffn_train", x, wg, wu, wd, lam, T, C)
    plan = _plan("ffn_train", x, N, T, C, True, path)
    M, K = x.shape
    y = torch.empty_like(x)
    stats = torch.zeros(2, dtype=torch.float32, device=x.device)
    values = (M, K, N, T, C)
    if M == 0:  # nothing to save: the backward of an empty batch needs no state
        return y, stats, torch.tensor(values, dtype=torch.int64)
    lib = _lib.library()
    ctx = plan.ctx
    with ctx.lock:
        ref = _lib.state_acquire(plan)
        try:
            plan.set_path(_lib.PATHS[path])
            st = lib.twell_ffn_forward_train(
                plan.handle, M, x.data_ptr(), wg.data_ptr(), wu.data_ptr(), wd.data_ptr(),
                y.data_ptr(), stats.data_ptr(), ref.state, _stream(x.device),
            )
            ctx.check(st, "twell_ffn_forward_train")
        except BaseException:
            plan.free_states.append(ref.state)
            raise
    ref.M = M
    return y, stats, _saved_tensor(ref, values)


@_ffn_train_op.register_fake
def _(x, wg, wu, wd, lam=0.0, T=256, C=8, path="auto"):
    _train_check("ffn_train", x, wg, wu, wd, lam, T, C)
    _check_path("ffn_train", path)
    return (
        torch.empty_like(x),
        x.new_empty((2,), dtype=torch.float32),
        torch.empty((_SAVED_LEN,), dtype=torch.int64, device="cpu"),
    )


def _backward_check(saved, x, wg, wu, wd, dy, lam, T, C, path):
    op = "ffn_train_backward"
    N = _train_check(op, x, wg, wu, wd, lam, T, C)
    _check_path(op, path)
    _check(op, "dy", dy, x.dtype, x.device, x.shape)
    _check(op, "saved", saved, torch.int64, torch.device("cpu"), (_SAVED_LEN,))
    return N


@torch.library.custom_op("twellrt::ffn_train_backward", mutates_args=())
def _ffn_train_backward_op(
    saved: torch.Tensor,
    x: torch.Tensor,
    wg: torch.Tensor,
    wu: torch.Tensor,
    wd: torch.Tensor,
    dy: torch.Tensor,
    lam: float = 0.0,
    T: int = 256,
    C: int = 8,
    path: str = "auto",
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    N = _backward_check(saved, x, wg, wu, wd, dy, lam, T, C, path)
    M, K = x.shape
    want = (M, K, N, T, C)
    got = tuple(saved.tolist())
    if got != want:
        raise invalid(
            "twellrt.ffn_train_backward: x, the weights or T/C do not match the forward that made "
            f"`saved` (forward: M, K, N, T, C = {got}; here {want})"
        )
    dx = torch.empty_like(x)
    dws = [torch.empty((N, K), dtype=torch.float32, device=x.device) for _ in range(3)]
    if M == 0:
        for d in dws:
            d.zero_()
        return dx, dws[0], dws[1], dws[2]
    ref = _lib.state_lookup(saved.data_ptr())
    if ref is None:
        plan = _plan("ffn_train_backward", x, N, T, C, True, path)
    else:
        plan = ref.plan  # not necessarily the cached plan of the shape now: the cache evicts
        here = (_lib.context(x.device).key, M, K, N, T, C, _DTYPES[x.dtype])
        if (plan.ctx.key, ref.M, plan.K, plan.N, plan.T, plan.C, plan.shape.dtype) != here:
            raise invalid(
                "twellrt.ffn_train_backward: x's device or dtype does not match the forward that "
                f"made `saved` (forward: {plan.ctx.key}, {'bf16' if plan.shape.dtype == _lib.DTYPE_BF16 else 'fp16'})"
            )
    lib = _lib.library()
    ctx = plan.ctx
    with ctx.lock:
        if ref is not None:
            state = ref.state
        else:
            # `saved` is a copy (its values, not its storage): recompute the forward into a
            # state of the pool, so the gradients are still those of (x, wg, wu, wd)
            tmp = _lib.state_acquire(plan)
            state = tmp.state
            _lib.recomputed_forwards += 1
        try:
            if ref is None:
                plan.set_path(_lib.PATHS[path])
                y = torch.empty_like(x)  # the forward's y, not needed (named: it must outlive the call)
                st = lib.twell_ffn_forward_train(
                    plan.handle, M, x.data_ptr(), wg.data_ptr(), wu.data_ptr(), wd.data_ptr(),
                    y.data_ptr(), None, state, _stream(x.device),
                )
                ctx.check(st, "twell_ffn_forward_train")
            st = lib.twell_ffn_backward(
                plan.handle, state, M, x.data_ptr(), wg.data_ptr(), wu.data_ptr(), wd.data_ptr(),
                dy.data_ptr(), ctypes.c_float(lam), dx.data_ptr(), dws[0].data_ptr(), dws[1].data_ptr(),
                dws[2].data_ptr(), _stream(x.device),
            )
            ctx.check(st, "twell_ffn_backward")
        finally:
            if ref is None:
                plan.free_states.append(state)
    return dx, dws[0], dws[1], dws[2]


@_ffn_train_backward_op.register_fake
def _(saved, x, wg, wu, wd, dy, lam=0.0, T=256, C=8, path="auto"):
    N = _backward_check(saved, x, wg, wu, wd, dy, lam, T, C, path)
    K = x.shape[1]
    return (torch.empty_like(x),) + tuple(x.new_empty((N, K), dtype=torch.float32) for _ in range(3))


def _train_setup(ctx, inputs, output):
    x, wg, wu, wd, lam, T, C, path = inputs
    _y, stats, saved = output
    ctx.save_for_backward(x, wg, wu, wd, saved)
    ctx.lam, ctx.T, ctx.C, ctx.path = lam, T, C, path
    ctx.mark_non_differentiable(stats, saved)


def _train_backward(ctx, dy, _dstats, _dsaved):
    x, wg, wu, wd, saved = ctx.saved_tensors
    dx, dwg, dwu, dwd = _ffn_train_backward_op(saved, x, wg, wu, wd, dy.contiguous(), ctx.lam, ctx.T, ctx.C, ctx.path)
    # dwd is [N, K] like wd (the modules' down_proj.weight_t): no transpose on the way
    return dx, dwg.to(wg.dtype), dwu.to(wu.dtype), dwd.to(wd.dtype), None, None, None, None


_ffn_train_op.register_autograd(_train_backward, setup_context=_train_setup)


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
    and `saved` (int64 [5], CPU; module docstring), whose storage holds the library state the
    backward reads until torch frees it (normally with the autograd graph). lam is the L1
    coefficient the backward applies: the L1 term's gradient comes from the op, so do not add
    lam * L1 to the loss yourself (stats carry no gradient)."""
    _check_tensors("ffn_train", x=x, wg=wg, wu=wu, wd=wd)
    _check_lam("ffn_train", lam)
    _check_tc("ffn_train", T, C)
    _check_path("ffn_train", path)
    return _ffn_train_op(x, wg, wu, wd, float(lam) if isinstance(lam, int) else lam, T, C, path)


def ffn_train_backward(
    saved: torch.Tensor,
    x: torch.Tensor,
    wg: torch.Tensor,
    wu: torch.Tensor,
    wd: torch.Tensor,
    dy: torch.Tensor,
    lam: float = 0.0,
    T: int = 256,
    C: int = 8,
    path: str = "auto",
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward of the forward that returned `saved` (same x and weights, unchanged): dx [M, K]
    in x's dtype, dwg, dwu, dwd [N, K] float32, including the L1 term lam·Σ|U ⊙ P| / M. Given a
    copy of `saved` it recomputes that forward first (with `path`, the forward's path argument)."""
    _check_tensors("ffn_train_backward", saved=saved, x=x, wg=wg, wu=wu, wd=wd, dy=dy)
    _check_lam("ffn_train_backward", lam)
    _check_tc("ffn_train_backward", T, C)
    _check_path("ffn_train_backward", path)
    return _ffn_train_backward_op(saved, x, wg, wu, wd, dy, float(lam) if isinstance(lam, int) else lam, T, C, path)
