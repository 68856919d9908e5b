"""Module: calling entries by name, sources, building from KernelSources, time_evaluator."""

import importlib
import shutil

import numpy as np
import pytest
from runtime_fakes import NumpyExecutable, buffer, source, vector_add, vector_add_params

import tensorforge.runtime.module as module_module
from tensorforge.errors import ArgumentError, BuildError, DeviceError
from tensorforge.runtime import BenchmarkResult, Module, cpu, cuda
from tensorforge.runtime.cache import EXECUTABLES
from tensorforge.target import Target

# NOTE: `tensorforge.runtime.device` is also the name of the function device(); get the module.
device_module = importlib.import_module("tensorforge.runtime.device")


class PlainExecutable:
    """An executable offering only `call` (no get_source, no synchronize)."""

    def __init__(self):
        self.calls = 0

    def call(self, raw_args):
        self.calls += 1


class SyncingExecutable(PlainExecutable):
    def __init__(self):
        super().__init__()
        self.syncs = 0

    def synchronize(self):
        self.syncs += 1


def two_function_module():
    add = source(vector_add_params(), entry="add")
    fill = source([buffer("X", [3])], entry="fill")
    return Module(
        [
            (add, NumpyExecutable(add, fn=vector_add)),
            (fill, NumpyExecutable(fill, fn=lambda x: x.fill(7))),
        ]
    )


@pytest.fixture
def fake_compiler(monkeypatch):
    """Module.from_sources compiles with NumpyExecutable; counts compilations; empty cache."""
    compiled = []

    def factory(kernel, target):
        compiled.append(kernel.entry)
        return NumpyExecutable(kernel, target)

    monkeypatch.setattr(module_module, "executable_class", lambda kind: factory)
    EXECUTABLES.clear()
    yield compiled
    EXECUTABLES.clear()


# -- functions by name --------------------------------------------------------------------------
def test_call_entry_and_functions_by_name(rng):
    mod = two_function_module()
    assert mod.entry_name == "add" and mod.function_names == ("add", "fill")
    a, b, c = (rng.random(4, dtype=np.float32) for _ in range(3))
    mod(a, b, c)
    np.testing.assert_allclose(c, a + b)
    x = np.zeros(3, np.float32)
    mod["fill"](x)
    assert (x == 7).all()
    assert mod.get_function("fill") is mod["fill"] and "fill" in mod and "nope" not in mod


def test_unknown_function_lists_names():
    with pytest.raises(ArgumentError, match="no function 'mul'; it has: add, fill"):
        two_function_module()["mul"]


def test_entry_can_be_chosen_and_params_introspected():
    add = source(vector_add_params(), entry="add")
    fill = source([buffer("X", [3])], entry="fill")
    mod = Module([(add, PlainExecutable()), (fill, PlainExecutable())], entry="fill")
    assert mod.entry_name == "fill"
    assert [p.name for p in mod.params] == ["X"]
    assert mod["add"].arg_names == ("A", "B", "C")
    assert [p.name for p in mod["add"].params] == ["A", "B", "C", "n"]


def test_bad_construction():
    add = source(vector_add_params(), entry="add")
    with pytest.raises(BuildError, match="two functions are named 'add'"):
        Module([(add, PlainExecutable()), (add, PlainExecutable())])
    with pytest.raises(BuildError, match="at least one"):
        Module([])
    cuda_add = source(vector_add_params(), entry="gpu_add", target="cuda")
    with pytest.raises(BuildError, match="one target kind"):
        Module([(add, PlainExecutable()), (cuda_add, PlainExecutable())])


# -- sources ------------------------------------------------------------------------------------
def test_get_source_formats():
    mod = two_function_module()
    assert mod.get_source() == mod.get_source("ll") == "ll of add\nll of fill"
    assert mod.get_source("asm") == "asm of add\nasm of fill"
    with pytest.raises(
        ArgumentError, match="unknown format 'ptx' for a llvm module; valid formats: 'll', 'asm'"
    ):
        mod.get_source("ptx")


def test_get_source_without_executable_support():
    kernel = source([buffer("A", [2])], text="define void @main() {}")
    mod = Module([(kernel, PlainExecutable())])
    assert mod.get_source("ll") == "define void @main() {}"
    with pytest.raises(ArgumentError, match="cannot show 'asm'"):
        mod.get_source("asm")


def test_cuda_module_sources():
    kernel = source([buffer("A", [2])], target="cuda", text='extern "C" __global__ void main() {}')
    mod = Module([(kernel, PlainExecutable())])
    assert mod.type_key == "cuda" and mod.device == cuda(0)
    assert mod.get_source("cuda") == kernel.text
    assert mod.imported_modules[0].get_source() == kernel.text  # the TVM tutorial spelling
    with pytest.raises(ArgumentError, match="valid formats: 'cuda', 'ptx'"):
        mod.get_source("ll")


# -- from_sources and the executable cache -------------------------------------------------------
def test_from_sources_compiles_once_per_source_and_target(fake_compiler):
    kernel = source(vector_add_params(), entry="add")
    first = Module.from_sources([kernel], "llvm")
    second = Module.from_sources([kernel], Target("llvm"))
    assert fake_compiler == ["add"]
    assert first["add"].executable is second["add"].executable
    a = np.zeros(3, np.float32)
    second(a, a, a)
    assert second["add"].executable.calls == [[a.ctypes.data] * 3 + [3]]
    assert str(second.target) == str(Target("llvm"))


def test_from_sources_rejects_a_source_for_another_target(fake_compiler):
    kernel = source(vector_add_params(), entry="add", target="cuda")
    with pytest.raises(BuildError, match="'add' was generated for cuda"):
        Module.from_sources([kernel], "llvm")


CUDA_KERNEL = 'extern "C" __global__ void fill(float* __restrict__ A) { A[threadIdx.x] = 1.0f; }'


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(device_module, "cuda_device_count", lambda: 0)
    EXECUTABLES.clear()
    yield
    EXECUTABLES.clear()


def test_cuda_build_without_gpu_shows_source_and_refuses_to_run(no_gpu):
    kernel = source([buffer("A", [2])], entry="fill", target="cuda", text=CUDA_KERNEL)
    mod = Module.from_sources([kernel], "cuda -arch=sm_90")
    assert mod.get_source("cuda") == CUDA_KERNEL
    if shutil.which("nvcc"):  # PTX needs only nvcc, not a GPU
        assert ".entry fill" in mod.get_source("ptx")
    with pytest.raises(DeviceError, match="cannot run 'fill': no CUDA device is available"):
        mod(np.zeros(2, np.float32))
    with pytest.raises(DeviceError, match="no CUDA device"):
        mod.time_evaluator("fill", cuda(0))(np.zeros(2, np.float32))


def test_cuda_build_without_gpu_or_cuda_runtime(no_gpu, monkeypatch):
    def missing(kind):
        raise ImportError("No module named 'tensorforge.runtime.cuda_exec'")

    monkeypatch.setattr(module_module, "executable_class", missing)
    kernel = source([buffer("A", [2])], entry="fill", target="cuda", text=CUDA_KERNEL)
    mod = Module.from_sources([kernel], "cuda -arch=sm_90")
    assert mod.get_source() == CUDA_KERNEL
    with pytest.raises(DeviceError, match="no CUDA device"):
        mod.get_source("ptx")
    with pytest.raises(DeviceError, match="cannot run 'fill'"):
        mod(np.zeros(2, np.float32))


# -- time_evaluator ------------------------------------------------------------------------------
def test_time_evaluator_runs_number_times_repeat_after_one_warmup():
    executable = PlainExecutable()
    kernel = source([buffer("A", [2])])
    mod = Module([(kernel, executable)])
    result = mod.time_evaluator("main", cpu(0), number=3, repeat=4)(np.zeros(2, np.float32))
    assert isinstance(result, BenchmarkResult)
    assert executable.calls == 1 + 3 * 4
    assert len(result.results) == 4 and all(r >= 0 for r in result.results)
    assert min(result.results) <= result.median <= max(result.results)


def test_time_evaluator_min_repeat_ms_runs_longer():
    executable = PlainExecutable()
    kernel = source([buffer("A", [2])])
    mod = Module([(kernel, executable)])
    mod.time_evaluator("main", cpu(0), number=1, repeat=1, min_repeat_ms=5)(np.zeros(2, np.float32))
    assert executable.calls > 2  # one call never lasts 5 ms here


def test_time_evaluator_synchronizes_a_gpu_executable():
    executable = SyncingExecutable()
    kernel = source([buffer("A", [2])], target="cuda")
    mod = Module([(kernel, executable)])

    class CUDAArray:  # a CUDA array without a GPU: the pointer is never dereferenced
        @property
        def __cuda_array_interface__(self):
            return {"shape": (2,), "typestr": "<f4", "data": (256, False), "version": 3}

    mod.time_evaluator("main", cuda(0), number=2, repeat=3)(CUDAArray())
    assert executable.calls == 1 + 2 * 3
    assert executable.syncs == 1 + 3  # after the warm-up and after each measurement


def test_time_evaluator_checks_its_arguments():
    mod = two_function_module()
    with pytest.raises(ArgumentError, match="no function 'mul'"):
        mod.time_evaluator("mul", cpu(0))
    with pytest.raises(ArgumentError, match=r"'add' runs on cpu\(0\), not on cuda\(0\)"):
        mod.time_evaluator("add", cuda(0))
    with pytest.raises(ArgumentError, match="number must be a positive int, got 0"):
        mod.time_evaluator("add", cpu(0), number=0)
    with pytest.raises(ArgumentError, match="min_repeat_ms must be a number >= 0"):
        mod.time_evaluator("add", cpu(0), min_repeat_ms=-1)
    evaluator = mod.time_evaluator("add", cpu(0))
    with pytest.raises(ArgumentError, match=r"add\(\) takes 3 argument"):
        evaluator(np.zeros(3, np.float32))


def test_time_evaluator_empty_name_means_entry():
    mod = two_function_module()
    assert mod.time_evaluator("", cpu(0)).function is mod["add"]
