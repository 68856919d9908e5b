"""NDArray: aligned CPU storage, copies in and out, DLPack both ways, the GPU hook's errors."""

import importlib

import numpy as np
import pytest

from tensorforge import nd
from tensorforge.errors import ArgumentError, DeviceError
from tensorforge.runtime import cpu, cuda

device_module = importlib.import_module("tensorforge.runtime.device")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(device_module, "cuda_device_count", lambda: 0)


def test_array_copies_into_aligned_memory(rng):
    source = rng.random((3, 5)).astype("float32")
    a = nd.array(source)
    assert a.shape == (3, 5) and a.dtype == "float32" and a.device == cpu(0) and a.ndim == 2
    assert a.data_ptr % 64 == 0 and a.handle == a.data_ptr
    source[0, 0] = 42  # a copy: the NDArray does not see it
    assert a.numpy()[0, 0] != 42
    copy = a.numpy()
    copy[0, 0] = 7  # numpy() is a copy too
    assert a.numpy()[0, 0] != 7


@pytest.mark.parametrize("shape", [(), (0,), (1,), (7,), (3, 0, 2), (17, 33)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint8", "bool", "float16"])
def test_empty_is_aligned(shape, dtype):
    a = nd.empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype
    assert a.data_ptr % 64 == 0


def test_empty_defaults_and_int_shape():
    a = nd.empty(5)
    assert a.shape == (5,) and a.dtype == "float32" and a.device == cpu(0)


def test_array_from_lists_and_ndarrays():
    a = nd.array([[1, 2], [3, 4]])
    assert a.dtype == "int64" and a.shape == (2, 2)
    b = nd.array(a)
    assert b.data_ptr != a.data_ptr and (b.numpy() == a.numpy()).all()


def test_bad_dtype_and_shape():
    with pytest.raises(ArgumentError, match="unsupported dtype 'complex64'"):
        nd.empty((2,), "complex64")
    with pytest.raises(ArgumentError, match="unsupported dtype 'complex128'"):
        nd.array(np.zeros(2, complex))
    with pytest.raises(ArgumentError, match="non-negative ints"):
        nd.empty((2, -1))
    with pytest.raises(ArgumentError, match="dev must be a Device"):
        nd.empty((2,), "float32", "cpu")


def test_copyfrom_converts_dtype_and_checks_shape():
    a = nd.empty((2, 2), "float32")
    assert a.copyfrom(np.arange(4.0).reshape(2, 2)) is a  # float64 source, as TVM converts
    np.testing.assert_array_equal(a.numpy(), [[0, 1], [2, 3]])
    a.copyfrom(nd.array(np.ones((2, 2), "int32")))
    assert (a.numpy() == 1).all()
    with pytest.raises(
        ArgumentError,
        match=r"shape mismatch: this array has shape \(2, 2\), "
        r"the source \(4,\)",
    ):
        a.copyfrom(np.zeros(4))


def test_copyto_and_slice_assignment():
    a = nd.array(np.arange(3, dtype="float32"))
    b = a.copyto(cpu(0))
    assert b.data_ptr != a.data_ptr and (b.numpy() == a.numpy()).all()
    c = nd.empty((3,), "float32")
    a.copyto(c)
    assert (c.numpy() == a.numpy()).all()
    c[:] = 5
    assert (c.numpy() == 5).all()
    with pytest.raises(ArgumentError, match="full-slice"):
        c[0] = 1


def test_from_dlpack_shares_memory():
    source = np.zeros(4, "float32")
    a = nd.from_dlpack(source)
    source[1] = 3
    assert a.numpy()[1] == 3 and a.data_ptr == source.ctypes.data


def test_ndarray_exports_dlpack_sharing_memory():
    a = nd.array(np.zeros(3, "int32"))
    view = np.from_dlpack(a)
    view[2] = 9
    assert a.numpy()[2] == 9
    assert a.__dlpack_device__() == (1, 0)
    shared = np.asarray(a)  # numpy's protocol: asarray shares, array copies
    shared[0] = 1
    assert a.numpy()[0] == 1 and np.array(a)[0] == 1


def test_from_dlpack_needs_dlpack():
    with pytest.raises(ArgumentError, match="list does not support DLPack"):
        nd.from_dlpack([1, 2])


def test_repr_names_shape_dtype_device():
    text = repr(nd.array(np.zeros((2, 3), "float32")))
    assert "shape=(2, 3)" in text and "float32" in text and "cpu(0)" in text


def test_cuda_arrays_without_gpu_raise_device_error(no_gpu):
    with pytest.raises(DeviceError, match=r"tf.nd.empty: no CUDA device is available"):
        nd.empty((2,), "float32", cuda(0))
    with pytest.raises(DeviceError, match=r"tf.nd.array: no CUDA device is available"):
        nd.array(np.zeros(2), cuda(0))


@pytest.mark.cuda
def test_cuda_round_trip(rng):
    source = rng.random((4, 5)).astype("float32")
    a = nd.array(source, cuda(0))
    assert a.device == cuda(0) and a.shape == (4, 5) and a.dtype == "float32"
    np.testing.assert_array_equal(a.numpy(), source)
    assert a.__cuda_array_interface__["data"][0] == a.data_ptr
