"""Devices: names, equality, existence (CUDA asked lazily through pycuda)."""

import importlib
import subprocess
import sys

import pytest

import tensorforge as tf
from tensorforge.errors import ArgumentError
from tensorforge.runtime import Device, cpu, cuda, device

device_module = importlib.import_module("tensorforge.runtime.device")


def test_equality_and_names():
    assert cpu(0) == device("cpu", 0) == device("llvm") == Device("cpu")
    assert cuda(1) == device("cuda", 1) == device("gpu", 1)
    assert cpu(0) != cuda(0) and cuda(0) != cuda(1) and cpu(0) != "cpu"
    assert len({cpu(0), device("cpu", 0), cuda(0)}) == 2
    assert repr(cpu(0)) == "cpu(0)" and repr(cuda(2)) == "cuda(2)"
    assert (cpu(0).device_type, cuda(3).device_type, cuda(3).device_id) == (1, 2, 3)


def test_reached_from_the_top_level():
    assert tf.cpu(0) == cpu(0) and tf.device("cuda", 0) == cuda(0)


def test_bad_kind_or_index():
    with pytest.raises(ArgumentError, match="unknown device kind 'tpu'"):
        device("tpu", 0)
    with pytest.raises(ArgumentError, match="non-negative int"):
        cpu(-1)


def test_cpu_exists():
    assert cpu(0).exist
    cpu(0).sync()  # nothing to wait for


def test_cuda_exist_follows_device_count(monkeypatch):
    monkeypatch.setattr(device_module, "cuda_device_count", lambda: 1)
    assert cuda(0).exist and not cuda(1).exist
    monkeypatch.setattr(device_module, "cuda_device_count", lambda: 0)
    assert not cuda(0).exist


def test_importing_the_runtime_does_not_import_pycuda():
    code = (
        "import sys, tensorforge.runtime, tensorforge.nd; "
        "tensorforge.runtime.cpu(0).exist; assert 'pycuda' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.cuda
def test_cuda_device_exists_on_a_gpu_machine():
    assert cuda(0).exist
