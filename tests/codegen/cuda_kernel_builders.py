"""CUDA kernels built by hand as lowered PrimFuncs, each with a numpy reference and its inputs
(cross-thread reductions: cuda_reduce_kernels.py; the IR shorthands: tests/ir/builders.py).

tests/codegen/test_cuda_codegen.py generates and compiles each (no GPU needed);
tests/runtime/test_cuda_runtime.py runs them on a GPU against numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tensorforge.ir.expr import Broadcast, Ramp
from tensorforge.ir.passes.guard_thread_extents import guard_thread_extents
from tensorforge.ir.passes.insert_thread_syncs import insert_thread_syncs
from tensorforge.ir.stmt import (
    Allocate,
    IfThenElse,
    LetStmt,
    LoopKind,
    PrimFunc,
    Seq,
)
from tensorforge.target import Target
from tensorforge.te.expr import (
    Call,
    Cast,
    Const,
    FloorDiv,
    FloorMod,
    Max,
    Select,
    Var,
)
from tests.ir.builders import (
    bind,
    buf,
    c,
    f32,
    load,
    loop,
    store,
)

TARGET = Target("cuda -arch=sm_90")


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
    body = guard_thread_extents(insert_thread_syncs(body))
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
    from tests.codegen.cuda_reduce_kernels import block_reduce, guarded_reduce, row_reduce

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
