"""fold_lane_masks: lane masks made constant by unrolling are dropped (or the store is)."""

from tensorforge.ir.expr import Broadcast, BufferLoad, Ramp
from tensorforge.ir.passes.fold_lane_masks import fold_lane_masks
from tensorforge.ir.stmt import BufferStore, Seq
from tensorforge.te.expr import LT, Var
from tests.ir.builders import buf, c

A, B = buf("A", 64), buf("B", 64)
VALUE = Broadcast(c(1.0, "float32"), 8)


def mask(start, limit):
    return LT(Ramp(c(start), c(1), 8), Broadcast(c(limit), 8))


def test_all_lanes_on_drops_the_mask():
    store = BufferStore(A, (Ramp(c(8), c(1), 8),), VALUE, mask(48, 56))
    assert fold_lane_masks(store) == BufferStore(A, (Ramp(c(8), c(1), 8),), VALUE)


def test_all_lanes_off_drops_the_store():
    assert fold_lane_masks(BufferStore(A, (Ramp(c(8), c(1), 8),), VALUE, mask(56, 56))) == Seq(())


def test_mixed_or_symbolic_masks_stay():
    n = Var("n")
    mixed = BufferStore(A, (Ramp(c(8), c(1), 8),), VALUE, mask(52, 56))
    symbolic = BufferStore(
        A, (Ramp(c(8), c(1), 8),), VALUE, LT(Ramp(n, c(1), 8), Broadcast(c(56), 8))
    )
    assert fold_lane_masks(mixed) == mixed and fold_lane_masks(symbolic) == symbolic


def test_broadcast_index_load_becomes_one_scalar_load():
    load = BufferLoad(B, (Broadcast(c(3), 8),))
    out = fold_lane_masks(BufferStore(A, (Ramp(c(0), c(1), 8),), load))
    assert out.value == Broadcast(BufferLoad(B, (c(3),)), 8)


def test_all_on_masked_load_loses_its_mask():
    load = BufferLoad(B, (Ramp(c(0), c(1), 8),), mask(0, 8))
    out = fold_lane_masks(BufferStore(A, (Ramp(c(0), c(1), 8),), load))
    assert out.value == BufferLoad(B, (Ramp(c(0), c(1), 8),))
