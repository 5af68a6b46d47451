"""Bad input gives a clear exception (status name + message) and writes nothing."""

import pytest
import torch

import twellrt
from _data import layer


def _snap(d):
    return {k: None if v is None else v.clone() for k, v in d.items()}


def _same(d, snap):
    for k, v in d.items():
        if v is not None:
            assert torch.equal(v, snap[k]), f"{k} was modified"


def _raises(fn, *words):
    with pytest.raises(twellrt.TwellError) as e:
        fn()
    msg = str(e.value)
    assert e.value.status == "TWELL_ERR_INVALID_ARG" and msg.startswith("TWELL_ERR_INVALID_ARG: ")
    assert isinstance(e.value, ValueError)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    return msg


@pytest.fixture
def d(device):
    return layer(16, 64, 256, torch.bfloat16, device, nnz=8)


def test_wrong_dtype(d):
    s = _snap(d)
    _raises(lambda: twellrt.gate_pack(d["x"].float(), d["wg"].float(), 64, 8), "dtype", "float32")
    _raises(lambda: twellrt.gate_pack(d["x"], d["wg"].half(), 64, 8), "w", "dtype")
    p = twellrt.gate_pack(d["x"], d["wg"], 64, 8)
    _raises(lambda: twellrt.ffn_infer(d["x"], p.float(), d["wg"], d["wu"], d["wd"], 64, 8), "packed", "dtype")
    _raises(lambda: twellrt.ffn_train(d["x"], d["wg"], d["wu"].half(), d["wd"], 0.0, 64, 8), "wu")
    _same(d, s)


def test_non_contiguous(d):
    s = _snap(d)
    xt = d["x"].t().contiguous().t()  # same values, column-major
    _raises(lambda: twellrt.gate_pack(xt, d["wg"], 64, 8), "x", "contiguous")
    wt = torch.empty(64, 256, dtype=d["wg"].dtype, device=d["wg"].device).t()
    wt.copy_(d["wg"])
    _raises(lambda: twellrt.gate_pack(d["x"], wt, 64, 8), "w", "contiguous")
    _same(d, s)


def test_wrong_device(d):
    s = _snap(d)
    other = "meta" if d["x"].device.type == "cpu" else "cpu"
    _raises(lambda: twellrt.gate_pack(d["x"], d["wg"].to(other), 64, 8), "w", "is on")
    p = twellrt.gate_pack(d["x"], d["wg"], 64, 8)
    _raises(lambda: twellrt.ffn_infer(d["x"], p, d["wg"], d["wu"], d["wd"].to(other), 64, 8), "wd", "is on")
    _same(d, s)


def test_shape_mismatch(d):
    s = _snap(d)
    _raises(lambda: twellrt.gate_pack(d["x"][:, :48].contiguous(), d["wg"], 64, 8), "w", "shape")
    _raises(lambda: twellrt.gate_pack(d["x"].view(-1), d["wg"], 64, 8), "x", "2-D")
    p = twellrt.gate_pack(d["x"], d["wg"], 64, 8)
    _raises(lambda: twellrt.ffn_infer(d["x"][:8], p, d["wg"], d["wu"], d["wd"], 64, 8), "packed", "shape")
    _raises(lambda: twellrt.ffn_infer(d["x"], p, d["wg"], d["wu"][:128], d["wd"], 64, 8), "wu", "shape")
    _raises(lambda: twellrt.ffn_infer(d["x"], p, d["wg"], d["wu"], d["wd"], 64, 4), "packed")
    _same(d, s)


def test_library_rejects_shape_with_its_message(d):
    # N = 200 is not a multiple of T = 64: the library's twell_plan_create names the field
    x = d["x"]
    w = torch.randn(200, 64, dtype=x.dtype, device=x.device)
    msg = _raises(lambda: twellrt.gate_pack(x, w, 64, 8), "twell_plan_create", "N")
    assert "T" in msg
    # K = 40 is not a multiple of 16
    x40 = torch.randn(4, 40, dtype=x.dtype, device=x.device)
    _raises(lambda: twellrt.gate_pack(x40, torch.randn(256, 40, dtype=x.dtype, device=x.device), 64, 8), "K")


def test_bad_scalars(d):
    s = _snap(d)
    _raises(lambda: twellrt.ffn_train(d["x"], d["wg"], d["wu"], d["wd"], -1.0, 64, 8), "lam")
    p = twellrt.gate_pack(d["x"], d["wg"], 64, 8)
    _raises(lambda: twellrt.ffn_infer(d["x"], p, d["wg"], d["wu"], d["wd"], 64, 8, "fast"), "path")
    _same(d, s)


def test_backward_with_foreign_saved(d):
    y, st, saved = twellrt.ffn_train(d["x"], d["wg"], d["wu"], d["wd"], 0.0, 64, 8)
    dy = torch.ones_like(d["x"])
    args = (d["wg"], d["wu"], d["wd"])
    _raises(lambda: twellrt.ffn_train_backward(saved, d["x"][:8], *args, dy[:8], 0.0, 64, 8), "match")
    _raises(lambda: twellrt.ffn_train_backward(torch.tensor([123456789]), d["x"], *args, dy, 0.0, 64, 8), "saved", "shape")
    bad = saved.clone()
    bad[0] += 1
    _raises(lambda: twellrt.ffn_train_backward(bad, d["x"], *args, dy, 0.0, 64, 8), "match")
    _raises(lambda: twellrt.ffn_train_backward(saved, d["x"].half(), *(w.half() for w in args), dy.half(), 0.0, 64, 8), "dtype")


# ---- every tensor argument of every op: None, a non-tensor, wrong dtype, device, shape, layout ----


def _good_args(d):
    x, wg, wu, wd = d["x"], d["wg"], d["wu"], d["wd"]
    p = twellrt.gate_pack(x, wg, 64, 8)
    _y, _st, saved = twellrt.ffn_train(x, wg, wu, wd, 0.0, 64, 8)
    dy = torch.ones_like(x)
    return {
        "gate_pack": (twellrt.gate_pack, dict(x=x, w=wg, T=64, C=8)),
        "ffn_infer": (twellrt.ffn_infer, dict(x=x, packed=p, wg=wg, wu=wu, wd=wd, T=64, C=8)),
        "ffn_train": (twellrt.ffn_train, dict(x=x, wg=wg, wu=wu, wd=wd, lam=0.0, T=64, C=8)),
        "ffn_train_backward": (twellrt.ffn_train_backward,
                               dict(saved=saved, x=x, wg=wg, wu=wu, wd=wd, dy=dy, lam=0.0, T=64, C=8)),
    }


TENSOR_ARGS = [
    ("gate_pack", "x"), ("gate_pack", "w"),
    ("ffn_infer", "x"), ("ffn_infer", "packed"), ("ffn_infer", "wg"), ("ffn_infer", "wu"), ("ffn_infer", "wd"),
    ("ffn_train", "x"), ("ffn_train", "wg"), ("ffn_train", "wu"), ("ffn_train", "wd"),
    ("ffn_train_backward", "saved"), ("ffn_train_backward", "x"), ("ffn_train_backward", "wg"),
    ("ffn_train_backward", "wu"), ("ffn_train_backward", "wd"), ("ffn_train_backward", "dy"),
]


def _wrong_dtype(t):
    return t.float() if t.is_floating_point() else t.to(torch.int16)


def _wrong_device(t):
    return t.to("meta" if t.device.type == "cpu" else "cpu")


def _wrong_shape(t):
    return t[..., :-1].contiguous()  # one column (K, N/C) or value fewer; M itself is free


def _non_contiguous(t):
    if t.dim() == 2:
        return t.t().contiguous().t()  # same shape and values, column-major
    return torch.empty(2 * t.numel(), dtype=t.dtype, device=t.device)[::2].copy_(t)


BAD_TENSORS = {
    "None": (lambda t: None, ("must be a tensor", "None")),
    "list": (lambda t: [1, 2], ("must be a tensor",)),
    "dtype": (_wrong_dtype, ("dtype",)),
    "device": (_wrong_device, ("is on",)),
    "shape": (_wrong_shape, ("shape",)),
    "layout": (_non_contiguous, ("contiguous",)),
}


@pytest.mark.parametrize("bad", list(BAD_TENSORS))
@pytest.mark.parametrize("op,arg", TENSOR_ARGS, ids=[f"{o}.{a}" for o, a in TENSOR_ARGS])
def test_every_bad_tensor_argument(d, op, arg, bad):
    fn, kw = _good_args(d)[op]
    make, words = BAD_TENSORS[bad]
    if bad == "None" and (op, arg) == ("ffn_infer", "wg"):
        pytest.skip("wg=None selects the non-gated layer: valid")
    s = _snap(d)
    kw = dict(kw)
    kw[arg] = make(kw[arg])
    msg = _raises(lambda: fn(**kw), f"twellrt.{op}", *words)
    assert arg in msg or bad == "shape", msg  # a shape mismatch may name the other tensor
    _same(d, s)


# ---- scalar arguments: the wrong Python type, or a value ctypes would wrap ----

BAD_SCALARS = [
    ("T", "64"), ("T", 64.0), ("T", True), ("T", -64), ("T", 0), ("T", 2**32 + 64), ("T", None),
    ("C", "8"), ("C", -8), ("C", 2**40),
]


@pytest.mark.parametrize("name,value", BAD_SCALARS, ids=[f"{n}={v!r}" for n, v in BAD_SCALARS])
@pytest.mark.parametrize("op", ["gate_pack", "ffn_infer", "ffn_train", "ffn_train_backward"])
def test_every_bad_int(d, op, name, value):
    fn, kw = _good_args(d)[op]
    _raises(lambda: fn(**dict(kw, **{name: value})), f"twellrt.{op}", name)


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), True, "0.1", None])
@pytest.mark.parametrize("op", ["ffn_train", "ffn_train_backward"])
def test_every_bad_lam(d, op, value):
    fn, kw = _good_args(d)[op]
    _raises(lambda: fn(**dict(kw, lam=value)), "lam")


@pytest.mark.parametrize("value", ["fast", None, 1, "AUTO"])
@pytest.mark.parametrize("op", ["ffn_infer", "ffn_train", "ffn_train_backward"])
def test_every_bad_path(d, op, value):
    fn, kw = _good_args(d)[op]
    _raises(lambda: fn(**dict(kw, path=value)), "path")


@pytest.mark.parametrize("value", [1, None, "yes"])
def test_bad_gated(d, value):
    _raises(lambda: twellrt.gate_pack(d["x"], d["wg"], 64, 8, value), "gated")


def test_lam_int_is_a_float(d):
    a = twellrt.ffn_train(d["x"], d["wg"], d["wu"], d["wd"], 0, 64, 8)
    b = twellrt.ffn_train(d["x"], d["wg"], d["wu"], d["wd"], 0.0, 64, 8)
    assert torch.equal(a[0], b[0])


def test_packed_cols_and_reserve_arguments():
    assert twellrt.packed_cols(64, 256, 64, 8) == 32
    _raises(lambda: twellrt.packed_cols(-64, 256, 64, 8), "K")
    _raises(lambda: twellrt.packed_cols(64, 2**32 + 256, 64, 8), "N")
    _raises(lambda: twellrt.packed_cols(64, 256, "64", 8), "T")
    _raises(lambda: twellrt.reserve(None, 64, 256, 10, 1.0, 64, 8), "device")
    _raises(lambda: twellrt.reserve("xla", 64, 256, 10, 1.0, 64, 8), "xla")
    _raises(lambda: twellrt.reserve("cpu", 64, 256, -1, 1.0, 64, 8), "max_M")
    _raises(lambda: twellrt.reserve("cpu", 64, 256, 10, "1", 64, 8), "nnz_per_row")
    _raises(lambda: twellrt.reserve("cpu", 64, 256, 10, float("nan"), 64, 8), "nnz_per_row")
    _raises(lambda: twellrt.reserve("cpu", 64, 256, 10, 1.0, 64, 8, torch.float32), "dtype")
    _raises(lambda: twellrt.reserve("cpu", 64, 256, 10, 1.0, 64, 8, torch.bfloat16, 1), "gated")
