"""NaN and Inf in x propagate as in the dense PyTorch module (twellrt.h, "Non-finite values"):
the rows of the TwELL module's output that are NaN or Inf are exactly the dense module's, in
inference and training (y and x's gradient), on the CPU backend and (gpu marker) on CUDA."""

import pytest
import torch

import twellrt
from test_modules import DenseMLP, _inputs, _sparse_weights


def _nonfinite_rows(t):
    return (~torch.isfinite(t.float())).reshape(-1, t.shape[-1]).any(dim=1)


@pytest.mark.parametrize("train", [False, True])
def test_nan_inf_rows_match_dense(device, train):
    K, N = 64, 256
    dense = DenseMLP(K, N, device)
    _sparse_weights(dense, K, N, device)
    tw = twellrt.TwELLGatedMLP(K, N, l1_coef=0.01, T=64, C=8, gate_proj=dense.gate_proj,
                               up_proj=dense.up_proj, down_proj=dense.down_proj)
    x = _inputs(2, 9, K, device)
    x[0, 1, 3] = float("nan")
    x[0, 4, 5] = float("inf")
    x[1, 2, 7] = float("-inf")
    if not train:
        with torch.no_grad():
            y, yd = tw(x), dense(x)
        assert _nonfinite_rows(yd).any()
        assert torch.equal(_nonfinite_rows(y), _nonfinite_rows(yd))
        assert torch.equal(torch.isnan(y[0, 1]), torch.isnan(yd[0, 1]))
        return
    xa = x.clone().requires_grad_()
    ya = tw(xa)
    ya.float().sum().backward()
    xb = x.clone().requires_grad_()
    yb = dense(xb)
    yb.float().sum().backward()
    assert torch.equal(_nonfinite_rows(ya), _nonfinite_rows(yb))
    assert torch.equal(_nonfinite_rows(xa.grad), _nonfinite_rows(xb.grad))
    assert torch.isnan(tw.l1).item()  # L1 = Σ|T|/M carries the NaN row
