"""twellrt for PyTorch: sparse (TwELL) feed-forward layers from libtwellrt.

    import twellrt
    mlp = twellrt.TwELLGatedMLP(2048, 5632, l1_coef=2e-5, device="cuda")
    twellrt.swap_mlps(hf_llama_model, l1_coef=2e-5)     # ReLU Llama MLPs, weights shared

Ops (torch.ops.twellrt.*): gate_pack, ffn_infer, ffn_train (autograd), ffn_train_backward.
Errors raise twellrt.TwellError (status name + the library's message)."""

from ._lib import TwellError, TwellInvalidArgument, library_path, version, live_states
from .ops import gate_pack, ffn_infer, ffn_train, ffn_train_backward, packed_cols
from .modules import TwELLGatedMLP, TwELLMLP, swap_mlps
from .parallel import TensorParallelGatedMLP, contiguous_layout, tensor_parallel_mlps  # issue 16
from . import balance  # issue 16: python -m twellrt.balance

__all__ = [
    "TwellError",
    "TwellInvalidArgument",
    "library_path",
    "version",
    "live_states",
    "gate_pack",
    "ffn_infer",
    "ffn_train",
    "ffn_train_backward",
    "packed_cols",
    "TwELLGatedMLP",
    "TwELLMLP",
    "swap_mlps",
    "TensorParallelGatedMLP",
    "contiguous_layout",
    "tensor_parallel_mlps",
    "balance",
]
