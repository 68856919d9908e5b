"""inject_double_buffer: a shared tile refilled by a serial loop gets N slots, filled N-1 ahead."""

import pytest

from tensorforge.ir.passes.inject_double_buffer import inject_double_buffer
from tensorforge.ir.stmt import Allocate, Attr, For, IfThenElse, Seq, Sync
from tensorforge.te.expr import LT, Var
from tests.ir.builders import buf, c, load, loop, store

A, C = buf("A", 256), buf("C", 16)
S = buf("S", 16, scope="shared")


def tiled(ko, t, marked=True, stages=2):
    """for ko: S = tile ko of A; C[t] += S[15 - t] (S marked for `stages`-deep buffering)."""
    fill = store(S, t, load(A, ko * 16 + t))
    use = store(C, t, load(C, t) + load(S, 15 - t))
    alloc = Allocate(S, c(16), Seq((fill, use)))
    return loop(ko, 16, Attr("double_buffer", ("S", stages), alloc) if marked else alloc)


@pytest.mark.parametrize("stages", [2, 3])
def test_fills_of_the_next_tiles_overlap_the_compute_on_this_one(stages):
    ko, t = Var("ko"), Var("t")

    def fill_at(k):  # tile k into slot (k - 0) % stages, one commit group
        tile = store(S, t + (k - c(0)) % stages * c(16), load(A, k * 16 + t))
        return Attr("async_commit", 0, tile)

    prologue = [fill_at(c(0) + s) for s in range(stages - 1)]
    compute = store(C, t, load(C, t) + load(S, 15 - t + (ko - c(0)) % stages * c(16)))
    ahead = ko + (stages - 1)
    prefetch = Attr("async_commit", 0, IfThenElse(LT(ahead, c(0) + c(16)), fill_at(ahead).body))
    wait = Attr("async_wait", stages - 2, Sync())  # fill ko has landed; slot ko - 1 is free
    # two slots: refill first, to overlap this compute; more: refill after it (its copies
    # queue behind the compute's shared reads instead of competing with them)
    order = (prefetch, compute) if stages == 2 else (compute, prefetch)
    steps = For(ko, c(0), c(16), Seq((wait, *order)))
    body = Seq((*prologue, steps, Sync()))
    expected = Allocate(S, c(16) * stages, Attr("double_buffer_managed", ("S",), body))
    assert inject_double_buffer(tiled(ko, t, stages=stages)) == expected


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
