"""ctest entry point: `run_pytest.py unit|gpu [pytest args]`. `unit` runs every test not marked
gpu; `gpu` runs the gpu-marked ones and exits 77 (ctest: Skipped) when there is no CUDA device,
unless TWELL_REQUIRE_GPU=1."""

import os
import sys

import pytest


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    kind = sys.argv[1]
    args = [here, "-q", "-rsx", "-p", "no:cacheprovider", "-m", "gpu" if kind == "gpu" else "not gpu"] + sys.argv[2:]
    if kind == "gpu":
        import torch

        if not torch.cuda.is_available():
            if os.environ.get("TWELL_REQUIRE_GPU") == "1":
                print("test_python_gpu: TWELL_REQUIRE_GPU=1 but torch sees no CUDA device")
                sys.exit(1)
            print("test_python_gpu: no CUDA device, skipped")
            sys.exit(77)
    sys.exit(pytest.main(args))


# guarded: the multi-process tests (test_parallel.py) start processes with "spawn", which imports
# this script again in every child
if __name__ == "__main__":
    main()
