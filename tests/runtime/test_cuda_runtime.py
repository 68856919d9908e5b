"""CUDA kernels on a GPU: every hand-built kernel of tests/codegen/cuda_kernel_builders.py against
numpy, plus the GPU arrays (copies, __cuda_array_interface__, DLPack) and launch-time checks.

All tests carry the `cuda` marker: skipped where there is no GPU or no pycuda.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorforge.codegen.cuda import CUDACodegen
from tensorforge.errors import ArgumentError
from tests.codegen import cuda_kernel_builders as kernels

pytestmark = pytest.mark.cuda
pytest.importorskip("pycuda")


@pytest.fixture(scope="module")
def target():
    from tensorforge.target import Target

    return Target("cuda")  # the GPU's own architecture


@pytest.fixture(scope="module")
def dev():
    from tensorforge.runtime.device import cuda

    return cuda(0)


def _poison(shape, dtype):
    if np.dtype(dtype).kind == "f":
        return np.full(shape, np.nan, dtype)
    return np.full(shape, -12345, dtype)


def run_kernel(kernel, rng, target, dev):
    """Generate, compile, launch on fresh random inputs; outputs start poisoned."""
    from tensorforge.runtime.cuda_exec import CUDAExecutable
    from tensorforge.runtime.cuda_ndarray import array_cuda

    source = CUDACodegen().generate(kernel.func, target)
    executable = CUDAExecutable(source, target)
    data = kernel.inputs(rng)
    arrays, raw = {}, []
    for p in source.params:
        if p.kind == "scalar":
            raw.append(data[p.name])
            continue
        if p.name in data:
            host = data[p.name]
        elif f"{p.name}_init" in data:
            host = data[f"{p.name}_init"]
        else:
            host = _poison(*kernel.outputs[p.name])
        arrays[p.name] = array_cuda(host, dev)
        raw.append(arrays[p.name].data_ptr)
    executable.call(raw)
    executable.synchronize()
    return {name: arrays[name].numpy() for name in kernel.outputs}, kernel.reference(data), source


@pytest.mark.parametrize("name", list(kernels.all_kernels()))
def test_kernel_matches_numpy(name, rng, target, dev):
    kernel = kernels.all_kernels()[name]()
    got, expected, _ = run_kernel(kernel, rng, target, dev)
    for out, value in got.items():
        want = expected[out]
        if value.dtype.kind == "f":
            assert not np.isnan(value).any(), f"{out}: some elements were never written"
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(
                value, want, rtol=kernel.rtol, atol=kernel.rtol * scale, err_msg=out
            )
        else:
            np.testing.assert_array_equal(value, want, err_msg=out)


def test_same_result_every_run(rng, target, dev):
    """A race shows as results that move between runs on the same input."""
    from tensorforge.runtime.cuda_exec import CUDAExecutable
    from tensorforge.runtime.cuda_ndarray import array_cuda, empty_cuda

    kernel = kernels.matmul_shared()
    source = CUDACodegen().generate(kernel.func, target)
    executable = CUDAExecutable(source, target)
    data = kernel.inputs(rng)
    a, b = array_cuda(data["A"], dev), array_cuda(data["B"], dev)
    results = []
    for _ in range(5):
        c = empty_cuda((256 * 256,), "float32", dev)
        executable.call([a.data_ptr, b.data_ptr, c.data_ptr])
        results.append(c.numpy())
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_empty_dynamic_problem_launches_nothing(target, dev):
    from tensorforge.runtime.cuda_exec import CUDAExecutable
    from tensorforge.runtime.cuda_ndarray import empty_cuda

    source = CUDACodegen().generate(kernels.vector_add_dynamic().func, target)
    executable = CUDAExecutable(source, target)
    a = empty_cuda((1,), "float32", dev)
    executable.call([a.data_ptr, a.data_ptr, a.data_ptr, 0])
    executable.synchronize()


def test_misaligned_float4_argument_is_refused(target, dev):
    from tensorforge.runtime.cuda_exec import CUDAExecutable
    from tensorforge.runtime.cuda_ndarray import empty_cuda

    source = CUDACodegen().generate(kernels.vector4().func, target)
    executable = CUDAExecutable(source, target)
    a = empty_cuda((8192 + 8,), "float32", dev)
    with pytest.raises(ArgumentError, match="argument 'A'.*16-byte"):
        executable.call([a.data_ptr + 4, a.data_ptr])


def test_ptx_source(target):
    from tensorforge.runtime.cuda_exec import CUDAExecutable

    source = CUDACodegen().generate(kernels.vector_add().func, target)
    executable = CUDAExecutable(source, target)
    assert ".entry vector_add_kernel" in executable.get_source("ptx")
    assert executable.get_source("cuda") == source.text
    assert len(executable.image()) > 0


def test_wrong_argument_count(target):
    from tensorforge.runtime.cuda_exec import CUDAExecutable

    source = CUDACodegen().generate(kernels.vector_add().func, target)
    with pytest.raises(ArgumentError, match="expected 3 raw arguments"):
        CUDAExecutable(source, target).call([0, 0])


# -- GPU arrays -------------------------------------------------------------------------------


def test_array_roundtrip_and_copies(rng, dev):
    from tensorforge.runtime.cuda_ndarray import CUDANDArray, array_cuda, empty_cuda

    host = rng.standard_normal((3, 5)).astype(np.float32)
    a = array_cuda(host, dev)
    assert isinstance(a, CUDANDArray)
    assert a.shape == (3, 5) and a.dtype == "float32" and a.device == dev
    np.testing.assert_array_equal(a.numpy(), host)
    b = empty_cuda((3, 5), "float32", dev)
    b.copyfrom(a)  # device to device
    np.testing.assert_array_equal(b.numpy(), host)
    b.copyfrom(host.astype(np.float64) * 2)  # host, converted
    np.testing.assert_array_equal(b.numpy(), host * 2)
    interface = a.__cuda_array_interface__
    assert interface["data"][0] == a.data_ptr and interface["shape"] == (3, 5)
    with pytest.raises(ArgumentError, match="shape mismatch"):
        b.copyfrom(np.zeros((5, 3), np.float32))
    assert empty_cuda((0,), "int32", dev).numpy().shape == (0,)


def test_torch_interop(rng, dev):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    from tensorforge.runtime.cuda_ndarray import array_cuda, from_dlpack

    host = rng.standard_normal(1000).astype(np.float32)
    a = array_cuda(host, dev)
    shared = torch.from_dlpack(a)  # our DLPack export: no copy
    assert shared.data_ptr() == a.data_ptr
    np.testing.assert_array_equal(shared.cpu().numpy(), host)
    shared.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.numpy(), host * 2)
    viewed = torch.as_tensor(a, device="cuda")  # through __cuda_array_interface__
    assert viewed.data_ptr() == a.data_ptr
    t = torch.arange(10, dtype=torch.int32, device="cuda")
    wrapped = from_dlpack(t)
    assert wrapped.data_ptr == t.data_ptr() and wrapped.dtype == "int32"
    np.testing.assert_array_equal(wrapped.numpy(), np.arange(10, dtype=np.int32))


def test_kernel_on_torch_tensors(rng, target):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    from tensorforge.runtime.cuda_exec import CUDAExecutable

    source = CUDACodegen().generate(kernels.vector_add(1000).func, target)
    executable = CUDAExecutable(source, target)
    a, b = (torch.randn(1000, device="cuda") for _ in range(2))
    c = torch.full((1000,), float("nan"), device="cuda")
    executable.call([a.data_ptr(), b.data_ptr(), c.data_ptr()])
    executable.synchronize()
    torch.testing.assert_close(c, a + b)


def test_module_with_tf_nd_arrays(rng, target, dev):
    """The path tf.build takes: Module.from_sources -> CUDAExecutable, arrays from tf.nd."""
    from tensorforge.runtime import ndarray as nd
    from tensorforge.runtime.module import Module

    kernel = kernels.vector_add_dynamic()
    source = CUDACodegen().generate(kernel.func, target)
    mod = Module.from_sources([source], target)
    data = kernel.inputs(rng)
    a, b = nd.array(data["A"], dev), nd.array(data["B"], dev)
    c = nd.empty((1000,), "float32", dev)
    mod(a, b, c)  # n is bound from the shapes
    np.testing.assert_allclose(c.numpy(), kernel.reference(data)["C"], rtol=1e-6)
    assert "vector_add_dynamic_kernel" in mod.get_source("cuda")
