"""CUDA-graph capture of a module using the ops (serving at decode sizes replays graphs). The
library makes its ops capturable in issue 13; until then a capture that the library refuses is
an expected failure carrying the library's reason, anything else fails."""

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
