"""The ops against dense fp32/fp64 PyTorch, and CUDA against the library's CPU reference."""

import pytest
import torch

import twellrt
from _data import gate_ref, infer_ref, layer, rel, train_ref, unpack

DT = [torch.bfloat16, torch.float16]
ULP = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}  # relative spacing of 16-bit values


def _fp32_bound(x, w):
    """How far fp32 sums of x·wᵀ in another order may move: K·2⁻²⁴·Σ|x_k w_k| (the tensor cores
    of the CUDA gate-pack sum in another order than the CPU reference)."""
    x, w = x.cpu().double(), w.cpu().double()
    return x.shape[1] * 2.0**-24 * (x.abs() @ w.abs().T)


def _close_support(dense, ref, bound, tol):
    """Stored values agree with ref to one 16-bit rounding plus the fp32 order bound; a position
    stored by one side only must have |value| within that bound (a pre-activation within fp32
    rounding of 0)."""
    both = (dense > 0) & (ref > 0)
    assert both.sum() > 0
    excess = ((dense - ref).abs() - tol * ref.abs() - bound)[both]
    assert excess.max().item() <= 0, f"gate value error beyond bound: {excess.max().item():.3e}"
    only = (dense > 0) ^ (ref > 0)
    assert only.float().mean() < 1e-3, f"{int(only.sum())} support mismatches"
    if only.any():
        assert ((dense + ref)[only] <= 2 * bound[only] + tol * 2**-14).all()


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("M,K,N,T,C", [(37, 64, 256, 64, 8), (130, 128, 512, 256, 4), (1, 256, 256, 128, 2)])
def test_gate_pack_matches_dense(device, dtype, M, K, N, T, C):
    d = layer(M, K, N, dtype, device, nnz=N * 0.03, heavy=[0] if M > 1 else [], seed=M)
    packed = twellrt.gate_pack(d["x"], d["wg"], T, C)
    assert packed.dtype == torch.int32 and packed.shape == (M, N // C) and packed.device.type == device.type
    counts, slots, dense = unpack(packed, N, T, C, dtype)
    ref = gate_ref(d["x"].cpu(), d["wg"].cpu(), dtype)
    bound = _fp32_bound(d["x"], d["wg"])
    # counts are exact per row-tile, overflow or not
    ref_counts = (ref > 0).view(M, N // T, T).sum(-1)
    assert (counts - ref_counts).abs().sum() <= max(2, int(1e-3 * ref_counts.sum()))
    assert (counts > T // C - 1).any() or M == 1, "the heavy row must overflow its row-tiles"
    # stored entries: ascending columns within the row-tile, unused slots zero
    W = T // C
    cols = slots & 0xFFFF
    used = torch.arange(W - 1).view(1, 1, -1) < counts.clamp(max=W - 1).unsqueeze(-1)
    assert (slots[~used] == 0).all()
    d_cols = cols[:, :, 1:] - cols[:, :, :-1]
    assert (d_cols[used[:, :, 1:]] > 0).all()
    # stored values = the reference where the row-tile did not overflow; overflow keeps the first W-1
    full = (counts <= W - 1).repeat_interleave(T, dim=1)
    _close_support(dense * full, ref * full, bound, ULP[dtype])


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("path", ["auto", "sparse"])
def test_ffn_infer_matches_dense(device, dtype, gated, path):
    M, K, N, T, C = 67, 128, 512, 256, 8
    d = layer(M, K, N, dtype, device, nnz=12, heavy=[1, 40], seed=3, gated=gated)
    w_pack = d["wg"] if gated else d["wu"]
    packed = twellrt.gate_pack(d["x"], w_pack, T, C, gated)
    y = twellrt.ffn_infer(d["x"], packed, d["wg"], d["wu"], d["wd"], T, C, path)
    assert y.dtype == dtype and y.shape == (M, K) and y.device.type == device.type
    ref = infer_ref(*(None if d[k] is None else d[k].cpu() for k in ("x", "wg", "wu", "wd")), dtype)
    assert rel(y, ref) < 2 * ULP[dtype]
    assert torch.isfinite(y.float()).all()


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("path", ["auto", "sparse", "dense"])
def test_ffn_layer_is_gate_pack_then_ffn_infer(device, dtype, gated, path):
    M, K, N, T, C = 67, 128, 512, 256, 8
    d = layer(M, K, N, dtype, device, nnz=12, heavy=[1, 40], seed=5, gated=gated)
    w_pack = d["wg"] if gated else d["wu"]
    y = twellrt.ffn_layer(d["x"], d["wg"], d["wu"], d["wd"], T, C, path)
    assert y.dtype == dtype and y.shape == (M, K) and y.device.type == device.type
    two = twellrt.ffn_infer(d["x"], twellrt.gate_pack(d["x"], w_pack, T, C, gated), d["wg"], d["wu"], d["wd"], T, C, path)
    if device.type == "cpu":  # the CPU backend runs exactly the two calls
        assert torch.equal(y, two)
    ref = infer_ref(*(None if d[k] is None else d[k].cpu() for k in ("x", "wg", "wu", "wd")), dtype)
    assert rel(y, ref) < 2 * ULP[dtype]
    with pytest.raises(twellrt.TwellError, match="ffn_layer: wu"):
        twellrt.ffn_layer(d["x"], d["wg"], d["wu"][:, :64], d["wd"], T, C, path)


@pytest.mark.parametrize("dtype", DT)
def test_train_matches_dense_autograd(device, dtype):
    M, K, N, T, C = 45, 64, 256, 64, 8
    d = layer(M, K, N, dtype, device, nnz=10, heavy=[2], seed=5)
    g = torch.Generator().manual_seed(9)
    dy = torch.randn(M, K, generator=g).to(dtype).to(device)
    lam = 0.05
    x, wg, wu, wd = (d[k].clone().requires_grad_() for k in ("x", "wg", "wu", "wd"))
    y, stats, handle = twellrt.ffn_train(x, wg, wu, wd, lam, T, C)
    (y.float() * dy.float()).sum().backward()
    ref = train_ref(x, wg, wu, wd, dy, lam, dtype)
    tol = 2 * ULP[dtype]
    assert rel(y, ref["y"]) < tol
    assert rel(x.grad, ref["dx"]) < tol
    for w, k in ((wg, "dwg"), (wu, "dwu"), (wd, "dwd")):
        assert w.grad.dtype == dtype
        assert rel(w.grad, ref[k]) < tol, k
    L0, L1 = stats.cpu().tolist()
    assert abs(L0 - ref["L0"]) <= 0.01 * ref["L0"]
    assert abs(L1 - ref["L1"]) <= 1e-2 * ref["L1"]


def test_train_backward_op_fp32_grads(device):
    dtype = torch.bfloat16
    M, K, N = 33, 64, 256
    d = layer(M, K, N, dtype, device, nnz=9, seed=11)
    dy = torch.randn(M, K, generator=torch.Generator().manual_seed(1)).to(dtype).to(device)
    y, stats, h = twellrt.ffn_train(d["x"], d["wg"], d["wu"], d["wd"], 0.0, 64, 8)
    dx, dwg, dwu, dwd = twellrt.ffn_train_backward(h, d["x"], d["wg"], d["wu"], d["wd"], dy, 0.0, 64, 8)
    assert dx.dtype == dtype and {t.dtype for t in (dwg, dwu, dwd)} == {torch.float32}
    ref = train_ref(d["x"], d["wg"], d["wu"], d["wd"], dy, 0.0, dtype)
    for got, k in ((dwg, "dwg"), (dwu, "dwu"), (dwd, "dwd")):
        assert rel(got, ref[k]) < 2e-3, k
    # deterministic: the same state gives bitwise the same gradients again
    again = twellrt.ffn_train_backward(h, d["x"], d["wg"], d["wu"], d["wd"], dy, 0.0, 64, 8)
    for a, b in zip((dx, dwg, dwu, dwd), again):
        assert torch.equal(a, b)


def test_states_live_with_the_graph():
    d = layer(20, 64, 256, seed=2)
    x, wg, wu, wd = (d[k].clone().requires_grad_() for k in ("x", "wg", "wu", "wd"))
    base = twellrt.live_states()
    y, _stats, handle = twellrt.ffn_train(x, wg, wu, wd, 0.01, 64, 8)
    del handle, _stats  # the autograd graph still holds the handle
    assert twellrt.live_states() == base + 1
    y.float().sum().backward(retain_graph=True)
    g1 = x.grad.clone()
    x.grad = None
    y.float().sum().backward()  # a second backward over the same saved state
    assert torch.equal(g1, x.grad)
    del y
    import gc

    gc.collect()
    assert twellrt.live_states() == base


def test_saved_is_a_function_of_the_inputs(device):
    # issue 26: the handle was a per-call id, so torch.compile's checks saw another output on
    # every call; `saved` now holds (M, K, N, T, C) and the state belongs to its storage
    d = layer(20, 64, 256, device=device, seed=4)
    args = (d["x"], d["wg"], d["wu"], d["wd"], 0.01, 64, 8)
    y1, s1, saved1 = twellrt.ffn_train(*args)
    y2, s2, saved2 = twellrt.ffn_train(*args)
    assert torch.equal(y1, y2) and torch.equal(s1, s2) and torch.equal(saved1, saved2)
    assert saved1.tolist() == [20, 64, 256, 64, 8] and saved1.device.type == "cpu"
    assert saved1.data_ptr() != saved2.data_ptr()


def test_backward_from_a_copy_of_saved_recomputes(device):
    from twellrt import _lib

    d = layer(30, 64, 256, device=device, nnz=9, heavy=[1], seed=6)
    dy = torch.randn(30, 64, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16).to(device)
    w = (d["wg"], d["wu"], d["wd"])
    _y, _st, saved = twellrt.ffn_train(d["x"], *w, 0.02, 64, 8)
    n0 = _lib.recomputed_forwards
    fast = twellrt.ffn_train_backward(saved, d["x"], *w, dy, 0.02, 64, 8)
    assert _lib.recomputed_forwards == n0
    copied = twellrt.ffn_train_backward(saved.clone(), d["x"], *w, dy, 0.02, 64, 8)
    assert _lib.recomputed_forwards == n0 + 1
    for a, b in zip(fast, copied):  # the same gradients: the backward is a function of its inputs
        assert torch.equal(a, b)
    # autograd hands the forward's own tensor to the backward: no recompute
    x, wg, wu, wd = (t.clone().requires_grad_() for t in (d["x"], *w))
    y, _, _ = twellrt.ffn_train(x, wg, wu, wd, 0.02, 64, 8)
    (y.float() * dy.float()).sum().backward()
    assert _lib.recomputed_forwards == n0 + 1
    assert torch.equal(x.grad, fast[0]) and torch.equal(wd.grad, fast[3].to(wd.dtype))


def test_empty_batch(device):
    d = layer(1, 64, 256, device=device)
    x = d["x"][:0]
    p = twellrt.gate_pack(x, d["wg"], 64, 8)
    assert p.shape == (0, 32)
    assert twellrt.ffn_infer(x, p, d["wg"], d["wu"], d["wd"], 64, 8).shape == (0, 64)
    assert twellrt.ffn_layer(x, d["wg"], d["wu"], d["wd"], 64, 8).shape == (0, 64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("M", [1, 300, 2048])
def test_cuda_matches_cpu_reference(dtype, M):
    K, N, T, C = 256, 1024, 256, 8
    d = layer(M, K, N, dtype, "cpu", nnz=20, heavy=[0] if M > 1 else [], seed=M)
    g = {k: v.cuda() for k, v in d.items()}
    pc = twellrt.gate_pack(d["x"], d["wg"], T, C)
    pg = twellrt.gate_pack(g["x"], g["wg"], T, C)
    cc, _, dc = unpack(pc, N, T, C, dtype)
    cg, _, dg = unpack(pg, N, T, C, dtype)
    assert (cc - cg).abs().sum() <= max(2, int(1e-3 * cc.sum()))
    full = ((cc <= T // C - 1) & (cg <= T // C - 1)).repeat_interleave(T, dim=1)
    _close_support(dg * full, dc * full, _fp32_bound(d["x"], d["wg"]), ULP[dtype])
    yc = twellrt.ffn_infer(d["x"], pc, d["wg"], d["wu"], d["wd"], T, C)
    for path in ("sparse", "auto", "dense"):
        yg = twellrt.ffn_infer(g["x"], pg, g["wg"], g["wu"], g["wd"], T, C, path)
        assert rel(yg, yc) < 5e-3 if dtype == torch.bfloat16 else 1e-3, path
    # training: CUDA vs the CPU backend, both paths
    dy = torch.randn(M, K, generator=torch.Generator().manual_seed(4)).to(dtype)
    yc, sc, hc = twellrt.ffn_train(d["x"], d["wg"], d["wu"], d["wd"], 0.01, T, C)
    gc_ = twellrt.ffn_train_backward(hc, d["x"], d["wg"], d["wu"], d["wd"], dy, 0.01, T, C)
    for path in ("sparse", "dense"):
        yg, sg, hg = twellrt.ffn_train(g["x"], g["wg"], g["wu"], g["wd"], 0.01, T, C, path)
        gg = twellrt.ffn_train_backward(hg, g["x"], g["wg"], g["wu"], g["wd"], dy.cuda(), 0.01, T, C)
        tol = 2e-2 if path == "dense" else 5e-3
        assert rel(yg, yc) < tol, path
        for a, b, n in zip(gg, gc_, ("dx", "dwg", "dwu", "dwd")):
            assert rel(a, b) < tol, (path, n)
        assert abs(sg[0].item() - sc[0].item()) <= 1e-3 * sc[0].item() + 1e-6


@pytest.mark.gpu
def test_cuda_uses_current_stream():
    d = layer(512, 256, 1024, device="cuda", nnz=20, seed=8)
    ref = twellrt.ffn_infer(d["x"], twellrt.gate_pack(d["x"], d["wg"]), d["wg"], d["wu"], d["wd"])
    s = torch.cuda.Stream()
    x = torch.zeros_like(d["x"])
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)  # x is written only after a long delay on s
        x.copy_(d["x"])
        y = twellrt.ffn_infer(x, twellrt.gate_pack(x, d["wg"]), d["wg"], d["wu"], d["wd"])
    s.synchronize()
    assert torch.equal(y, ref)
