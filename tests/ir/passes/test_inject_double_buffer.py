"""inject_double_buffer: a shared tile refilled by a serial loop gets two halves, filled ahead."""

from tensorforge.ir.passes.inject_double_buffer import inject_double_buffer
from tensorforge.ir.stmt import Allocate, Attr, For, IfThenElse, Seq, Sync
from tensorforge.te.expr import LT, Var
from tests.codegen.cuda_kernel_builders import buf, c, load, loop, store

A, C = buf("A", 256), buf("C", 16)
S = buf("S", 16, scope="shared")


def tiled(ko, t, marked=True):
    """for ko: S = tile ko of A; C[t] += S[15 - t] (S marked for double buffering)."""
    fill = store(S, t, load(A, ko * 16 + t))
    use = store(C, t, load(C, t) + load(S, 15 - t))
    alloc = Allocate(S, c(16), Seq((fill, use)))
    return loop(ko, 16, Attr("double_buffer", None, alloc) if marked else alloc)


def test_fill_of_the_next_tile_overlaps_the_compute_on_this_one():
    ko, t = Var("ko"), Var("t")

    def fill_at(k):  # tile k into half (k - 0) % 2
        return store(S, t + (k - c(0)) % 2 * c(16), load(A, k * 16 + t))

    compute = store(C, t, load(C, t) + load(S, 15 - t + (ko - c(0)) % 2 * c(16)))
    prefetch = IfThenElse(LT(ko + 1, c(0) + c(16)), fill_at(ko + 1))
    body = Seq((fill_at(c(0)), Sync(), For(ko, c(0), c(16), Seq((prefetch, compute, Sync())))))
    expected = Allocate(S, c(16) * 2, Attr("double_buffer_managed", ("S",), body))
    assert inject_double_buffer(tiled(ko, t)) == expected


def test_unmarked_tiles_are_unchanged():
    before = tiled(Var("ko"), Var("t"), marked=False)
    assert inject_double_buffer(before) is before


def test_mark_outside_a_serial_loop_is_a_plain_allocation():
    t = Var("t")
    alloc = Allocate(S, c(16), store(S, t, load(A, t)))
    assert inject_double_buffer(Attr("double_buffer", None, alloc)) == alloc


def test_body_that_reads_before_it_fills_keeps_one_buffer():
    ko, t = Var("ko"), Var("t")
    reads_first = Seq((store(C, t, load(S, t)), store(S, t, load(A, ko * 16 + t))))
    before = loop(ko, 16, Attr("double_buffer", None, Allocate(S, c(16), reads_first)))
    assert inject_double_buffer(before) == loop(ko, 16, Allocate(S, c(16), reads_first))
