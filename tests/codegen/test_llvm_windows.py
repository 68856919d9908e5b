"""llvm_windows: gathers at constant lane offsets from one address read as contiguous windows
and one shuffle (a pad's clamped edge, a nearest upsample, two interleaved rows)."""

import numpy as np
import pytest

from tensorforge.codegen.llvm_windows import window_plan
from tensorforge.ir.expr import Broadcast, Buffer
from tensorforge.ir.stmt import PrimFunc
from tensorforge.te.expr import (
    GE,
    LT,
    And,
    Cast,
    Const,
    FloorDiv,
    FloorMod,
    Max,
    Min,
    Mul,
    Select,
    Var,
)
from tests.codegen.llvm_builders import aligned, c, compile_func, load, loop, ramp, run, store


def bcast(value, lanes):
    return Broadcast(c(value) if isinstance(value, int) else value, lanes)


@pytest.mark.parametrize(
    "offsets, plan",
    [
        ((0, 0, 1, 2, 3, 4, 5, 6), [(0, 7)]),  # a pad's clamped left edge
        ((0, 0, 1, 1, 2, 2), [(0, 3)]),  # a nearest 2x upsample
        ((0, 100, 1, 101, 2, 102, 3, 103), [(0, 4), (100, 4)]),  # two rows interleaved
        ((5, 3, 1, -1), [(-1, 7)]),  # a reversed stride-2 row
        (tuple(range(0, 800, 100)), None),  # 8 windows for 8 lanes: a gather
        (tuple(range(0, 48, 3)), None),  # stride 3: 46 elements for 16 lanes
    ],
)
def test_window_plan(offsets, plan):
    assert window_plan(offsets) == plan


def _gathers_by_lane(func) -> bool:
    source, _ = compile_func(func)
    return "extractelement <" in source.text and " x ptr>" in source.text


@pytest.mark.parametrize("width", [7, 16])
def test_nearest_upsample_reads_each_source_element_twice(width, rng):
    # B[i, x] = A[i, int(float(x) * 0.5)] over rows of 2 * width lanes
    rows, lanes = 5, 2 * width
    A = Buffer("A", (c(rows * width),), "float32")
    B = Buffer("B", (c(rows * lanes),), "float32")
    i = Var("i")
    scaled = Mul(
        Cast(f"float32x{lanes}", ramp(c(0), lanes)), Broadcast(Const(0.5, "float32"), lanes)
    )
    source = bcast(i * c(width), lanes) + Cast(f"int32x{lanes}", Cast(f"int64x{lanes}", scaled))
    func = PrimFunc(
        "upsample", (A, B), loop(i, rows, store(B, ramp(i * c(lanes), lanes), load(A, source)))
    )
    a = aligned(rng.standard_normal(rows * width).astype(np.float32))
    b = aligned(np.zeros(rows * lanes, np.float32))
    run(func, a, b)
    np.testing.assert_array_equal(
        b.reshape(rows, lanes), np.repeat(a.reshape(rows, width), 2, axis=1)
    )
    assert not _gathers_by_lane(func)


def test_two_interleaved_rows(rng):
    # B[i, 2k + h] = A[i*5 + h*45 + k]: a transposed convolution's read-back of two half rows
    A, B = Buffer("A", (c(90),), "float32"), Buffer("B", (c(90),), "float32")
    i, lanes = Var("i"), ramp(c(0), 10)
    index = bcast(i * c(5), 10) + Mul(FloorMod(lanes, bcast(2, 10)), bcast(45, 10))
    index = index + FloorDiv(lanes, bcast(2, 10))
    func = PrimFunc("interleave", (A, B), loop(i, 9, store(B, ramp(i * c(10), 10), load(A, index))))
    a = aligned(rng.standard_normal(90).astype(np.float32))
    b = aligned(np.zeros(90, np.float32))
    run(func, a, b)
    halves = a.reshape(2, 9, 5)  # (h, i, k)
    np.testing.assert_array_equal(b.reshape(9, 5, 2), halves.transpose(1, 2, 0))
    assert not _gathers_by_lane(func)


def test_pad_of_odd_rows_reads_clamped_edges(rng):
    # B (6 x 13) = A (4 x 11) padded by 1 on each side: the index clamped, the select masks
    A, B = Buffer("A", (c(44),), "float32"), Buffer("B", (c(78),), "float32")
    i, lanes = Var("i"), ramp(c(-1), 13)
    row = Max(Min(i - c(1), c(3)), c(0))
    index = bcast(row * c(11), 13) + Max(Min(lanes, bcast(10, 13)), bcast(0, 13))
    inside = And(
        bcast(And(GE(i, c(1)), LT(i, c(5))), 13),
        And(GE(lanes, bcast(0, 13)), LT(lanes, bcast(11, 13))),
    )
    value = Select(inside, load(A, index), Broadcast(Const(0.0, "float32"), 13))
    func = PrimFunc("pad", (A, B), loop(i, 6, store(B, ramp(i * c(13), 13), value)))
    a = aligned(rng.standard_normal(44).astype(np.float32))
    b = aligned(np.full(78, 7.0, np.float32))
    run(func, a, b)
    np.testing.assert_array_equal(b.reshape(6, 13), np.pad(a.reshape(4, 11), 1))
    assert not _gathers_by_lane(func)
