"""Device memory twellrt's plan holds after twell_plan_reserve, by (max rows, active per row):
the bf16 gated plan at K 2048 / N 5632 that the package's ops share across layers.

    python bench/python/reserve_memory.py [--K 2048] [--N 5632]

Needs a CUDA device, torch and twellrt importable (PYTHONPATH=python, TWELL_LIBRARY). Prints the
library's memory (outside torch's allocator) above the starting point after each reserve; reserves
only grow, so each line includes the ones before."""
import argparse

import torch
from twellrt import ops


def lib_mib():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return (total - free - torch.cuda.memory_reserved()) / 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--K", type=int, default=2048)
    ap.add_argument("--N", type=int, default=5632)
    a = ap.parse_args()
    torch.zeros(1, device="cuda")  # the CUDA context first
    base = lib_mib()
    print(f"reserve_memory: outside torch before any plan {base:.0f} MiB")
    for M, nnz in ((64, 30), (256, 30), (2048, 30), (2048, 60), (2048, 1452), (4096, 30)):
        ops.reserve("cuda", a.K, a.N, M, float(nnz))
        print(f"reserve_memory: after reserve(M={M}, nnz={nnz}): library +{lib_mib() - base:.0f} MiB")


if __name__ == "__main__":
    main()
