"""Argument conversion and checking at call time: every mistake names the parameter."""

import numpy as np
import pytest
from runtime_fakes import buffer, scalar, vector_add, vector_add_params

from tensorforge import nd
from tensorforge.errors import ArgumentError, BuildError
from tensorforge.runtime.cuda_ndarray import CUDANDArray
from tensorforge.runtime.device import cuda


class CPUDLPack:
    """A DLPack producer on the CPU that is not a numpy array (as a torch CPU tensor is)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (1, 0)


class FakeCUDAArray:
    """Something exposing __cuda_array_interface__ (as cupy, torch.cuda, numba arrays do)."""

    def __init__(self, shape, typestr="<f4", pointer=0x7F0000000000, strides=None, read_only=False):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (pointer, read_only),
            "strides": strides,
            "version": 3,
        }


class CUDADLPackOnly:
    def __dlpack__(self, **kwargs):
        raise AssertionError("must not be read on a CPU kernel")

    def __dlpack_device__(self):
        return (2, 0)


# -- what works ---------------------------------------------------------------------------------
def test_numpy_arrays_are_written_in_place_and_sizes_bound(make_module, rng):
    mod, executable = make_module(vector_add_params(), vector_add)
    a, b = rng.random(10, dtype=np.float32), rng.random(10, dtype=np.float32)
    c = np.zeros(10, dtype=np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a + b)
    assert executable.calls[0][3] == 10  # n comes from the shapes, after the three buffers


def test_ndarray_numpy_and_dlpack_arguments_mix(make_module, rng):
    mod, _ = make_module(vector_add_params(), vector_add)
    a = nd.array(rng.random(7, dtype=np.float32))
    b = CPUDLPack(rng.random(7, dtype=np.float32))
    c = nd.empty((7,), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c.numpy(), a.numpy() + b.array)


def test_ndarray_pointer_is_passed(make_module):
    mod, executable = make_module([buffer("A", [4])])
    a = nd.empty((4,), "float32")
    mod(a)
    assert executable.calls == [[a.data_ptr]]


def test_unaligned_numpy_array_is_used_in_place(make_module):
    # NOTE: only element alignment is required of caller-owned arrays; no copy is made.
    raw = np.zeros(20, dtype=np.float32)
    a = raw[1:17]  # 4 bytes past a 64-byte boundary at best
    mod, executable = make_module([buffer("A", [16])], lambda x: x.fill(3.0))
    mod(a)
    assert executable.calls[0][0] == a.ctypes.data
    assert (a == 3.0).all() and raw[0] == 0 and raw[17] == 0


def test_scalars_are_passed_as_numbers(make_module, rng):
    params = [
        buffer("A", ["n"]),
        buffer("B", ["n"]),
        scalar("alpha", "float32"),
        scalar("n", bound=True),
    ]

    def scale(a, b, alpha, n):
        b[:] = a * alpha

    mod, executable = make_module(params, scale)
    a, b = rng.random(5, dtype=np.float32), np.empty(5, np.float32)
    mod(a, b, 2)  # an int is a fine float
    np.testing.assert_allclose(b, a * 2)
    mod(a, b, np.float32(0.5))
    assert executable.calls[-1][2:] == [0.5, 5]


def test_two_symbolic_sizes(make_module, rng):
    params = [
        buffer("A", ["n", "m"]),
        buffer("B", ["m", "n"]),
        scalar("n", bound=True),
        scalar("m", bound=True),
    ]

    def transpose(a, b, n, m):
        b[:] = a.T

    mod, executable = make_module(params, transpose)
    a, b = rng.random((3, 5), dtype=np.float32), np.empty((5, 3), np.float32)
    mod(a, b)
    np.testing.assert_array_equal(b, a.T)
    assert executable.calls[0][2:] == [3, 5]


def test_user_passed_size_must_agree_with_shapes(make_module):
    mod, _ = make_module([buffer("A", ["n"]), scalar("n")])
    mod(np.zeros(4, np.float32), 4)
    with pytest.raises(
        ArgumentError, match=r"argument 'n' is 5, but n is 4 from 'A' \(dimension 0\)"
    ):
        mod(np.zeros(4, np.float32), 5)


def test_zero_size_and_zero_dim_arrays(make_module):
    mod, executable = make_module([buffer("A", ["n"]), buffer("S", []), scalar("n", bound=True)])
    mod(np.zeros(0, np.float32), np.zeros((), np.float32))
    assert executable.calls[0][2] == 0


def test_cuda_array_interface_pointer_is_passed_through(make_module):
    mod, executable = make_module([buffer("A", ["n"]), scalar("n", bound=True)], target="cuda")
    mod(FakeCUDAArray((8,), pointer=0x1000, strides=(4,)))
    mod(CUDANDArray((8,), "float32", cuda(0), pointer=0x2000))  # tensorforge's own GPU array
    assert executable.calls == [[0x1000, 8], [0x2000, 8]]


# -- wrong count --------------------------------------------------------------------------------
def test_wrong_count_lists_parameters(make_module):
    mod, _ = make_module(vector_add_params())
    with pytest.raises(ArgumentError, match=r"main\(\) takes 3 argument\(s\) \(A, B, C\), got 2"):
        mod(np.zeros(3, np.float32), np.zeros(3, np.float32))
    with pytest.raises(ArgumentError, match="n is bound from the array shapes"):
        mod(*[np.zeros(3, np.float32)] * 3, 3)


# -- wrong dtype / shape ------------------------------------------------------------------------
def test_wrong_dtype(make_module):
    mod, _ = make_module(vector_add_params())
    a = np.zeros(3, np.float32)
    with pytest.raises(ArgumentError, match="argument 'B' expects dtype float32, got float64"):
        mod(a, np.zeros(3), a)


def test_wrong_byte_order(make_module):
    mod, _ = make_module([buffer("A", [3])])
    with pytest.raises(ArgumentError, match="argument 'A' .*non-native byte order"):
        mod(np.zeros(3, np.dtype("float32").newbyteorder()))


def test_wrong_ndim_shows_symbolic_shape(make_module):
    mod, _ = make_module([buffer("A", ["n", 16]), scalar("n", bound=True)])
    with pytest.raises(
        ArgumentError,
        match=r"argument 'A' expects 2 dimension\(s\) \(n, 16\), "
        r"got 1 with shape \(10,\)",
    ):
        mod(np.zeros(10, np.float32))


def test_wrong_static_size(make_module):
    mod, _ = make_module([buffer("A", ["n", 16]), scalar("n", bound=True)])
    with pytest.raises(
        ArgumentError,
        match=r"argument 'A' expects shape \(n, 16\), got \(10, 8\): "
        r"dimension 1 is 8, expected 16",
    ):
        mod(np.zeros((10, 8), np.float32))


def test_symbolic_size_bound_inconsistently(make_module):
    mod, _ = make_module(vector_add_params())
    a, b = np.zeros(10, np.float32), np.zeros(12, np.float32)
    with pytest.raises(
        ArgumentError,
        match=r"argument 'B' .*n is 10 from 'A' \(dimension 0\) "
        r"and 12 from 'B' \(dimension 0\)",
    ):
        mod(a, b, a)


def test_symbolic_size_inconsistent_within_one_array(make_module):
    mod, _ = make_module([buffer("A", ["n", "n"]), scalar("n", bound=True)])
    with pytest.raises(
        ArgumentError,
        match=r"argument 'A' .*n is 3 from 'A' \(dimension 0\) "
        r"and 4 from 'A' \(dimension 1\)",
    ):
        mod(np.zeros((3, 4), np.float32))


def test_size_too_large_for_its_dtype(make_module):
    mod, _ = make_module([buffer("A", ["n"], "int8"), scalar("n", "int8", bound=True)])
    with pytest.raises(ArgumentError, match=r"size 'n' = 200 .* does not fit its dtype int8"):
        mod(np.zeros(200, np.int8))


# -- layout -------------------------------------------------------------------------------------
def test_non_contiguous(make_module):
    mod, _ = make_module([buffer("A", [4, 4])])
    with pytest.raises(
        ArgumentError,
        match=r"argument 'A' is not C-contiguous .*"
        r"np\.ascontiguousarray\(A\)",
    ):
        mod(np.zeros((4, 4), np.float32).T)


def test_read_only(make_module):
    mod, _ = make_module([buffer("A", [4])])
    a = np.zeros(4, np.float32)
    a.flags.writeable = False
    with pytest.raises(ArgumentError, match="argument 'A' is read-only"):
        mod(a)


def test_misaligned_elements(make_module):
    mod, _ = make_module([buffer("A", [10])])
    a = np.frombuffer(bytearray(41), dtype=np.float32, offset=1, count=10)
    with pytest.raises(ArgumentError, match="argument 'A' is not aligned to its 4-byte elements"):
        mod(a)


# -- devices ------------------------------------------------------------------------------------
def test_cuda_array_to_cpu_kernel(make_module):
    mod, _ = make_module([buffer("A", [8])])
    with pytest.raises(
        ArgumentError, match="argument 'A' is a CUDA array but 'main' runs on the CPU"
    ):
        mod(FakeCUDAArray((8,)))
    with pytest.raises(ArgumentError, match="argument 'A' is a CUDA array"):
        mod(CUDADLPackOnly())


def test_cuda_ndarray_to_cpu_kernel(make_module):
    mod, _ = make_module([buffer("A", [8])])
    with pytest.raises(
        ArgumentError, match=r"argument 'A' is on cuda\(0\) but 'main' runs on the CPU"
    ):
        mod(CUDANDArray((8,), "float32", cuda(0), pointer=0x1000))  # no GPU memory is touched


def test_host_array_to_cuda_kernel(make_module):
    mod, _ = make_module([buffer("A", [8])], target="cuda")
    for host in (np.zeros(8, np.float32), nd.empty((8,), "float32"), CPUDLPack(np.zeros(8))):
        with pytest.raises(
            ArgumentError, match="argument 'A' is a host .CPU. array but 'main' runs on a CUDA GPU"
        ):
            mod(host)


def test_cuda_array_checks(make_module):
    mod, _ = make_module([buffer("A", [4, 4])], target="cuda")
    with pytest.raises(ArgumentError, match="argument 'A' expects dtype float32, got float64"):
        mod(FakeCUDAArray((4, 4), typestr="<f8"))
    with pytest.raises(ArgumentError, match="argument 'A' is not C-contiguous"):
        mod(FakeCUDAArray((4, 4), strides=(4, 16)))
    with pytest.raises(ArgumentError, match="argument 'A' is read-only"):
        mod(FakeCUDAArray((4, 4), read_only=True))
    with pytest.raises(ArgumentError, match="argument 'A' is not aligned"):
        mod(FakeCUDAArray((4, 4), pointer=0x1002))
    mod(FakeCUDAArray((4, 4), strides=(16, 4)))  # explicit C strides are fine


# -- not an array / not a number ----------------------------------------------------------------
def test_buffer_given_a_number_or_list(make_module):
    mod, _ = make_module([buffer("A", [3])])
    with pytest.raises(ArgumentError, match="argument 'A' expects an array .*got float"):
        mod(1.0)
    with pytest.raises(
        ArgumentError,
        match=r"argument 'A' expects an array .*got list; "
        r"convert it with np\.asarray",
    ):
        mod([1.0, 2.0, 3.0])


def test_scalar_given_an_array(make_module):
    mod, _ = make_module([buffer("A", [3]), scalar("alpha", "float32")])
    a = np.zeros(3, np.float32)
    with pytest.raises(
        ArgumentError,
        match=r"argument 'alpha' is a float32 scalar and expects a "
        r"number, got numpy.ndarray of shape \(3,\)",
    ):
        mod(a, a)
    with pytest.raises(ArgumentError, match=r"argument 'alpha' .*use \.item\(\)"):
        mod(a, np.array(2.0))
    with pytest.raises(ArgumentError, match="argument 'alpha' .*got an array"):
        mod(a, nd.array(a))


def test_scalar_given_a_non_number(make_module):
    mod, _ = make_module([scalar("alpha", "float32"), scalar("k", "int32")])
    with pytest.raises(ArgumentError, match="argument 'alpha' .*expects a number, got str"):
        mod("2", 1)
    with pytest.raises(ArgumentError, match="argument 'alpha' .*got complex"):
        mod(1j, 1)
    with pytest.raises(
        ArgumentError, match="argument 'k' is a int32 scalar and expects an integer, got float 2.5"
    ):
        mod(1.0, 2.5)
    with pytest.raises(ArgumentError, match="argument 'k' = 4294967296 is out of range for int32"):
        mod(1.0, 2**32)


# -- construction -------------------------------------------------------------------------------
def test_bound_size_missing_from_shapes_is_a_build_error(make_module):
    with pytest.raises(BuildError, match="'n' is bound from shapes"):
        make_module([buffer("A", [4]), scalar("n", bound=True)])
