"""ir/arith/lanes.py: vector indices as a scalar base plus constant lane offsets."""

import numpy as np
import pytest

from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.arith.lanes import lane_offsets, lane_values
from tensorforge.ir.expr import Broadcast, BufferLoad, Ramp
from tensorforge.te.expr import LT, Cast, FloorDiv, FloorMod, Max, Min, Mul, Select, Var
from tests.ir.builders import buf, c, f32


def ramp(base, lanes, stride=1):
    return Ramp(c(base) if isinstance(base, int) else base, c(stride), lanes)


def bcast(value, lanes):
    return Broadcast(c(value) if isinstance(value, int) else value, lanes)


def test_pad_edge_clamped_into_the_row():
    # broadcast(i*64) + max(ramp(-1, 1, 8), 0): the left pad's lanes read (0, 0, 1, ..., 6)
    i = Var("i")
    base, offsets = lane_offsets(bcast(i * 64, 8) + Max(ramp(-1, 8), bcast(0, 8)))
    assert offsets == (0, 0, 1, 2, 3, 4, 5, 6)
    assert simplify_expr(base) == simplify_expr(i * 64)


def test_two_rows_interleaved():
    # ramp % 2 * 100 + ramp // 2: lanes alternate between two rows 100 apart
    i = Var("i")
    lanes = ramp(0, 8)
    index = bcast(i, 8) + Mul(FloorMod(lanes, bcast(2, 8)), bcast(100, 8))
    index = index + FloorDiv(lanes, bcast(2, 8))
    base, offsets = lane_offsets(index)
    assert offsets == (0, 100, 1, 101, 2, 102, 3, 103)
    assert base.dtype == "int32"


@pytest.mark.parametrize("lanes", [7, 16])
def test_nearest_upsample_through_floats(lanes):
    # int32(int64(float32(ramp) * 0.5)) -> each source lane twice, as fptosi computes it
    scaled = Mul(Cast(f"float32x{lanes}", ramp(0, lanes)), Broadcast(f32(0.5), lanes))
    index = Cast(f"int32x{lanes}", Cast(f"int64x{lanes}", scaled))
    base, offsets = lane_offsets(index)
    assert base == c(0)
    want = (np.arange(lanes, dtype=np.float32) * np.float32(0.5)).astype(np.int64)
    assert offsets == tuple(int(x) for x in want)


def test_scaled_ramp_and_subtraction():
    i, j = Var("i"), Var("j")
    base, offsets = lane_offsets(Mul(ramp(i, 4), bcast(3, 4)) - bcast(j, 4))
    assert offsets == (0, 3, 6, 9)
    assert simplify_expr(base) == simplify_expr(i * 3 - j)


def test_select_and_compare_lanes():
    lanes = ramp(-2, 6)
    wrapped = Select(LT(lanes, bcast(0, 6)), lanes + bcast(6, 6), lanes)  # a negative wraps
    assert [v.value for v in lane_values(wrapped)] == [4, 5, 0, 1, 2, 3]
    assert lane_offsets(Min(wrapped, bcast(3, 6)))[1] == (3, 3, 0, 1, 2, 3)


def test_lanes_that_depend_on_a_variable_or_a_load_are_not_constant():
    i = Var("i")
    assert lane_offsets(Ramp(c(0), i, 4)) is None  # a variable stride
    assert lane_offsets(Max(ramp(i, 4), bcast(0, 4))) is None  # max of a variable ramp
    gathered = Cast("int32x4", BufferLoad(buf("P", 8, "int64"), (ramp(0, 4),)))
    assert lane_offsets(bcast(i, 4) + gathered) is None
    assert lane_values(FloorDiv(ramp(0, 4), bcast(0, 4))) is None  # division by zero


def test_uniform_vector_operations_are_scalar_ones_broadcast():
    # broadcast(1.0) / broadcast(s[0]): one division, every lane the same; A[broadcast(0)]: one
    # scalar load, not a gather of one address
    S = buf("S", 1)
    load = BufferLoad(S, (bcast(0, 16),))
    out = simplify_expr(bcast(f32(1.0), 16) / load)
    assert out == Broadcast(f32(1.0) / BufferLoad(S, (c(0),)), 16)
    # a masked load from a buffer of a run-time size may touch nothing: kept
    T = buf("T", Var("m"))
    masked = BufferLoad(T, (bcast(0, 16),), LT(ramp(0, 16), bcast(Var("n"), 16)))
    assert simplify_expr(masked) == masked
