"""ctypes binding of libtwellrt's public C API (runtime/twellrt.h): loading, status codes turned
into exceptions, one context per device (created on first use, cached) and plans cached per
layer. Everything here is a thin wrapper: shapes, formats and kernels are the library's."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import weakref

__all__ = [
    "TwellError",
    "library",
    "library_path",
    "version",
    "context",
    "get_plan",
    "PATHS",
]

_log = logging.getLogger("twellrt")

_HERE = os.path.dirname(os.path.abspath(__file__))

# Status codes of twellrt.h (TWELL_STATUS_MAP); names come from the library itself.
TWELL_OK = 0
TWELL_ERR_INVALID_ARG = 1

BACKEND_CPU = 1
BACKEND_CUDA = 2

DTYPE_BF16 = 0
DTYPE_FP16 = 1

PATHS = {"auto": 0, "sparse": 1, "dense": 2}

# TWELL_ABI_VERSION of twellrt.h: the package's library is libtwellrt.so.<this>.
ABI_VERSION = 1


class TwellError(RuntimeError):
    """A twellrt call failed. `status` is the library's status name ("TWELL_ERR_INVALID_ARG", ...),
    `code` its number and `message` the context's message (twell_ctx_errmsg) or, for an argument
    the Python binding rejects before calling the library, what was wrong with it."""

    def __init__(self, status: str, code: int, message: str):
        super().__init__(f"{status}: {message}" if message else status)
        self.status = status
        self.code = code
        self.message = message


class TwellInvalidArgument(TwellError, ValueError):
    """TWELL_ERR_INVALID_ARG (also a ValueError)."""


def _error(code: int, message: str) -> TwellError:
    name = library().twell_status_name(code).decode()
    cls = TwellInvalidArgument if code == TWELL_ERR_INVALID_ARG else TwellError
    return cls(name, code, message)


def invalid(message: str) -> TwellError:
    """The exception for an argument the binding rejects before calling the library."""
    return _error(TWELL_ERR_INVALID_ARG, message)


# The sized structs of the header ("ABI stability" in twellrt.h): each begins with struct_size,
# which the library's *_init_sized sets to ctypes.sizeof of the class below while writing its
# defaults, and the library reads only those bytes. A library newer than this binding gives the
# fields it has and the binding lacks their defaults; an older one refuses a field it does not
# know only when the binding sets it.
class _CtxOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", ctypes.c_int),
        ("device", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
        ("log", ctypes.c_void_p),
        ("log_user", ctypes.c_void_p),
        ("log_level", ctypes.c_int),
        ("cpu_threads", ctypes.c_int),
        ("cache_max_bytes", ctypes.c_size_t),
        ("tune_on_first_use", ctypes.c_int),
        ("pdl", ctypes.c_int),
        ("template_dir", ctypes.c_char_p),
        ("nvrtc_library", ctypes.c_char_p),
        ("pointer_cache", ctypes.c_int),
        ("cublaslt_library", ctypes.c_char_p),
        ("validate_packed", ctypes.c_int),
    ]


class _Shape(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("K", ctypes.c_uint32),
        ("N", ctypes.c_uint32),
        ("T", ctypes.c_uint32),
        ("C", ctypes.c_uint32),
        ("dtype", ctypes.c_int),
        ("gated", ctypes.c_int),
    ]


_LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
_LOG_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}


@_LOG_FN
def _log_sink(_user, level, msg):  # called by the library on the calling thread
    _log.log(_LOG_LEVELS.get(level, logging.WARNING), "%s", msg.decode(errors="replace"))


_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def library_path() -> str:
    """Which libtwellrt is (or will be) loaded: $TWELL_LIBRARY, else the copy inside the package."""
    env = os.environ.get("TWELL_LIBRARY")
    if env:
        return env
    return os.path.join(_HERE, "lib", f"libtwellrt.so.{ABI_VERSION}")


def _declare(lib):
    P, S, I, U32, SZ = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint32, ctypes.c_size_t
    F = ctypes.c_float
    sig = {
        "twell_version": (ctypes.c_char_p, []),
        "twell_version_number": (I, []),
        "twell_status_name": (ctypes.c_char_p, [I]),
        "twell_ctx_options_init_sized": (I, [ctypes.POINTER(_CtxOptions), SZ]),
        "twell_ctx_create": (I, [ctypes.POINTER(_CtxOptions), ctypes.POINTER(P)]),
        "twell_ctx_destroy": (None, [P]),
        "twell_ctx_errmsg": (ctypes.c_char_p, [P]),
        "twell_ctx_device_name": (ctypes.c_char_p, [P]),
        "twell_shape_init_sized": (I, [ctypes.POINTER(_Shape), SZ, U32, U32]),
        "twell_plan_create": (I, [P, ctypes.POINTER(_Shape), ctypes.POINTER(P)]),
        "twell_plan_destroy": (None, [P]),
        "twell_plan_set_path": (I, [P, I]),
        "twell_packed_words": (SZ, [ctypes.POINTER(_Shape), S]),
        "twell_gate_pack": (I, [P, S, P, P, P, P]),
        "twell_ffn_infer": (I, [P, S, P, P, P, P, P, P, P]),
        "twell_train_state_create": (I, [P, ctypes.POINTER(P)]),
        "twell_train_state_destroy": (None, [P]),
        "twell_train_state_bytes": (SZ, [P]),
        "twell_ffn_forward_train": (I, [P, S, P, P, P, P, P, P, P, P]),
        "twell_ffn_backward": (I, [P, P, S, P, P, P, P, P, F, P, P, P, P, P]),
    }
    optional = {  # newer libraries only
        "twell_plan_reserve": (I, [P, S, ctypes.c_double]),
        "twell_ffn_layer": (I, [P, S, P, P, P, P, P, P, P]),
    }
    for name, spec in optional.items():
        if hasattr(lib, name):
            sig[name] = spec
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def ctx_options() -> _CtxOptions:
    """Default context options, initialised by the library for this binding's struct size."""
    o = _CtxOptions()
    if library().twell_ctx_options_init_sized(ctypes.byref(o), ctypes.sizeof(o)) != TWELL_OK:
        raise ImportError(f"twellrt: {_lib_path} refused twell_ctx_options_init_sized")
    return o


def shape(K, N, T=256, C=8, dtype_code=DTYPE_BF16, gated=True) -> _Shape:
    """A twell_shape initialised by the library (struct_size set), with these fields."""
    s = _Shape()
    if library().twell_shape_init_sized(ctypes.byref(s), ctypes.sizeof(s), K, N) != TWELL_OK:
        raise ImportError(f"twellrt: {_lib_path} refused twell_shape_init_sized")
    s.T, s.C, s.dtype, s.gated = T, C, dtype_code, 1 if gated else 0
    return s


def _check_abi(lib):
    # The struct layouts above mirror twellrt.h; a header that reorders them must fail loudly here
    # rather than pass garbage to the library.
    s, o = _Shape(), _CtxOptions()
    if (
        lib.twell_shape_init_sized(ctypes.byref(s), ctypes.sizeof(s), 2048, 5632) != TWELL_OK
        or lib.twell_ctx_options_init_sized(ctypes.byref(o), ctypes.sizeof(o)) != TWELL_OK
        or (s.struct_size, s.K, s.N, s.T, s.C, s.dtype, s.gated)
        != (ctypes.sizeof(s), 2048, 5632, 256, 8, DTYPE_BF16, 1)
        or (o.struct_size, o.backend, o.device, o.log_level, o.cpu_threads) != (ctypes.sizeof(o), 0, 0, 2, 0)
    ):
        raise ImportError(
            f"twellrt: {_lib_path} does not match this binding's view of twellrt.h "
            "(twell_shape / twell_ctx_options layout changed): rebuild the package"
        )


def library():
    """The loaded libtwellrt (ctypes.CDLL), loaded on first use."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            path = library_path()
            if not os.path.exists(path):
                raise ImportError(
                    f"twellrt: shared library not found at {path}: install the package with "
                    "`make python` (or `pip install ./python`), or set TWELL_LIBRARY"
                )
            # The package ships the Lua runtime the library links against (no system Lua needed):
            # loading it first by path lets the dynamic linker resolve libtwellrt's dependency.
            lua = os.path.join(os.path.dirname(path), "liblua5.4.so.0")
            if os.path.exists(lua):
                ctypes.CDLL(lua, mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(path)
            _declare(lib)
            _lib_path = path
            _check_abi(lib)
            _lib = lib
    return _lib


def version() -> str:
    return library().twell_version().decode()


# --------------------------------------------------------------------------------------------
# Contexts: one per device, created on first use, kept for the process.
# --------------------------------------------------------------------------------------------


class Context:
    """A twell_ctx for one device ("cpu" or ("cuda", index)). Calls on it are serialised by a
    lock: the library allows one thread at a time per context, and PyTorch runs backward passes
    on its own threads."""

    def __init__(self, key):
        lib = library()
        o = ctx_options()
        if key == "cpu":
            o.backend = BACKEND_CPU
        else:
            o.backend = BACKEND_CUDA
            o.device = key[1]
        o.log = ctypes.cast(_log_sink, ctypes.c_void_p)
        o.log_level = 1 if _log.isEnabledFor(logging.INFO) else 2
        h = ctypes.c_void_p()
        st = lib.twell_ctx_create(ctypes.byref(o), ctypes.byref(h))
        if st != TWELL_OK:
            raise _error(st, f"twell_ctx_create({key}) failed (the reason was logged to 'twellrt')")
        self.key = key
        self.handle = h
        self.lock = threading.Lock()
        self.name = lib.twell_ctx_device_name(h).decode()

    def check(self, st: int, what: str):
        """Raises the library's error for a failed call (call with self.lock held)."""
        if st != TWELL_OK:
            msg = library().twell_ctx_errmsg(self.handle).decode(errors="replace")
            if msg and not msg.startswith(what):  # the library's messages often name the call
                msg = f"{what}: {msg}"
            raise _error(st, msg or what)


_contexts: dict = {}
_ctx_lock = threading.Lock()


def context(device) -> Context:
    """The context of a torch.device (CPU tensors: the CPU reference backend; CUDA tensors: that
    CUDA device), created on first use."""
    key = "cpu" if device.type == "cpu" else ("cuda", device.index if device.index is not None else 0)
    c = _contexts.get(key)
    if c is None:
        if device.type not in ("cpu", "cuda"):
            raise invalid(f"twellrt: tensors on {device} are not supported (cpu or cuda only)")
        with _ctx_lock:
            c = _contexts.get(key)
            if c is None:
                c = Context(key)
                _contexts[key] = c
    return c


# --------------------------------------------------------------------------------------------
# Plans: one per (context, shape), shared by every layer of that shape. A plan owns device
# workspaces sized to the largest M and density it has run, so a plan per layer multiplies them by
# the depth of the model (tens of GiB at large M for a model of a few dozen layers, more still on
# data denser than intended). The cost of sharing: the inference path AUTO picks
# from the plan's previous call, i.e. the previous layer's density. The sparse lists are sized
# for the densest layer by the library itself: every call accumulates its needs on the device
# and later calls grow the lists from them without waiting (runtime/ops/ffn/tiled/cuda_ffn.c), so a
# denser layer's needs are not lost when the host runs ahead of the GPU.
# Training states (one per forward in flight) carry their own AUTO history.
# --------------------------------------------------------------------------------------------


class Plan:
    def __init__(self, ctx: Context, K, N, T, C, dtype_code, gated):
        lib = library()
        s = shape(K, N, T, C, dtype_code, gated)
        h = ctypes.c_void_p()
        with ctx.lock:
            st = lib.twell_plan_create(ctx.handle, ctypes.byref(s), ctypes.byref(h))
            ctx.check(st, "twell_plan_create")
        self.ctx = ctx
        self.handle = h
        self.shape = s
        self.path = 0
        self.free_states = []  # training states not owned by a live forward
        self.K, self.N, self.T, self.C = K, N, T, C
        self._finalizer = weakref.finalize(self, Plan._destroy, h.value, self.free_states)

    @staticmethod
    def _destroy(h, states):
        lib = library()
        for s in states:
            lib.twell_train_state_destroy(s)
        states.clear()
        lib.twell_plan_destroy(h)

    def set_path(self, path: int):
        """Called with ctx.lock held."""
        if path != self.path:
            self.ctx.check(library().twell_plan_set_path(self.handle, path), "twell_plan_set_path")
            self.path = path

    def packed_words(self, M: int) -> int:
        return library().twell_packed_words(ctypes.byref(self.shape), M)


_plans: dict = {}
_PLAN_CACHE_MAX = 64


def get_plan(ctx: Context, K, N, T, C, dtype_code, gated) -> Plan:
    key = (ctx.key, K, N, T, C, dtype_code, gated)
    p = _plans.get(key)
    if p is None:
        with _ctx_lock:
            p = _plans.get(key)
            if p is None:
                if len(_plans) >= _PLAN_CACHE_MAX:  # a bound for processes that churn shapes
                    for k in list(_plans)[: _PLAN_CACHE_MAX // 4]:
                        del _plans[k]
                p = Plan(ctx, K, N, T, C, dtype_code, gated)
                _plans[key] = p
    return p


# --------------------------------------------------------------------------------------------
# Training states. A forward takes a state from its plan's free list (or creates one) and owns
# it until the storage of the `saved` tensor it returns is freed (ops._SavedBuffer): the
# autograd graph keeps that tensor for the backward, so a state is never reused while a backward
# may still need it. The registry maps the storage's address to the state; an entry leaves it
# when the storage is freed, before its memory can be reused for another buffer.
# --------------------------------------------------------------------------------------------


class _StateRef:
    __slots__ = ("plan", "state", "M", "key")


_states: dict = {}
recomputed_forwards = 0  # backwards that had to recompute their forward (given a copy of `saved`)


def state_acquire(plan: Plan) -> _StateRef:
    """Called with plan.ctx.lock held; the state is the caller's until state_register."""
    lib = library()
    if plan.free_states:
        s = plan.free_states.pop()
    else:
        h = ctypes.c_void_p()
        plan.ctx.check(lib.twell_train_state_create(plan.handle, ctypes.byref(h)), "twell_train_state_create")
        s = h.value
    r = _StateRef()
    r.plan, r.state, r.M, r.key = plan, s, 0, None
    return r


def state_register(r: _StateRef, key: int) -> None:
    r.key = key
    _states[key] = r


def state_lookup(key: int):
    """The state registered under key, or None."""
    return _states.get(key)


def state_release(r: _StateRef) -> None:
    # Runs from a finalizer, at any point of any thread (also inside a `with ctx.lock` block of
    # this one), so it takes no lock: dict.pop and list.append are atomic under the GIL, and
    # state_acquire pops the free list the same way.
    if r.key is not None:
        _states.pop(r.key, None)
        r.key = None
    r.plan.free_states.append(r.state)


def live_states() -> int:
    """Training states held by forwards whose `saved` tensors are still alive (for tests and
    logging)."""
    return len(_states)
