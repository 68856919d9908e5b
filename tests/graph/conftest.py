"""Eager references in float32: cuDNN's convolutions (and, where a script enables it, cuBLAS's
matrix products) run in TF32 by default, whose 10-bit mantissas miss the 1e-4 the compiled
graphs are held to; their tests compare against float32 arithmetic instead."""

import sys

import pytest


@pytest.fixture(autouse=True)
def float32_eager_references():
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
