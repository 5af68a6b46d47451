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


def test_backward_with_foreign_handle(d):
    y, st, h = twellrt.ffn_train(d["x"], d["wg"], d["wu"], d["wd"], 0.0, 64, 8)
    dy = torch.ones_like(d["x"])
    _raises(lambda: twellrt.ffn_train_backward(h, d["x"][:8], d["wg"], d["wu"], d["wd"], dy[:8], 0.0, 64, 8), "match")
    _raises(lambda: twellrt.ffn_train_backward(torch.tensor([123456789]), d["x"], d["wg"], d["wu"], d["wd"], dy, 0.0, 64, 8), "gone")
