"""Scheduled GPU kernels shared by the CUDA tests: (name, build function, numpy reference)."""

import numpy as np

from tensorforge import te
from tensorforge.ops import fused_chain
from tensorforge.ops.cuda import (
    schedule_elementwise_cuda,
    schedule_matmul_cuda,
    schedule_softmax_cuda,
)


def elementwise_bind(n=1 << 16):
    x, y = fused_chain(n // 256, 256)
    s = schedule_elementwise_cuda(y)
    return s, [x, y], lambda a: 1 / (1 + np.exp(-(np.maximum(a, 0) * 2 + 1)))


def non_divisible_bind(n=1000):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0 - 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=128)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B], lambda a: a * 3 - 1


def tiled_matmul(n=256):
    s, args = schedule_matmul_cuda(n, n, n, block=64, thread_tile=4, k_tile=8, double_buffer=True)
    return s, args, lambda a, b: a @ b


def row_sum_cross_thread(rows=64, cols=300):
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=64)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    return s, [A, B], lambda a: a.sum(axis=1)


def rfactor_row_max(rows=32, cols=1000):
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    B = te.compute((rows,), lambda i: te.max(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=32)
    BF = s.rfactor(B, ki)
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(s[B].op.reduce_axis[0], tx)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    return s, [A, B], lambda a: a.max(axis=1)


def softmax(rows=64, cols=1024):
    s, args = schedule_softmax_cuda(rows, cols)

    def ref(a):
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    return s, args, ref


def dynamic_shape():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * A[i], name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B], lambda a: a * a


KERNELS = {
    "elementwise_bind": elementwise_bind,
    "non_divisible_bind": non_divisible_bind,
    "tiled_matmul": tiled_matmul,
    "row_sum_cross_thread": row_sum_cross_thread,
    "rfactor_row_max": rfactor_row_max,
    "softmax": softmax,
    "dynamic_shape": dynamic_shape,
}


def tiled_matmul_scalar_loads(n=128):
    s, args = schedule_matmul_cuda(n, n, n, block=64, thread_tile=4, k_tile=8, vector=1)
    return s, args, lambda a, b: a @ b


KERNELS["tiled_matmul_scalar_loads"] = tiled_matmul_scalar_loads
