"""The binding's view of the sized structs (twellrt.h, "ABI stability"): the ctypes classes list
the header's fields in order, the library sets struct_size to the binding's size, and an older
binding (a struct with fewer fields) still creates contexts and plans, its missing fields
defaulted."""

import ctypes
import os
import re

from twellrt import _lib

HEADER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "runtime", "twellrt.h")


def _header():
    with open(HEADER) as f:
        return f.read()


def _fields(struct):
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), _header(), re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)  # comments out; then one declaration per ';'
    return [decl.split()[-1].lstrip("*") for decl in body.split(";") if decl.strip()]


def test_abi_fields_match_header():
    assert [f for f, _ in _lib._CtxOptions._fields_] == _fields("twell_ctx_options")
    assert [f for f, _ in _lib._Shape._fields_] == _fields("twell_shape")
    assert re.search(r"^#define TWELL_ABI_VERSION %d$" % _lib.ABI_VERSION, _header(), re.M)


def test_abi_init_sets_struct_size():
    o, s = _lib.ctx_options(), _lib.shape(64, 256)
    assert o.struct_size == ctypes.sizeof(_lib._CtxOptions)
    assert s.struct_size == ctypes.sizeof(_lib._Shape)
    assert (s.K, s.N, s.T, s.C, s.gated) == (64, 256, 256, 8, 1)


class _OldOptions(ctypes.Structure):  # a binding written before cache_max_bytes existed
    _fields_ = _lib._CtxOptions._fields_[:8]


class _OldShape(ctypes.Structure):  # ... and before dtype and gated
    _fields_ = _lib._Shape._fields_[:5]


def test_abi_older_binding():
    lib = _lib.library()
    o = _OldOptions()
    assert lib.twell_ctx_options_init_sized(ctypes.cast(ctypes.byref(o), ctypes.POINTER(_lib._CtxOptions)),
                                            ctypes.sizeof(o)) == 0
    assert o.struct_size == ctypes.sizeof(o) and o.log_level == 2
    o.backend, o.cpu_threads = _lib.BACKEND_CPU, 1
    ctx = ctypes.c_void_p()
    assert lib.twell_ctx_create(ctypes.cast(ctypes.byref(o), ctypes.POINTER(_lib._CtxOptions)), ctypes.byref(ctx)) == 0
    try:
        s = _OldShape()
        sp = ctypes.cast(ctypes.byref(s), ctypes.POINTER(_lib._Shape))
        assert lib.twell_shape_init_sized(sp, ctypes.sizeof(s), 64, 512) == 0
        s.T, s.C = 128, 4
        plan = ctypes.c_void_p()
        assert lib.twell_plan_create(ctx, sp, ctypes.byref(plan)) == 0, lib.twell_ctx_errmsg(ctx)
        assert lib.twell_packed_words(sp, 3) == 3 * 512 // 4
        lib.twell_plan_destroy(plan)
    finally:
        lib.twell_ctx_destroy(ctx)


def test_abi_uninitialised_shape_refused():
    lib = _lib.library()
    s = _lib._Shape()  # struct_size 0: never initialised
    s.K, s.N, s.T, s.C, s.gated = 64, 256, 256, 8, 1
    assert lib.twell_packed_words(ctypes.byref(s), 2) == 0
