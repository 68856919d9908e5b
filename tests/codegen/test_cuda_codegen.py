"""CUDA codegen without a GPU: hand-built PrimFuncs -> CUDA C -> checked text -> nvcc --ptx.

The kernel builders here are shared with tests/runtime/test_cuda_runtime.py, which runs the same
kernels on a GPU against numpy: each builder returns a `Kernel` (the PrimFunc plus a numpy
reference and how to make inputs).
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from tensorforge.codegen.cuda import CUDACodegen
from tensorforge.errors import BuildError
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp
from tensorforge.ir.passes.insert_thread_syncs import insert_thread_syncs
from tensorforge.ir.stmt import (
    Allocate,
    BufferStore,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    PrimFunc,
    Seq,
    Sync,
    ThreadAllReduce,
)
from tensorforge.target import Target
from tensorforge.te.expr import (
    Call,
    Cast,
    CommReducer,
    Const,
    FloorDiv,
    FloorMod,
    Max,
    Select,
    Var,
)

TARGET = Target("cuda -arch=sm_90")

# -- IR building helpers ----------------------------------------------------------------------


def c(value, dtype="int32") -> Const:
    return Const(value, dtype)


def f32(value) -> Const:
    return Const(float(value), "float32")


def buf(name, n, dtype="float32", scope="global") -> Buffer:
    return Buffer(name, (n if not isinstance(n, int) else c(n),), dtype, scope)


def bind(var, extent, tag, body, low=0) -> For:
    extent = c(extent) if isinstance(extent, int) else extent
    return For(var, c(low), extent, body, LoopKind.THREAD_BINDING, tag)


def loop(var, extent, body, kind=LoopKind.SERIAL, low=0) -> For:
    extent = c(extent) if isinstance(extent, int) else extent
    return For(var, c(low), extent, body, kind)


def load(b, index, predicate=None) -> BufferLoad:
    return BufferLoad(b, (index,), predicate)


def store(b, index, value, predicate=None) -> BufferStore:
    return BufferStore(b, (index,), value, predicate)


def sum_reducer(dtype="float32") -> CommReducer:
    x, y = Var("x", dtype), Var("y", dtype)
    return CommReducer("sum", (x,), (y,), (x + y,), (Const(0.0 if "float" in dtype else 0, dtype),))


def argmax_reducer() -> CommReducer:
    """(index, value): the larger value; on a tie the left (lower-index) operand."""
    x0, x1 = Var("x0", "int32"), Var("x1", "float32")
    y0, y1 = Var("y0", "int32"), Var("y1", "float32")
    keep_left = x1 >= y1
    return CommReducer(
        "argmax",
        (x0, x1),
        (y0, y1),
        (Select(keep_left, x0, y0), Select(keep_left, x1, y1)),
        (c(-1), f32(-math.inf)),
    )


@dataclass
class Kernel:
    """A hand-built kernel, its inputs and its numpy reference (outputs by buffer name)."""

    func: PrimFunc
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray | int | float]]
    reference: Callable[[dict], dict[str, np.ndarray]]
    outputs: dict[str, tuple[tuple[int, ...], str]]
    rtol: float = 1e-5
    expect: tuple[str, ...] = ()  # substrings the CUDA C must contain
    notes: dict = field(default_factory=dict)


def _rand(shape, rng, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


# -- kernels ----------------------------------------------------------------------------------


def vector_add(n=1024, block=128) -> Kernel:
    A, B, C = buf("A", n), buf("B", n), buf("C", n)
    bx, tx = Var("bx"), Var("tx")
    i = bx * block + tx
    body = store(C, i, load(A, i) + load(B, i))
    blocks = -(-n // block)
    if n % block:
        body = IfThenElse(i < n, body)
    body = bind(bx, blocks, "blockIdx.x", bind(tx, block, "threadIdx.x", body))
    return Kernel(
        PrimFunc("vector_add", (A, B, C), body),
        lambda rng: {"A": _rand(n, rng), "B": _rand(n, rng)},
        lambda x: {"C": x["A"] + x["B"]},
        {"C": ((n,), "float32")},
        expect=(
            "blockIdx.x",
            "threadIdx.x",
            "__launch_bounds__(128)",
            "__restrict__",
            'extern "C" __global__',
        ),
    )


def vector_add_dynamic(block=128) -> Kernel:
    """A symbolic length n: the grid is ceil(n / block), computed on the host from n."""
    n = Var("n")
    A, B, C = buf("A", n), buf("B", n), buf("C", n)
    bx, tx = Var("bx"), Var("tx")
    i = bx * block + tx
    body = IfThenElse(i < n, store(C, i, load(A, i) * f32(2.0) + load(B, i)))
    body = bind(
        bx, FloorDiv(n + (block - 1), c(block)), "blockIdx.x", bind(tx, block, "threadIdx.x", body)
    )
    size = 1000
    return Kernel(
        PrimFunc("vector_add_dynamic", (A, B, C, n), body),
        lambda rng: {"A": _rand(size, rng), "B": _rand(size, rng), "n": size},
        lambda x: {"C": x["A"] * 2 + x["B"]},
        {"C": ((size,), "float32")},
    )


def math_kernel(n=777, block=256) -> Kernel:
    """Intrinsics and integer floor division/modulo on negative numbers."""
    A, I = buf("A", n), buf("I", n, "int32")
    B, J, K = buf("B", n), buf("J", n, "int32"), buf("K", n, "int32")
    bx, tx = Var("bx"), Var("tx")
    i = bx * block + tx
    a = load(A, i)
    value = (
        Call("float32", "exp", (a * f32(0.5),))
        + Call("float32", "sigmoid", (a,))
        + Call("float32", "tanh", (a,))
        + Call("float32", "erf", (a,))
        + Call("float32", "log", (Call("float32", "abs", (a,)) + f32(1.0),))
        + Call("float32", "sqrt", (Call("float32", "abs", (a,)),))
        + Max(a, f32(0.0))
    )
    v = load(I, i)
    body = IfThenElse(
        i < n,
        Seq(
            (
                store(B, i, value),
                store(J, i, FloorDiv(v, c(7))),
                store(K, i, FloorMod(v, c(-5)) + FloorMod(v, c(7))),
            )
        ),
    )
    body = bind(bx, -(-n // block), "blockIdx.x", bind(tx, block, "threadIdx.x", body))

    def reference(x):
        a, v = x["A"].astype(np.float64), x["I"]
        from math import erf

        b = (
            np.exp(a * 0.5)
            + 1 / (1 + np.exp(-a))
            + np.tanh(a)
            + np.vectorize(erf)(a)
            + np.log(np.abs(a) + 1)
            + np.sqrt(np.abs(a))
            + np.maximum(a, 0)
        )
        return {"B": b.astype(np.float32), "J": v // 7, "K": v % -5 + v % 7}

    return Kernel(
        PrimFunc("math_kernel", (A, I, B, J, K), body),
        lambda rng: {"A": _rand(n, rng), "I": rng.integers(-1000, 1000, n).astype(np.int32)},
        reference,
        {"B": ((n,), "float32"), "J": ((n,), "int32"), "K": ((n,), "int32")},
        rtol=1e-4,
        expect=("tf_floordiv<int>", "tf_floormod<int>", "__expf", "erff", "fmaxf"),
    )


def matmul_shared(n=256, tile=16) -> Kernel:
    """C = A @ B with 16x16 tiles of A and B staged in shared memory (syncs from the pass)."""
    A, B, C = buf("A", n * n), buf("B", n * n), buf("C", n * n)
    As, Bs = (
        buf("A_shared", tile * tile, scope="shared"),
        buf("B_shared", tile * tile, scope="shared"),
    )
    acc = buf("acc", 1, scope="local")
    bx, by, tx, ty, ko, ki = (Var(x) for x in ("bx", "by", "tx", "ty", "ko", "ki"))
    row, col = by * tile + ty, bx * tile + tx
    inner = Seq(
        (
            store(As, ty * tile + tx, load(A, row * n + ko * tile + tx)),
            store(Bs, ty * tile + tx, load(B, (ko * tile + ty) * n + col)),
            loop(
                ki,
                tile,
                store(
                    acc, c(0), load(acc, c(0)) + load(As, ty * tile + ki) * load(Bs, ki * tile + tx)
                ),
                LoopKind.UNROLLED,
            ),
        )
    )
    per_thread = Allocate(
        acc,
        c(1),
        Seq(
            (
                store(acc, c(0), f32(0.0)),
                loop(ko, n // tile, inner),
                store(C, row * n + col, load(acc, c(0))),
            )
        ),
    )
    body = bind(
        by,
        n // tile,
        "blockIdx.y",
        bind(
            bx,
            n // tile,
            "blockIdx.x",
            Allocate(
                As,
                c(tile * tile),
                Allocate(
                    Bs,
                    c(tile * tile),
                    bind(ty, tile, "threadIdx.y", bind(tx, tile, "threadIdx.x", per_thread)),
                ),
            ),
        ),
    )
    body = insert_thread_syncs(body)
    return Kernel(
        PrimFunc("matmul_shared", (A, B, C), body),
        lambda rng: {"A": _rand(n * n, rng), "B": _rand(n * n, rng)},
        lambda x: {"C": (x["A"].reshape(n, n).astype(np.float64) @ x["B"].reshape(n, n)).ravel()},
        {"C": ((n * n,), "float32")},
        rtol=1e-4,
        expect=("__shared__", "__syncthreads();", "#pragma unroll", "blockIdx.y", "threadIdx.y"),
    )


def two_stages(n=128 * 40) -> Kernel:
    """Sibling stages under one block with different threadIdx.x extents (128 and 64)."""
    A, B = buf("A", n), buf("B", n // 2)
    S = buf("S", 128, scope="shared")
    bx, t1, t2 = Var("bx"), Var("t1"), Var("t2")
    body = bind(
        bx,
        n // 128,
        "blockIdx.x",
        Allocate(
            S,
            c(128),
            Seq(
                (
                    bind(t1, 128, "threadIdx.x", store(S, t1, load(A, bx * 128 + t1))),
                    bind(
                        t2,
                        64,
                        "threadIdx.x",
                        store(B, bx * 64 + t2, load(S, t2 * 2) + load(S, t2 * 2 + 1)),
                    ),
                )
            ),
        ),
    )
    body = insert_thread_syncs(body)
    return Kernel(
        PrimFunc("two_stages", (A, B), body),
        lambda rng: {"A": _rand(n, rng)},
        lambda x: {"B": x["A"].reshape(-1, 2).sum(axis=1)},
        {"B": ((n // 2,), "float32")},
        expect=("__syncthreads();", "if (t2 < 64)"),
    )


def local_registers(n=128 * 4 * 8) -> Kernel:
    """Each thread keeps 4 values in a local array indexed by unrolled loops."""
    A, B = buf("A", n), buf("B", n)
    acc = buf("acc", 4, scope="local")
    bx, tx, j, k = Var("bx"), Var("tx"), Var("j"), Var("k")
    base = (bx * 128 + tx) * 4
    body = Allocate(
        acc,
        c(4),
        Seq(
            (
                loop(j, 4, store(acc, j, load(A, base + j) * f32(2.0)), LoopKind.UNROLLED),
                loop(k, 4, store(B, base + k, load(acc, k) + load(acc, 3 - k)), LoopKind.UNROLLED),
            )
        ),
    )
    body = bind(bx, n // 512, "blockIdx.x", bind(tx, 128, "threadIdx.x", body))

    def reference(x):
        a = x["A"].reshape(-1, 4) * 2
        return {"B": (a + a[:, ::-1]).ravel()}

    return Kernel(
        PrimFunc("local_registers", (A, B), body),
        lambda rng: {"A": _rand(n, rng)},
        reference,
        {"B": ((n,), "float32")},
        expect=("float acc[4];", "#pragma unroll"),
    )


def vector4(n=128 * 4 * 16, offset=0) -> Kernel:
    """B[4i:4i+4] = A[4i:4i+4] * 2 + 1 as Ramp/Broadcast vectors: float4 when aligned.

    With `offset`, the base is 4i + offset: not provably aligned, so per lane.
    """
    A, B = buf("A", n + 4), buf("B", n + 4)
    bx, tx = Var("bx"), Var("tx")
    base = (bx * 128 + tx) * 4 + offset
    ramp = Ramp(base, c(1), 4)
    body = store(B, ramp, load(A, ramp) * Broadcast(f32(2.0), 4) + Broadcast(f32(1.0), 4))
    body = bind(bx, n // 512, "blockIdx.x", bind(tx, 128, "threadIdx.x", body))

    def reference(x):
        b = x["B_init"].copy()
        b[offset : offset + n] = x["A"][offset : offset + n] * 2 + 1
        return {"B": b}

    return Kernel(
        PrimFunc(f"vector4_{offset}", (A, B), body),
        lambda rng: {"A": _rand(n + 4, rng), "B_init": np.zeros(n + 4, np.float32)},
        reference,
        {"B": ((n + 4,), "float32")},
        expect=("float4",) if offset == 0 else (),
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

    body = bind(i, rows, "blockIdx.x", body)
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
    body = bind(b, blocks, "blockIdx.x", Allocate(red, c(1), loops))
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
    body = insert_thread_syncs(body)
    return Kernel(
        PrimFunc("guarded_reduce", (A, B), body),
        lambda rng: {"A": _rand(rows * 128, rng)},
        lambda x: {"B": (x["A"].reshape(rows, 128)[:, :extent] ** 2).sum(axis=1)},
        {"B": ((rows,), "float32")},
    )


def let_and_select(n=1000, block=128) -> Kernel:
    """LetStmt, Select, Cast and a Let expression."""
    A, B = buf("A", n), buf("B", n)
    bx, tx, x, y = Var("bx"), Var("tx"), Var("x", "float32"), Var("y", "float32")
    from tensorforge.te.expr import Let

    i = bx * block + tx
    value = Select(x > f32(0.0), x * f32(3.0), Let(y, x * x, y + Cast("float32", i)))
    body = IfThenElse(i < n, LetStmt(x, load(A, i), store(B, i, value)))
    body = bind(bx, -(-n // block), "blockIdx.x", bind(tx, block, "threadIdx.x", body))

    def reference(data):
        a = data["A"]
        return {"B": np.where(a > 0, a * 3, a * a + np.arange(n, dtype=np.float32))}

    return Kernel(
        PrimFunc("let_and_select", (A, B), body),
        lambda rng: {"A": _rand(n, rng)},
        reference,
        {"B": ((n,), "float32")},
    )


def big_shared(n=64 * 1024) -> Kernel:
    """64 KiB of shared memory per block: above the static limit, so dynamic shared memory."""
    A, B = buf("A", n), buf("B", n)
    S = buf("S", 16384, scope="shared")
    bx, tx, j = Var("bx"), Var("tx"), Var("j")
    body = bind(
        bx,
        n // 16384,
        "blockIdx.x",
        Allocate(
            S,
            c(16384),
            Seq(
                (
                    bind(
                        tx,
                        256,
                        "threadIdx.x",
                        loop(j, 64, store(S, j * 256 + tx, load(A, bx * 16384 + j * 256 + tx))),
                    ),
                    bind(
                        tx,
                        256,
                        "threadIdx.x",
                        loop(
                            j,
                            64,
                            store(B, bx * 16384 + j * 256 + tx, load(S, 16383 - (j * 256 + tx))),
                        ),
                    ),
                )
            ),
        ),
    )
    body = insert_thread_syncs(body)
    return Kernel(
        PrimFunc("big_shared", (A, B), body),
        lambda rng: {"A": _rand(n, rng)},
        lambda x: {"B": x["A"].reshape(-1, 16384)[:, ::-1].ravel()},
        {"B": ((n,), "float32")},
        expect=("extern __shared__",),
    )


def vector_misc(n=1000, block=64) -> Kernel:
    """Per-lane vector code: a predicated store, a strided gather, a vector let, VectorReduce."""
    from tensorforge.ir.expr import VectorReduce
    from tensorforge.te import expr as TE

    groups = -(-n // 4)
    threads = -(-groups // block) * block
    A, B, C = buf("A", 8 * threads), buf("B", n), buf("C", n // 4)  # every thread gathers
    bx, tx, v = Var("bx"), Var("tx"), Var("v", "float32x4")
    i = bx * block + tx  # one group of 4 outputs per thread
    lanes = Ramp(i * 4, c(1), 4)
    in_range = TE.LT(lanes, Broadcast(c(n), 4))
    gather = load(A, Ramp(i * 8, c(2), 4))  # A[8i], A[8i+2], ...
    body = Seq(
        (
            LetStmt(v, gather, store(B, lanes, v * v + Broadcast(f32(1.0), 4), in_range)),
            IfThenElse(i < n // 4, store(C, i, VectorReduce("add", load(A, Ramp(i * 4, c(1), 4))))),
        )
    )
    body = bind(bx, threads // block, "blockIdx.x", bind(tx, block, "threadIdx.x", body))

    def reference(x):
        a = x["A"]
        return {"B": a[0 : 2 * n : 2] ** 2 + 1, "C": a[:n].reshape(-1, 4).sum(axis=1)}

    return Kernel(
        PrimFunc("vector_misc", (A, B, C), body),
        lambda rng: {"A": _rand(8 * threads, rng)},
        reference,
        {"B": ((n,), "float32"), "C": ((n // 4,), "float32")},
        expect=("const float4 A_v",),
    )


def half_kernel(n=512, block=128) -> Kernel:
    """float16 arithmetic and an intrinsic (computed through float)."""
    A, B = buf("A", n, "float16"), buf("B", n, "float16")
    bx, tx = Var("bx"), Var("tx")
    i = bx * block + tx
    a = load(A, i)
    value = a * a + Call("float16", "exp", (a,)) + Const(1.0, "float16")
    body = bind(bx, n // block, "blockIdx.x", bind(tx, block, "threadIdx.x", store(B, i, value)))

    def reference(x):
        a = x["A"].astype(np.float32)
        return {"B": (a * a + np.exp(a) + 1).astype(np.float16)}

    return Kernel(
        PrimFunc("half_kernel", (A, B), body),
        lambda rng: {"A": (rng.standard_normal(n) * 0.5).astype(np.float16)},
        reference,
        {"B": ((n,), "float16")},
        rtol=1e-2,
        expect=("#include <cuda_fp16.h>",),
    )


def int64_kernel(n=300, block=128) -> Kernel:
    """int64 loop variables and buffers: literals carry LL, floor division works on them."""
    A, B = buf("A", n, "int64"), buf("B", n, "int64")
    bx, tx = Var("bx", "int64"), Var("tx", "int64")
    i = bx * Const(block, "int64") + tx
    body = IfThenElse(
        i < Const(n, "int64"),
        store(B, i, FloorDiv(load(A, i), Const(3, "int64")) + Max(load(A, i), Const(0, "int64"))),
    )
    body = bind(bx, -(-n // block), "blockIdx.x", bind(tx, block, "threadIdx.x", body))
    return Kernel(
        PrimFunc("int64_kernel", (A, B), body),
        lambda rng: {"A": rng.integers(-(2**40), 2**40, n)},
        lambda x: {"B": x["A"] // 3 + np.maximum(x["A"], 0)},
        {"B": ((n,), "int64")},
        expect=("tf_floordiv<long long>", "3LL"),
    )


def all_kernels() -> dict[str, Callable[[], Kernel]]:
    """Every kernel, by test id (the runtime tests run each)."""
    return {
        "vector_add": vector_add,
        "vector_add_guard": lambda: vector_add(1000),
        "vector_add_dynamic": vector_add_dynamic,
        "math": math_kernel,
        "matmul_shared": matmul_shared,
        "two_stages": two_stages,
        "local_registers": local_registers,
        "float4": vector4,
        "float4_unaligned": lambda: vector4(offset=1),
        "sum_128": lambda: row_reduce(extent=128),
        "sum_100": lambda: row_reduce(extent=100),
        "sum_32": lambda: row_reduce(extent=32),
        "sum_20": lambda: row_reduce(extent=20),
        "sum_1024": lambda: row_reduce(extent=1024),
        "argmax_128": lambda: row_reduce(extent=128, reducer="argmax"),
        "argmax_100": lambda: row_reduce(extent=100, reducer="argmax"),
        "block_x_4x100": lambda: block_reduce(4, 100, "x"),
        "block_x_4x128": lambda: block_reduce(4, 128, "x"),
        "block_x_8x16": lambda: block_reduce(8, 16, "x"),
        "block_y_4x100": lambda: block_reduce(4, 100, "y"),
        "guarded_reduce": guarded_reduce,
        "let_and_select": let_and_select,
        "big_shared": big_shared,
        "vector_misc": vector_misc,
        "half": half_kernel,
        "int64": int64_kernel,
    }


# -- compiling with the local nvcc ------------------------------------------------------------

NVCC = shutil.which("nvcc")


def nvcc_ptx(text: str, tmp_path) -> str:
    source = tmp_path / "kernel.cu"
    source.write_text(text)
    out = tmp_path / "kernel.ptx"
    result = subprocess.run(
        [NVCC, "-arch=sm_90", "--ptx", "-o", str(out), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"nvcc failed:\n{result.stderr}\n--- source ---\n{text}"
    return out.read_text()


def generate(func: PrimFunc):
    return CUDACodegen().generate(func, TARGET)


# -- tests: every kernel generates, says what it should, and compiles -------------------------


@pytest.mark.parametrize("name", list(all_kernels()))
def test_kernel_generates_and_compiles(name, tmp_path):
    kernel = all_kernels()[name]()
    source = generate(kernel.func)
    assert source.target == "cuda"
    assert source.entry in source.text
    assert "__launch_bounds__(" in source.text and "__restrict__" in source.text
    for expected in kernel.expect:
        assert expected in source.text, f"{expected!r} missing from:\n{source.text}"
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    ptx = nvcc_ptx(source.text, tmp_path)
    assert f".entry {source.entry}" in ptx


def test_elementwise_launch_and_params():
    source = generate(vector_add(1000).func)
    assert source.launch.grid == (8, 1, 1)
    assert source.launch.block == (128, 1, 1)
    assert source.launch.shared_bytes == 0
    assert [(p.name, p.kind, p.dtype, p.shape) for p in source.params] == [
        ("A", "buffer", "float32", (1000,)),
        ("B", "buffer", "float32", (1000,)),
        ("C", "buffer", "float32", (1000,)),
    ]
    assert "const float* __restrict__ A" in source.text  # read-only inputs
    assert (
        "float* __restrict__ C" in source.text and "const float* __restrict__ C" not in source.text
    )
    assert "const int bx = (int)blockIdx.x;" in source.text
    assert "if (((bx * 128) + tx) < 1000)" in source.text


def test_symbolic_grid_is_a_host_expression():
    source = generate(vector_add_dynamic().func)
    assert source.launch.grid == ("((n + 127) // 128)", 1, 1)
    n_param = next(p for p in source.params if p.name == "n")
    assert n_param.kind == "scalar" and n_param.bound_from_shape
    assert [p.shape for p in source.params if p.kind == "buffer"] == [("n",)] * 3


def test_bare_symbolic_grid_is_the_param_name():
    n = Var("n")
    A = buf("A", n)
    bx = Var("bx")
    func = PrimFunc("f", (A, n), bind(bx, n, "blockIdx.x", store(A, bx, f32(1.0))))
    assert generate(func).launch.grid == ("n", 1, 1)


def test_float4_load_and_store():
    text = generate(vector4().func).text
    assert "*reinterpret_cast<const float4*>(&A[" in text
    assert "*reinterpret_cast<float4*>(&B[" in text and "make_float4(" in text
    assert "aligned" in text  # the comment saying why the wide access is safe


def test_unaligned_ramp_falls_back_to_lanes():
    source = generate(vector4(offset=1).func)
    assert "float4" not in source.text
    assert source.extra["vector_alignment"] == {}
    assert generate(vector4().func).extra["vector_alignment"] == {"A": 16, "B": 16}


def test_shared_matmul_syncs_and_shared_arrays():
    text = generate(matmul_shared().func).text
    assert "__shared__ __align__(16) float A_shared[256];" in text
    assert text.count("__syncthreads();") == 2  # before overwriting the tiles, and before reading
    assert "float acc[1];" in text


def test_sibling_stage_guard_keeps_the_barrier_outside():
    text = generate(two_stages().func).text
    sync_line = next(line for line in text.splitlines() if "__syncthreads" in line)
    guard_line = next(line for line in text.splitlines() if "if (t2 < 64)" in line)
    assert text.index(sync_line) < text.index(guard_line)
    assert len(sync_line) - len(sync_line.lstrip()) <= len(guard_line) - len(guard_line.lstrip())


def test_guarded_allreduce_runs_in_all_threads():
    lines = generate(guarded_reduce().func).text.splitlines()
    reduce_line = next(line for line in lines if "// ThreadAllReduce" in line)
    k_line = next(line for line in lines if "const int k = " in line)
    # a divergent `if (k < 100)` around the shuffles and barriers would hang the block
    assert _indent(reduce_line) == _indent(k_line)
    assert any("red_active" in line for line in lines)  # threads beyond 100 add the identity
    store_line = next(line for line in lines if "B[i] = red[0];" in line)
    assert lines.index(store_line) > lines.index(reduce_line)
    assert any(line.strip() == "if (k < 100) {" for line in lines[lines.index(reduce_line) :])


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


@pytest.mark.parametrize(
    "make, strategy",
    [
        (lambda: row_reduce(extent=32), "warp"),
        (lambda: row_reduce(extent=20), "warp"),
        (lambda: row_reduce(extent=128), "warps+shared"),
        (lambda: row_reduce(extent=100), "warps+shared"),
        (lambda: block_reduce(8, 16, "x"), "warp"),
        (lambda: block_reduce(4, 128, "x"), "warps+shared"),
        (lambda: block_reduce(4, 100, "x"), "shared-tree"),
        (lambda: block_reduce(4, 100, "y"), "shared-tree"),
    ],
)
def test_allreduce_strategy(make, strategy):
    assert f", {strategy}\n" in generate(make().func).text


def test_argmax_combines_both_values():
    text = generate(row_reduce(extent=100, reducer="argmax").func).text
    assert "__shfl_down_sync" in text
    assert "const int red_new" in text and "const float red_new" in text  # tuple combine via temps
    assert "B_i[i] = red_i[0];" in text


def test_dynamic_shared_memory_above_48k():
    source = generate(big_shared().func)
    assert source.launch.shared_bytes == 65536
    assert "extern __shared__ __align__(16) unsigned char tf_smem[];" in source.text
    assert "reinterpret_cast<float*>(tf_smem + 0)" in source.text


# -- errors -----------------------------------------------------------------------------------


def _threads(extent_x, extent_y=1, extent_z=1):
    A = buf("A", 1)
    tx, ty, tz = Var("tx"), Var("ty"), Var("tz")
    body = store(A, c(0), f32(1.0))
    body = bind(
        tz,
        extent_z,
        "threadIdx.z",
        bind(ty, extent_y, "threadIdx.y", bind(tx, extent_x, "threadIdx.x", body)),
    )
    return PrimFunc("f", (A,), body)


def test_too_many_threads_names_the_axis():
    with pytest.raises(BuildError, match=r"'tx' bound to threadIdx.x has extent 1025"):
        generate(_threads(1025))


def test_too_many_threads_in_the_block():
    with pytest.raises(BuildError, match=r"32x33x1 = 1056 threads exceeds the 1024.*'tx'.*'ty'"):
        generate(_threads(32, 33))


def test_block_z_limit():
    with pytest.raises(BuildError, match=r"'tz' bound to threadIdx.z has extent 65"):
        generate(_threads(1, 1, 65))


def test_grid_y_limit():
    A, by = buf("A", 1), Var("by")
    func = PrimFunc("f", (A,), bind(by, 70000, "blockIdx.y", store(A, c(0), f32(1.0))))
    with pytest.raises(BuildError, match=r"'by' bound to blockIdx.y has extent 70000"):
        generate(func)


def test_symbolic_thread_extent_is_rejected():
    n, A, tx = Var("n"), buf("A", 1), Var("tx")
    func = PrimFunc("f", (A, n), bind(tx, n, "threadIdx.x", store(A, c(0), f32(1.0))))
    with pytest.raises(BuildError, match=r"'tx' is bound to threadIdx.x with a symbolic extent"):
        generate(func)


def test_extent_from_a_loop_variable_is_rejected():
    A, i, bx = buf("A", 64), Var("i"), Var("bx")
    body = loop(i, 4, bind(bx, i + 1, "blockIdx.x", store(A, bx, f32(1.0))))
    with pytest.raises(BuildError, match=r"'bx' bound to blockIdx.x .* depends on 'i'"):
        generate(PrimFunc("f", (A,), body))


def test_nested_same_tag_is_rejected():
    A, a, b = buf("A", 1), Var("a"), Var("b")
    body = bind(a, 4, "threadIdx.x", bind(b, 4, "threadIdx.x", store(A, c(0), f32(1.0))))
    with pytest.raises(BuildError, match="bound twice in nested loops 'a' and 'b'"):
        generate(PrimFunc("f", (A,), body))


def test_global_allocate_in_kernel_is_rejected():
    A, T, tx = buf("A", 4), buf("T", 4), Var("tx")
    body = bind(tx, 4, "threadIdx.x", Allocate(T, c(4), store(A, tx, f32(1.0))))
    with pytest.raises(BuildError, match="'T' in scope 'global'.*'local'.*'shared'"):
        generate(PrimFunc("f", (A,), body))


def test_shared_allocate_needs_constant_extent():
    n, A, S, tx = Var("n"), buf("A", 4), buf("S", 4, scope="shared"), Var("tx")
    body = bind(tx, 4, "threadIdx.x", Allocate(S, n, store(A, tx, f32(1.0))))
    with pytest.raises(BuildError, match="'S' in scope 'shared' has extent n"):
        generate(PrimFunc("f", (A, n), body))


def test_sibling_symbolic_extents_must_agree():
    n, m, A = Var("n"), Var("m"), buf("A", 4)
    a, b = Var("a"), Var("b")
    body = Seq(
        (
            bind(a, n, "blockIdx.x", store(A, a, f32(1.0))),
            bind(b, m, "blockIdx.x", store(A, b, f32(2.0))),
        )
    )
    with pytest.raises(BuildError, match="blockIdx.x is bound by loops of different extents"):
        generate(PrimFunc("f", (A, n, m), body))


def test_too_much_shared_memory():
    A, S, tx = buf("A", 4), buf("S", 70000, scope="shared"), Var("tx")
    body = bind(tx, 4, "threadIdx.x", Allocate(S, c(70000), store(A, tx, load(S, tx))))
    with pytest.raises(BuildError, match="280000 bytes of shared memory"):
        generate(PrimFunc("f", (A,), body))


# -- the sync pass: before / expected ---------------------------------------------------------


def test_sync_between_shared_write_and_read():
    S, A, B = buf("S", 64, scope="shared"), buf("A", 64), buf("B", 64)
    t1, t2 = Var("t1"), Var("t2")
    write = bind(t1, 64, "threadIdx.x", store(S, t1, load(A, t1)))
    read = bind(t2, 64, "threadIdx.x", store(B, t2, load(S, 63 - t2)))
    before = Allocate(S, c(64), Seq((write, read)))
    expected = Allocate(S, c(64), Seq((write, Seq((Sync(), read)))))
    assert insert_thread_syncs(before) == expected


def test_no_sync_without_shared_memory():
    A, B, t = buf("A", 64), buf("B", 64), Var("t")
    before = bind(t, 64, "threadIdx.x", Seq((store(A, t, f32(1.0)), store(B, t, load(A, t)))))
    assert insert_thread_syncs(before) is before


def test_sync_after_divergent_if_not_inside():
    S, A, B = buf("S", 64, scope="shared"), buf("A", 64), buf("B", 64)
    t = Var("t")
    cond_write = IfThenElse(t < 32, Seq((store(S, t, load(A, t)), store(B, t, load(S, t + 1)))))
    read = store(B, t + 32, load(S, 63 - t))
    before = bind(t, 64, "threadIdx.x", Seq((cond_write, read)))
    expected = bind(t, 64, "threadIdx.x", Seq((cond_write, Seq((Sync(), read)))))
    assert insert_thread_syncs(before) == expected


def test_sync_inside_uniform_if():
    S, A, B = buf("S", 64, scope="shared"), buf("A", 64), buf("B", 64)
    bx, t = Var("bx"), Var("t")
    write, read = store(S, t, load(A, t)), store(B, t, load(S, 63 - t))
    before = bind(
        bx, 2, "blockIdx.x", bind(t, 64, "threadIdx.x", IfThenElse(bx < 1, Seq((write, read))))
    )
    expected = bind(
        bx,
        2,
        "blockIdx.x",
        bind(t, 64, "threadIdx.x", IfThenElse(bx < 1, Seq((write, Seq((Sync(), read)))))),
    )
    assert insert_thread_syncs(before) == expected


def test_loop_carried_sync_at_top_of_body():
    """Tiles rewritten each iteration: wait for last iteration's readers, then for the writers."""
    S, A, B = buf("S", 64, scope="shared"), buf("A", 64 * 8), buf("B", 64)
    t, k = Var("t"), Var("k")
    write = store(S, t, load(A, k * 64 + t))
    read = store(B, t, load(B, t) + load(S, 63 - t))
    before = bind(t, 64, "threadIdx.x", loop(k, 8, Seq((write, read))))
    expected = bind(
        t, 64, "threadIdx.x", loop(k, 8, Seq((Seq((Sync(), write)), Seq((Sync(), read)))))
    )
    assert insert_thread_syncs(before) == expected


def test_own_element_needs_no_sync():
    """Each thread reads back the element it wrote itself (same thread-dependent index)."""
    S, A, B = buf("S", 64, scope="shared"), buf("A", 64), buf("B", 64)
    t = Var("t")
    before = bind(
        t, 64, "threadIdx.x", Seq((store(S, t, load(A, t)), store(B, t, load(S, t) * f32(2.0))))
    )
    assert insert_thread_syncs(before) == before


def test_same_index_in_every_thread_still_syncs():
    S, A, B = buf("S", 64, scope="shared"), buf("A", 64), buf("B", 64)
    t = Var("t")
    write, read = store(S, c(0), load(A, t)), store(B, t, load(S, c(0)))
    before = bind(t, 64, "threadIdx.x", Seq((write, read)))
    assert insert_thread_syncs(before) == bind(
        t, 64, "threadIdx.x", Seq((write, Seq((Sync(), read))))
    )


def test_existing_sync_is_respected():
    S, A, B = buf("S", 64, scope="shared"), buf("A", 64), buf("B", 64)
    t = Var("t")
    before = bind(
        t, 64, "threadIdx.x", Seq((store(S, t, load(A, t)), Sync(), store(B, t, load(S, 63 - t))))
    )
    assert insert_thread_syncs(before) == before


def test_sync_before_let_reading_shared():
    S, A, B = buf("S", 64, scope="shared"), buf("A", 64), buf("B", 64)
    t, x = Var("t"), Var("x", "float32")
    write = store(S, t, load(A, t))
    let = LetStmt(x, load(S, 63 - t), store(B, t, x))
    before = bind(t, 64, "threadIdx.x", Seq((write, let)))
    expected = bind(t, 64, "threadIdx.x", Seq((write, Seq((Sync(), let)))))
    assert insert_thread_syncs(before) == expected


def test_double_buffer_attr_is_passed_through():
    from tensorforge.ir.stmt import Attr

    S, A, B = buf("S", 64, scope="shared"), buf("A", 64), buf("B", 64)
    t = Var("t")
    write, read = store(S, t, load(A, t)), store(B, t, load(S, 63 - t))
    before = bind(t, 64, "threadIdx.x", Attr("double_buffer", S, Seq((write, read))))
    expected = bind(
        t, 64, "threadIdx.x", Attr("double_buffer", S, Seq((write, Seq((Sync(), read)))))
    )
    assert insert_thread_syncs(before) == expected


def test_source_without_gpu_or_pycuda():
    from tensorforge.runtime.cuda_exec import CUDAExecutable

    source = generate(vector_add().func)
    assert CUDAExecutable(source, TARGET).get_source("cuda") == source.text


def test_grid_expression_is_evaluated_from_scalar_args():
    from tensorforge.runtime.cuda_exec import CUDAExecutable

    source = generate(vector_add_dynamic().func)
    executable = CUDAExecutable(source, TARGET)
    assert [entry([0, 0, 0, 1000]) for entry in executable._grid] == [8, 1, 1]
    assert [entry([0, 0, 0, 1024]) for entry in executable._grid] == [8, 1, 1]
    assert [entry([0, 0, 0, 1025]) for entry in executable._grid] == [9, 1, 1]
