"""Shared arrays of lifetimes apart share bytes (codegen/cuda_shared.py), and only those."""

from __future__ import annotations

import re

import pytest

from tensorforge.codegen.cuda import CUDACodegen
from tensorforge.codegen.cuda_shared import plan_offsets, shared_arrays
from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.extern import AddressOf, WholeBuffer
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    Evaluate,
    For,
    IfThenElse,
    LoopKind,
    PrimFunc,
    Seq,
    Sync,
)
from tensorforge.te.expr import LT, Var
from tensorforge.te.extern_call import ExternCall
from tests.codegen.cuda_kernel_builders import TARGET
from tests.ir.builders import bind, buf, c, load, loop, store

N = 8192  # floats an array: 32 KiB, so two are past the static limit (dynamic shared memory)
BARRIER = Sync()


def _phase(A, S, j, tx, offset):
    """Every thread writes its column of S from A, then reads it back into A."""
    fill = loop(j, N // 256, store(S, j * 256 + tx, load(A, j * 256 + tx + offset)))
    back = loop(j, N // 256, store(A, j * 256 + tx + offset, load(S, j * 256 + tx)))
    return Seq((fill, back))


def _kernel(between=BARRIER, around=None, first=None, then=None):
    """Two phases over shared arrays S1 then S2; `between` separates them (None: nothing);
    `first(A, S1, tx)` replaces the first phase; `then(S1)` follows the second."""
    A = buf("A", 2 * N)
    S1, S2 = buf("S1", N, scope="shared"), buf("S2", N, scope="shared")
    tx, j1, j2 = Var("tx"), Var("j1"), Var("j2")
    one = first(A, S1, tx) if first is not None else _phase(A, S1, j1, tx, 0)
    two = _phase(A, S2, j2, tx, N)
    last = then(S1) if then is not None else None
    body = Seq(tuple(s for s in (one, between, two, last) if s is not None))
    if around is not None:
        body = around(body)
    body = bind(tx, 256, "threadIdx.x", Allocate(S1, c(N), Allocate(S2, c(N), body)))
    return PrimFunc("phases", (A,), body)


def _offsets(func):
    arrays = [(id(a), N * 4) for a in shared_arrays(func.body)]
    offsets = plan_offsets(func.body, arrays, 16)
    return [offsets[key] for key, _ in arrays]


def test_arrays_apart_across_a_barrier_share_bytes():
    func = _kernel()
    assert _offsets(func) == [0, 0]
    source = CUDACodegen().generate(func, TARGET)
    assert source.launch.shared_bytes == N * 4
    assert re.findall(r"tf_smem \+ (\d+)", source.text) == ["0", "0"]
    # no __restrict__: each would promise that no other pointer reaches its bytes
    assert "float* S1 = " in source.text and "float* S2 = " in source.text


def test_no_barrier_no_sharing():
    func = _kernel(between=None)
    assert _offsets(func) == [0, N * 4]
    text = CUDACodegen().generate(func, TARGET).text
    assert "float* __restrict__ S1 = " in text and "float* __restrict__ S2 = " in text


def test_a_barrier_under_an_if_does_not_separate():
    func = _kernel(between=IfThenElse(LT(Var("tx"), c(128)), Sync()))
    assert _offsets(func) == [0, N * 4]


def test_a_barrier_that_leaves_copies_in_flight_does_not_separate():
    func = _kernel(between=Attr("async_wait", 1, Sync()))
    assert _offsets(func) == [0, N * 4]
    # wait_group 0 leaves copies issued since the last commit in flight (wait_all does not)
    func = _kernel(between=Attr("async_wait", 0, Sync()))
    assert _offsets(func) == [0, N * 4]


def test_phases_inside_one_serial_loop_do_not_share():
    outer = Var("t")
    func = _kernel(around=lambda body: loop(outer, 3, body))
    assert _offsets(func) == [0, N * 4]
    source = CUDACodegen().generate(func, TARGET)
    assert source.launch.shared_bytes == 2 * N * 4


def _call(name, S, access="r"):
    args = () if S is None else (AddressOf(BufferLoad(S, (c(0),)), access),)
    return Evaluate(ExternCall("handle", "extern", name, args))


def _wgmma_reads(A, S1, tx):
    return Seq((_phase(A, S1, Var("j1"), tx, 0), _call("tf_wgmma_sync<16, 128, 64, 1>", S1)))


def test_an_asynchronous_read_lasts_until_its_drain():
    # S1 read by wgmma (asynchronously): without a drain before the barrier it is still in use
    assert _offsets(_kernel(first=_wgmma_reads)) == [0, N * 4]
    drain = Attr("pipeline_drain", ("S1_mbar",), Evaluate(c(0)))
    func = _kernel(first=lambda A, S1, tx: Seq((_wgmma_reads(A, S1, tx), drain)))
    assert _offsets(func) == [0, 0]


@pytest.mark.parametrize(
    "call, shares",
    [
        ("tf_tma_sw128<64, 64, 1>", True),  # a block's own copies: landed before it reads
        ("tf_tma_sw128<64, 128, 2>", False),  # multicast: the other blocks' copies
        ("tf_bulk_rows<64, 128, 2>", False),
    ],
)
def test_arrays_the_copy_engine_fills_share_only_a_blocks_own(call, shares):
    def bulk(A, S1, tx):
        return Seq((_call(call, S1, "w"), _phase(A, S1, Var("j1"), tx, 0)))

    assert _offsets(_kernel(first=bulk)) == [0, 0 if shares else N * 4]


def test_three_arrays_first_fit():
    """S1 and S2 live together, S3 after both: S3 takes S1's bytes (the lowest that fit)."""
    A = buf("A", 3 * N)
    S1, S2, S3 = (buf(f"S{i}", N, scope="shared") for i in (1, 2, 3))
    tx, j = Var("tx"), Var("j")
    both = loop(
        j,
        N // 256,
        Seq(
            (
                store(S1, j * 256 + tx, load(A, j * 256 + tx)),
                store(S2, j * 256 + tx, load(A, j * 256 + tx)),
            )
        ),  # fmt: skip
    )
    use = loop(j, N // 256, store(A, j * 256 + tx, load(S1, j * 256 + tx) + load(S2, j * 256 + tx)))
    third = _phase(A, S3, Var("j3"), tx, 2 * N)
    body = Seq((both, use, Sync(), third))
    for S in (S3, S2, S1):
        body = Allocate(S, c(N), body)
    func = PrimFunc("three", (A,), bind(tx, 256, "threadIdx.x", body))
    assert _offsets(func) == [0, N * 4, 0]


def test_a_call_that_takes_an_array_whole_uses_it():
    # S1 passed whole (WholeBuffer: no element load) to a call after S2's phase: still alive
    def whole(S1):
        return Evaluate(ExternCall("handle", "extern", "tf_sum_all", (WholeBuffer(S1),)))

    assert _offsets(_kernel(then=whole)) == [0, N * 4]


def test_a_loop_start_that_reads_an_array_uses_it():
    def from_s1(S1):  # for (j = S1[0]; ...): the load is in the loop's start, not its body
        j = Var("j")
        return For(j, load(S1, c(0)), c(4), Evaluate(c(0)), LoopKind.SERIAL)

    assert _offsets(_kernel(then=from_s1)) == [0, N * 4]


def test_only_a_drain_every_thread_reaches_ends_an_asynchronous_read():
    """wgmma.wait_group under an `if`, or in a loop that may run no step, may not run: the
    array it would free is read on past the barrier."""
    drain = Attr("pipeline_drain", ("S1_mbar",), Evaluate(c(0)))
    steps = Var("steps")
    for guarded in (
        IfThenElse(LT(Var("tx"), c(128)), drain),
        loop(Var("d"), steps, drain),
        loop(Var("d"), 0, drain),
        IfThenElse(LT(Var("tx"), c(128)), _call("tf_wgmma_wait_all", None)),
    ):

        def first(A, S1, tx, guarded=guarded):
            return Seq((_wgmma_reads(A, S1, tx), guarded))

        assert _offsets(_kernel(first=first)) == [0, N * 4], guarded
    drain_steps = loop(Var("d"), 2, drain)  # (a constant count of steps runs)
    func = _kernel(first=lambda A, S1, tx: Seq((_wgmma_reads(A, S1, tx), drain_steps)))
    assert _offsets(func) == [0, 0]
