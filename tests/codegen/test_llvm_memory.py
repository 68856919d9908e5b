"""The llvm backend: vector loads and stores (masked, gathers, scatters, reductions) and
allocations (stack or heap)."""

import numpy as np
import pytest

from tensorforge.codegen.llvm import LLVMCodegen
from tensorforge.ir.expr import Broadcast, Buffer, VectorReduce
from tensorforge.ir.stmt import (
    Allocate,
    PrimFunc,
    Seq,
)
from tensorforge.te.expr import (
    LT,
    Add,
    Cast,
    FloorDiv,
    Max,
    Min,
    Mul,
    Sub,
    Var,
)
from tests.codegen.llvm_builders import (
    TARGET,
    aligned,
    c,
    load,
    loop,
    ramp,
    run,
    store,
)


# -- vector memory --------------------------------------------------------------------------------
def test_masked_vector_load_and_store(rng):
    # B[i*8 + l] = A[i*8 + l] * 2 for the lanes where i*8 + l < n; n = 21 is not a multiple of 8
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    idx = ramp(i * c(8), 8)
    mask = LT(idx, Broadcast(n, 8))
    body = loop(
        i,
        FloorDiv(Add(n, c(7)), c(8)),
        store(B, idx, Mul(load(A, idx, mask), Broadcast(c(2.0, "float32"), 8)), mask),
    )
    size = 21
    a = aligned(rng.standard_normal(24).astype(np.float32))
    b = aligned(np.full(24, -7.0, np.float32))
    exe = run(PrimFunc("masked", (A, B, n), body), a, b, size)
    np.testing.assert_array_equal(b[:size], a[:size] * 2)
    np.testing.assert_array_equal(b[size:], -7.0)  # lanes past n untouched
    assert "llvm.masked" in LLVMCodegen().generate(PrimFunc("masked", (A, B, n), body), TARGET).text
    assert exe is not None


@pytest.mark.parametrize(
    "target, pieces",
    [("llvm -mcpu=skylake-avx512", ["v16f32"]), ("llvm -mcpu=znver3", ["v8f32", "v8f32"])],
)
def test_masked_accesses_come_in_register_sized_pieces(target, pieces):
    """A 16-lane masked load and store: one zmm piece with AVX-512 (halves cut each access in
    two, each with its own mask test and branch: softmax rows of 197 took 1.7x as long), two
    ymm pieces with AVX2 (a wider masked access read whole all-false registers there)."""
    import tensorforge as tf

    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    idx = ramp(i * c(16), 16)
    mask = LT(idx, Broadcast(n, 16))
    body = loop(i, FloorDiv(Add(n, c(15)), c(16)), store(B, idx, load(A, idx, mask), mask))
    text = LLVMCodegen().generate(PrimFunc("masked", (A, B, n), body), tf.Target(target)).text
    calls = [line for line in text.splitlines() if " call " in line]
    for kind in ("load", "store"):
        used = [t for line in calls for t in ("v16f32", "v8f32") if f"masked.{kind}.{t}." in line]
        assert used == pieces, (kind, used)


def test_a_mask_known_lane_by_lane_is_plain_accesses_of_its_lanes(rng):
    """A register tile's tail row, `B[ramp(48, 1, 16)] = A[...] if ramp(48, 1, 16) < 56`: a
    plain 8-lane load and store, no masked intrinsic (one on a stack tile kept it out of
    registers: conv2d at 56 columns 2.5x slower on AVX-512); lanes off are not touched."""
    import tensorforge as tf
    from tensorforge.codegen.llvm_memory import known_mask_pieces

    assert known_mask_pieces([True] * 8 + [False] * 8) == [(0, 8, True), (8, 8, False)]
    on = [False, True, True, True, True, True, False, False]
    assert known_mask_pieces(on) == [(0, 1, False), (1, 4, True), (5, 1, True), (6, 2, False)]
    A, B = Buffer("A", (c(64),), "float32"), Buffer("B", (c(64),), "float32")
    idx, mask = ramp(c(48), 16), LT(ramp(c(48), 16), Broadcast(c(56), 16))
    body = store(B, idx, Mul(load(A, idx, mask), Broadcast(c(2.0, "float32"), 16)), mask)
    func = PrimFunc("tail", (A, B), body)
    for target in ("llvm -mcpu=skylake-avx512", "llvm -mcpu=znver3"):
        assert "llvm.masked" not in LLVMCodegen().generate(func, tf.Target(target)).text
    a = aligned(rng.standard_normal(64).astype(np.float32))
    b = aligned(np.full(64, -7.0, np.float32))
    run(func, a, b)
    np.testing.assert_array_equal(b[48:56], a[48:56] * 2)
    np.testing.assert_array_equal(np.delete(b, range(48, 56)), -7.0)


def test_masked_scalar_store_and_load():
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), "int32"), Buffer("B", (n,), "int32")
    keep = LT(i, c(5))
    body = loop(i, n, store(B, i, Add(load(A, i, keep), c(1)), keep))
    a, b = aligned(np.arange(10, dtype=np.int32)), aligned(np.full(10, -1, np.int32))
    run(PrimFunc("mscalar", (A, B, n), body), a, b, 10)
    np.testing.assert_array_equal(b, [1, 2, 3, 4, 5, -1, -1, -1, -1, -1])


def test_gather_with_stride_2_and_scatter(rng):
    # B[i*8 + l] = A[(i*8 + l) * 2]: a strided gather; C[(i*8+l)*2] = B[...]: a scatter
    A, C = Buffer("A", (c(128),), "float32"), Buffer("C", (c(128),), "float32")
    B = Buffer("B", (c(64),), "float32")
    i = Var("i")
    strided = ramp(i * c(16), 8, stride=2)
    body = loop(
        i,
        8,
        Seq(
            (
                store(B, ramp(i * c(8), 8), load(A, strided)),
                store(C, strided, load(B, ramp(i * c(8), 8))),
            )
        ),
    )
    a = aligned(rng.standard_normal(128).astype(np.float32))
    b, cc = aligned(np.zeros(64, np.float32)), aligned(np.zeros(128, np.float32))
    run(PrimFunc("gather", (A, B, C), body), a, b, cc)
    np.testing.assert_array_equal(b, a[::2])
    np.testing.assert_array_equal(cc[::2], a[::2])
    np.testing.assert_array_equal(cc[1::2], 0)


@pytest.mark.parametrize("stride, lanes", [(2, 8), (3, 4), (4, 16)])
def test_a_strided_load_is_contiguous_loads_and_one_shuffle(stride, lanes, rng):
    # B[i*lanes + l] = A[(i*lanes + l) * stride]: the last vector ends on A's last element,
    # which a load of whole `stride * lanes` spans would pass
    n = 3 * lanes
    A = Buffer("A", (c((n - 1) * stride + 1),), "float32")
    B = Buffer("B", (c(n),), "float32")
    i = Var("i")
    body = loop(
        i,
        3,
        store(B, ramp(i * c(lanes), lanes), load(A, ramp(i * c(lanes * stride), lanes, stride))),
    )
    func = PrimFunc("strided", (A, B), body)
    text = LLVMCodegen().generate(func, TARGET).text
    assert "shufflevector" in text and "extractelement" not in text  # no lane-by-lane gather
    a = aligned(rng.standard_normal((n - 1) * stride + 1).astype(np.float32))
    b = aligned(np.zeros(n, np.float32))
    run(func, a, b)
    np.testing.assert_array_equal(b, a[::stride])


def test_masked_gather_and_scatter():
    A, B = Buffer("A", (c(16),), "int32"), Buffer("B", (c(16),), "int32")
    i = Var("i")
    idx = ramp(i * c(16), 8, stride=2)  # 0, 2, ..., 14
    mask = LT(idx, Broadcast(c(9), 8))
    func = PrimFunc("mgather", (A, B), loop(i, 1, store(B, idx, load(A, idx, mask), mask)))
    a, b = aligned(np.arange(16, dtype=np.int32) + 1), aligned(np.zeros(16, np.int32))
    run(func, a, b)
    want = np.zeros(16, np.int32)
    want[0:9:2] = a[0:9:2]
    np.testing.assert_array_equal(b, want)


@pytest.mark.parametrize("stride", [1, 3])
def test_uniform_mask_is_a_branch_around_the_load(stride, rng):
    # B[i*8 + l] = A[(i*8 + l) * stride] if i < 3 (one condition for every lane): the rows
    # past 3 read as zeros, and no masked access is emitted (contiguous or gathered)
    A, B = Buffer("A", (c(40 * stride),), "float32"), Buffer("B", (c(40),), "float32")
    i = Var("i")
    mask = Broadcast(LT(i, c(3)), 8)
    body = loop(
        i, 5, store(B, ramp(i * c(8), 8), load(A, ramp(i * c(8 * stride), 8, stride), mask))
    )
    func = PrimFunc("uniform", (A, B), body)
    a = aligned(rng.standard_normal(40 * stride).astype(np.float32))
    b = aligned(np.full(40, 7.0, np.float32))
    run(func, a, b)
    np.testing.assert_array_equal(b[:24], a[: 24 * stride : stride])
    np.testing.assert_array_equal(b[24:], 0.0)
    assert "llvm.masked" not in LLVMCodegen().generate(func, TARGET).text


@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_vector_reduce(op, dtype, rng):
    # S[0] = reduce over 8 lanes of (lane-wise reduce over rows), an rfactored reduction
    A, S = Buffer("A", (c(64),), dtype), Buffer("S", (c(1),), dtype)
    acc = Buffer("acc", (c(8),), dtype, scope="local")
    i = Var("i")
    combine = {"add": Add, "max": Max, "min": Min}[op]
    init = {
        "add": 0,
        "max": -1e30 if dtype == "float32" else -(2**31),
        "min": 1e30 if dtype == "float32" else 2**31 - 1,
    }[op]
    lanes = ramp(c(0), 8)
    body = Allocate(
        acc,
        c(8),
        Seq(
            (
                store(acc, lanes, Broadcast(c(init, dtype), 8)),
                loop(
                    i, 8, store(acc, lanes, combine(load(acc, lanes), load(A, ramp(i * c(8), 8))))
                ),
                store(S, c(0), VectorReduce(op, load(acc, lanes))),
            )
        ),
    )
    values = rng.standard_normal(64) * 100
    a = aligned(values.astype(dtype))
    s = aligned(np.zeros(1, dtype))
    run(PrimFunc(f"vreduce_{op}", (A, S), body), a, s)
    want = {"add": np.sum, "max": np.max, "min": np.min}[op](a.astype(np.float64))
    np.testing.assert_allclose(s[0], want, rtol=1e-5)


# -- allocation -----------------------------------------------------------------------------------
def test_allocate_local_is_an_alloca_and_global_is_heap(rng):
    n, i, j = Var("n"), Var("i"), Var("j")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    local = Buffer("tmp_local", (c(16),), "float32", scope="local")
    heap = Buffer("tmp_heap", (n,), "float32", scope="global")
    body = Seq(
        (
            Allocate(
                heap,
                n,
                Seq(
                    (
                        loop(i, n, store(heap, i, Mul(load(A, i), c(3.0, "float32")))),
                        loop(i, n, store(B, i, load(heap, i))),
                    )
                ),
            ),
            loop(
                i,
                FloorDiv(n, c(16)),
                Allocate(
                    local,
                    c(16),
                    Seq(
                        (
                            loop(j, 16, store(local, j, load(B, Add(Mul(i, c(16)), j)))),
                            loop(
                                j,
                                16,
                                store(
                                    B,
                                    Add(Mul(i, c(16)), j),
                                    Add(load(local, Sub(c(15), j)), c(1.0, "float32")),
                                ),
                            ),
                        )
                    ),
                ),
            ),
        )
    )
    func = PrimFunc("alloc", (A, B, n), body)
    text = LLVMCodegen().generate(func, TARGET).text
    assert "alloca [16 x float]" in text and "aligned_alloc" in text and '@"free"' in text
    a, b = aligned(rng.standard_normal(64).astype(np.float32)), aligned(np.zeros(64, np.float32))
    run(func, a, b, 64)
    np.testing.assert_allclose(b, (a * 3).reshape(4, 16)[:, ::-1].reshape(-1) + 1, rtol=1e-6)


def test_large_local_allocation_goes_to_heap():
    local = Buffer("big", (c(100_000),), "float32", scope="local")
    B = Buffer("B", (c(1),), "float32")
    i = Var("i")
    body = Allocate(
        local,
        c(100_000),
        Seq(
            (
                loop(i, 100_000, store(local, i, Cast("float32", i))),
                store(B, c(0), load(local, c(99_999))),
            )
        ),
    )
    func = PrimFunc("bigalloc", (B,), body)
    assert "aligned_alloc" in LLVMCodegen().generate(func, TARGET).text
    b = aligned(np.zeros(1, np.float32))
    run(func, b)
    assert b[0] == 99_999


@pytest.mark.parametrize("n", [3, 16_000, 20_000])  # 20000 floats: past the 64 KiB stack limit
def test_a_run_time_sized_buffer_per_row_is_on_the_stack_while_small(n, rng):
    # 300 rows, each a buffer of n floats: on the stack (64 KB x 300 would overflow it unless
    # each row's is released) or, past the limit, on the heap
    rows, n_var, i, j = 300, Var("n"), Var("i"), Var("j")
    A, B = (
        Buffer("A", (Mul(c(rows), n_var),), "float32"),
        Buffer("B", (Mul(c(rows), n_var),), "float32"),
    )
    row = Buffer("row", (n_var,), "float32")
    at = lambda k: Add(Mul(i, n_var), k)  # noqa: E731
    body = loop(
        i,
        rows,
        Allocate(
            row,
            n_var,
            Seq(
                (
                    loop(j, n_var, store(row, j, Mul(load(A, at(j)), c(2.0, "float32")))),
                    loop(j, n_var, store(B, at(j), load(row, Sub(Sub(n_var, c(1)), j)))),
                )
            ),
        ),
    )
    func = PrimFunc("rows", (A, B, n_var), body)
    text = LLVMCodegen().generate(func, TARGET).text
    assert "llvm.stacksave" in text and "aligned_alloc" in text
    a = aligned(rng.standard_normal(rows * n).astype(np.float32))
    b = aligned(np.zeros(rows * n, np.float32))
    run(func, a, b, n)
    np.testing.assert_array_equal(b.reshape(rows, n), (a * 2).reshape(rows, n)[:, ::-1])
