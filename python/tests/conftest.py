"""Shared fixtures and data for the twellrt package tests. Tests that need a CUDA device carry the
`gpu` marker: ctest runs them as test_python_gpu (label gpu, skipped without a device) and the
others as test_python (label unit, run in CI)."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

HAS_GPU = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for it in items:
        if "gpu" in it.keywords:
            it.add_marker(skip)


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)
