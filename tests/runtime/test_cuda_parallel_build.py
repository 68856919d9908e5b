"""A model's CUDA kernels compiled side by side (cuda_exec.deferred_loads / load_all): the
executables made in the block are listed rather than loaded, nvcc runs once per distinct
source, and a source it rejects is reported by its own executable's load, not by the batch."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.errors import BuildError
from tensorforge.runtime import cuda_driver, cuda_exec


def _scheduled(scale: float = 1.0):
    x = te.placeholder((64,), name="x")
    y = te.compute((64,), lambda i: x[i] * scale, name="y")
    s = te.create_schedule(y.op)
    bx, tx = s[y].split(y.op.axis[0], factor=32)
    s[y].bind(bx, te.thread_axis("blockIdx.x"))
    s[y].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [x, y]


def _cuda_source(scale: float) -> str:
    return tf.build(*_scheduled(scale), target="cuda -arch=sm_90").get_source("cuda")


def _fake(text: str) -> SimpleNamespace:
    return SimpleNamespace(source=SimpleNamespace(text=text), arch="sm_90")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_images_are_compiled_side_by_side_and_a_rejected_source_left_to_its_load():
    good = [_cuda_source(2.0), _cuda_source(3.0)]
    broken = good[0] + "\nthis is not C++;\n"
    executables = [_fake(good[0]), _fake(good[1]), _fake(good[0]), _fake(broken)]
    cuda_exec.compile_images(executables)
    for text in good:
        image = cuda_exec._images[(text, "sm_90", "cubin")]
        assert image[:4] == b"\x7fELF"  # a cubin
    assert (broken, "sm_90", "cubin") not in cuda_exec._images


def test_load_all_loads_each_and_reports_the_failures():
    loaded = []

    class Executable:
        def __init__(self, name, fails=False):
            self.name, self.fails = name, fails
            self.source, self.arch = SimpleNamespace(text=name), "sm_90"

        def _load(self):
            if self.fails:
                raise BuildError(f"nvcc failed to compile {self.name}")
            loaded.append(self.name)

    batch = [Executable("a"), Executable("b", fails=True), Executable("c")]
    failed = cuda_exec.load_all(batch)
    assert loaded == ["a", "c"]
    assert [(e.name, "b" in str(err)) for e, err in failed] == [("b", True)]


def test_executables_made_in_the_block_are_listed_not_loaded(monkeypatch):
    module = tf.build(*_scheduled(), target="cuda -arch=sm_90")
    kernel = module[module.entry_name].source  # (built where no GPU loads it)
    calls = []
    monkeypatch.setattr(cuda_driver, "available", lambda: True)
    monkeypatch.setattr(cuda_exec.CUDAExecutable, "_load", lambda self: calls.append(self))
    with cuda_exec.deferred_loads() as pending:
        first = cuda_exec.CUDAExecutable(kernel, "cuda -arch=sm_90")
        second = cuda_exec.CUDAExecutable(kernel, "cuda -arch=sm_90")
    assert pending == [first, second] and calls == []
    outside = cuda_exec.CUDAExecutable(kernel, "cuda -arch=sm_90")
    assert calls == [outside]  # outside the block: loaded as it is made
