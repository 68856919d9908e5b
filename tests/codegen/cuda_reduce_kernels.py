"""Hand-built CUDA kernels of cross-thread reductions (ThreadAllReduce lowered to warp shuffles
and shared memory), each with a numpy reference and its inputs, for all_kernels()."""

from __future__ import annotations

import numpy as np

from tensorforge.ir.passes.guard_thread_extents import guard_thread_extents
from tensorforge.ir.passes.insert_thread_syncs import insert_thread_syncs
from tensorforge.ir.passes.lower_thread_allreduce import lower_thread_allreduce
from tensorforge.ir.stmt import (
    Allocate,
    IfThenElse,
    PrimFunc,
    Seq,
    ThreadAllReduce,
)
from tensorforge.te.expr import (
    Var,
)
from tests.codegen.cuda_kernel_builders import Kernel, _rand
from tests.ir.builders import (
    argmax_reducer,
    bind,
    buf,
    c,
    load,
    store,
    sum_reducer,
)


def row_reduce(rows=64, extent=128, reducer="sum") -> Kernel:
    """B[i] = reduce(A[i, :extent]) with the reduction axis bound to threadIdx.x."""
    A = buf("A", rows * extent)
    i, k = Var("i"), Var("k")
    if reducer == "sum":
        red = buf("red", 1, scope="local")
        B = buf("B", rows)
        inner = Seq(
            (
                ThreadAllReduce(
                    sum_reducer(), (load(A, i * extent + k),), (red,), "threadIdx.x", extent
                ),
                IfThenElse(k.__eq__(c(0)), store(B, i, load(red, c(0)))),
            )
        )
        body = Allocate(red, c(1), bind(k, extent, "threadIdx.x", inner))
        outputs = {"B": ((rows,), "float32")}
        params = (A, B)
        reference = lambda x: {"B": x["A"].reshape(rows, extent).sum(axis=1)}
    else:
        red_i, red_v = buf("red_i", 1, "int32", "local"), buf("red_v", 1, scope="local")
        B_i, B_v = buf("B_i", rows, "int32"), buf("B_v", rows)
        values = (k, load(A, i * extent + k))
        inner = Seq(
            (
                ThreadAllReduce(argmax_reducer(), values, (red_i, red_v), "threadIdx.x", extent),
                IfThenElse(
                    k.__eq__(c(0)),
                    Seq((store(B_i, i, load(red_i, c(0))), store(B_v, i, load(red_v, c(0))))),
                ),
            )
        )
        body = Allocate(red_i, c(1), Allocate(red_v, c(1), bind(k, extent, "threadIdx.x", inner)))
        outputs = {"B_i": ((rows,), "int32"), "B_v": ((rows,), "float32")}
        params = (A, B_i, B_v)

        def reference(x):
            a = x["A"].reshape(rows, extent)
            return {"B_i": a.argmax(axis=1).astype(np.int32), "B_v": a.max(axis=1)}

    body = lower_thread_allreduce(bind(i, rows, "blockIdx.x", body))
    return Kernel(
        PrimFunc(f"row_{reducer}_{extent}", params, body),
        lambda rng: {"A": _rand(rows * extent, rng)},
        reference,
        outputs,
        rtol=1e-5,
        expect=("__shfl_down_sync", f"__launch_bounds__({extent})"),
    )


def block_reduce(rows_per_block=4, extent=100, axis="x", blocks=8) -> Kernel:
    """Rows spread over a 2-d block: reduce along threadIdx.`axis`, rows along the other axis."""
    other = "y" if axis == "x" else "x"
    rows = rows_per_block * blocks
    A, B = buf("A", rows * extent), buf("B", rows)
    red = buf("red", 1, scope="local")
    b, r, k = Var("b"), Var("r"), Var("k")
    row = b * rows_per_block + r
    inner = Seq(
        (
            ThreadAllReduce(
                sum_reducer(), (load(A, row * extent + k),), (red,), f"threadIdx.{axis}", extent
            ),
            IfThenElse(k.__eq__(c(0)), store(B, row, load(red, c(0)))),
        )
    )
    loops = bind(
        r, rows_per_block, f"threadIdx.{other}", bind(k, extent, f"threadIdx.{axis}", inner)
    )
    body = lower_thread_allreduce(bind(b, blocks, "blockIdx.x", Allocate(red, c(1), loops)))
    return Kernel(
        PrimFunc(f"block_reduce_{axis}_{rows_per_block}x{extent}", (A, B), body),
        lambda rng: {"A": _rand(rows * extent, rng)},
        lambda x: {"B": x["A"].reshape(rows, extent).sum(axis=1)},
        {"B": ((rows,), "float32")},
    )


def guarded_reduce(rows=16, extent=100) -> Kernel:
    """A 128-thread copy into shared memory, then a 100-thread allreduce over it in one block."""
    A, B = buf("A", rows * 128), buf("B", rows)
    S = buf("S", 128, scope="shared")
    red = buf("red", 1, scope="local")
    i, t, k = Var("i"), Var("t"), Var("k")
    reduce_stage = Seq(
        (
            ThreadAllReduce(
                sum_reducer(), (load(S, k) * load(S, k),), (red,), "threadIdx.x", extent
            ),
            IfThenElse(k.__eq__(c(0)), store(B, i, load(red, c(0)))),
        )
    )
    body = bind(
        i,
        rows,
        "blockIdx.x",
        Allocate(
            S,
            c(128),
            Allocate(
                red,
                c(1),
                Seq(
                    (
                        bind(t, 128, "threadIdx.x", store(S, t, load(A, i * 128 + t))),
                        bind(k, extent, "threadIdx.x", reduce_stage),
                    )
                ),
            ),
        ),
    )
    body = lower_thread_allreduce(guard_thread_extents(insert_thread_syncs(body)))
    return Kernel(
        PrimFunc("guarded_reduce", (A, B), body),
        lambda rng: {"A": _rand(rows * 128, rng)},
        lambda x: {"B": (x["A"].reshape(rows, 128)[:, :extent] ** 2).sum(axis=1)},
        {"B": ((rows,), "float32")},
    )
