"""twellrt for PyTorch: sparse (TwELL) feed-forward layers from libtwellrt.

    import twellrt
    mlp = twellrt.TwELLGatedMLP(2048, 5632, l1_coef=2e-5, device="cuda")
    twellrt.swap_mlps(hf_llama_model, l1_coef=2e-5)     # ReLU Llama MLPs, weights shared
    model = twellrt.load_sparse_lm("path/or/repo-id")   # a SparseLM checkpoint, twellrt MLPs
    twellrt.L1Schedule, twellrt.ActivityTracker, twellrt.reinit_dead_neurons   # training recipe

Ops (torch.ops.twellrt.*): gate_pack, ffn_infer, ffn_layer (the two in one call), ffn_train (autograd), ffn_train_backward.
Errors raise twellrt.TwellError (status name + the library's message)."""

from ._lib import TwellError, TwellInvalidArgument, library_path, version, live_states
from .ops import gate_pack, ffn_infer, ffn_layer, ffn_train, ffn_train_backward, packed_cols, reserve
from .modules import TwELLGatedMLP, TwELLMLP, swap_mlps
from .sparse_lm import load_sparse_lm
from .recipe import L1Schedule, ActivityTracker, reinit_neurons, reinit_dead_neurons
from .parallel import TensorParallelGatedMLP, TensorParallelMLP, contiguous_layout, tensor_parallel_mlps

__all__ = [
    "TwellError",
    "TwellInvalidArgument",
    "library_path",
    "version",
    "live_states",
    "gate_pack",
    "ffn_infer",
    "ffn_layer",
    "ffn_train",
    "ffn_train_backward",
    "packed_cols",
    "reserve",
    "TwELLGatedMLP",
    "TwELLMLP",
    "swap_mlps",
    "load_sparse_lm",
    "L1Schedule",
    "ActivityTracker",
    "reinit_neurons",
    "reinit_dead_neurons",
    "TensorParallelGatedMLP",
    "TensorParallelMLP",
    "contiguous_layout",
    "tensor_parallel_mlps",
    "balance",
]


def __getattr__(name):
    # twellrt.balance on first use (imported eagerly, `python -m twellrt.balance` would warn)
    if name == "balance":
        import importlib

        return importlib.import_module(".balance", __name__)
    raise AttributeError(f"module 'twellrt' has no attribute {name!r}")
