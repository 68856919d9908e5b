"""split_device_kernels: one KernelLaunch per bound root stage, global intermediates on top."""

from tensorforge.ir.passes.split_device_kernels import split_device_kernels
from tensorforge.ir.stmt import Allocate, KernelLaunch, Seq
from tensorforge.te.expr import Var
from tests.ir.builders import bind, buf, c, f32, load, loop, store

A, B = buf("A", 64), buf("B", 64)
T = buf("T", 64)


def test_bound_roots_around_an_intermediate_become_kernels():
    b1, b2 = Var("b1"), Var("b2")
    first = bind(b1, 64, "blockIdx.x", store(T, b1, load(A, b1)))
    second = bind(b2, 32, "blockIdx.x", store(B, b2, load(T, b2)))
    out = split_device_kernels(Allocate(T, c(64), Seq((first, second))))
    expected = Seq((KernelLaunch("kernel0", first), KernelLaunch("kernel1", second)))
    assert out == Allocate(T, c(64), expected)


def test_unbound_neighbours_share_one_kernel():
    b, i = Var("b"), Var("i")
    partial = bind(b, 8, "blockIdx.x", store(T, b, load(A, b)))
    init, combine = store(B, c(0), f32(0)), loop(i, 8, store(B, c(0), load(T, i)))
    out = split_device_kernels(Allocate(T, c(8), Seq((partial, init, combine))))
    assert out.body == Seq(
        (KernelLaunch("kernel0", partial), KernelLaunch("kernel1", Seq((init, combine))))
    )


def test_one_kernel_without_intermediates_is_unchanged():
    b = Var("b")
    body = bind(b, 64, "blockIdx.x", store(B, b, load(A, b)))
    assert split_device_kernels(body) is body
    local = Allocate(buf("L", 4, scope="local"), c(4), body)
    assert split_device_kernels(local) is local
