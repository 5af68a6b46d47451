"""Runs a function on `world` processes joined by torch.distributed (gloo on the CPU, NCCL on one
GPU per rank) and returns what each rank returned. The functions live in _tp_cases.py so the
spawned processes can import them."""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank, world, backend, store, outdir, fn, args):
    torch.set_num_threads(1)  # the CI machine has 2 cores for every rank
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=world)
    try:
        res = fn(rank, world, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    torch.save(res, os.path.join(outdir, f"rank{rank}.pt"))


def run(world, fn, *args, backend="gloo"):
    """[result of rank 0, result of rank 1, ...]; a failing rank raises here with its traceback."""
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        mp.start_processes(_worker, args=(world, backend, store, d, fn, args), nprocs=world, join=True, start_method="spawn")
        return [torch.load(os.path.join(d, f"rank{r}.pt")) for r in range(world)]
