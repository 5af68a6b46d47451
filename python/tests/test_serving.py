"""CUDA-graph capture of a module using the ops (serving at decode sizes replays graphs), after
twell_plan_reserve (the module's reserve). A capture that the library itself refuses (a library
without capture support) is an expected failure carrying the library's reason; anything else
fails."""

import pytest
import torch

import twellrt
from test_modules import Block, _inputs, _sparse_weights


@pytest.mark.gpu
def test_cuda_graph_capture():
    # One capture per process: a capture the library breaks leaves torch's CUDA generator in
    # capture mode, so nothing runs after this test in the same session (last file by name).
    path = "sparse"
    K, N = 256, 1024
    blk = Block(K, N, "cuda")
    blk.mlp.T, blk.mlp.path = 256, path
    _sparse_weights(blk.mlp, K, N, "cuda")
    x = _inputs(4, 8, K, "cuda")
    blk.mlp.reserve(x.shape[0] * x.shape[1], 20.0)
    static_x = x.clone()
    lib_error = []
    with torch.no_grad():
        for _ in range(3):  # warm up: plans, kernels and workspaces exist before capture
            blk(static_x)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                try:
                    static_y = blk(static_x)
                except twellrt.TwellError as e:
                    lib_error.append(e)
                    raise
        except Exception:
            if lib_error:
                torch.cuda.synchronize()
                pytest.xfail(f"twellrt ops are not capturable yet (issue 13): {lib_error[0]}")
            raise
        static_x.copy_(x * 0.5)
        static_x[..., 0] = 1.0
        g.replay()
        want = blk(static_x)
        torch.cuda.synchronize()
    assert torch.equal(static_y, want)


def test_reserve_checks_arguments(device):
    m = twellrt.TwELLGatedMLP(64, 256, T=64, C=8, device=device)
    m.reserve(100, 8.0)  # CPU backend: checks only
    with pytest.raises(twellrt.TwellError) as e:
        m.reserve(100, 1000.0)  # more active values per row than N
    assert e.value.status == "TWELL_ERR_INVALID_ARG" and "twell_plan_reserve" in str(e.value)
