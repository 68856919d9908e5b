"""insert_thread_syncs: barriers between shared-memory writes and reads, before / expected."""

from __future__ import annotations

from tensorforge import tir
from tensorforge.ir.extern import AddressOf
from tensorforge.ir.passes.insert_thread_syncs import insert_thread_syncs
from tensorforge.ir.stmt import Allocate, Evaluate, IfThenElse, LetStmt, Seq, Sync
from tensorforge.te.expr import Var
from tests.ir.builders import bind, buf, c, f32, load, loop, store

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


def test_a_tile_of_the_same_name_after_a_managed_pipeline_gets_its_barrier():
    """The pipeline inject_double_buffer made places its own barriers; the peeled last step
    after it allocates a tile of the same name again, whose fill and reads by other threads
    need one (it had none: GEMMs whose k is no multiple of the slice read half-filled tiles)."""
    from tensorforge.ir.stmt import Attr

    S1, S2 = buf("S", 64, scope="shared"), buf("S", 64, scope="shared")
    A, B, t = buf("A", 64), buf("B", 64), Var("t")
    managed = Attr("double_buffer_managed", ("S",), Seq((store(S1, t, load(A, t)), Sync())))
    write, read = store(S2, t, load(A, t)), store(B, t, load(S2, 63 - t))
    tail = Allocate(S2, c(64), Seq((write, read)))
    before = bind(t, 64, "threadIdx.x", Seq((Allocate(S1, c(64), managed), tail)))
    expected_tail = Allocate(S2, c(64), Seq((write, Seq((Sync(), read)))))
    expected = bind(t, 64, "threadIdx.x", Seq((Allocate(S1, c(64), managed), expected_tail)))
    assert insert_thread_syncs(before) == expected


def test_extern_store_through_a_pointer_is_a_write():
    """A tensorized store (a warp's fragment into a shared tile, by address) is a write of the
    whole tile: the threads reading the tile afterwards wait for it (access "w")."""
    S, B = buf("S", 64, scope="shared"), buf("B", 64)
    w, t = Var("w"), Var("t")
    fragment = Evaluate(
        tir.call_extern("handle", "store_fragment", AddressOf(load(S, w * 16), "w"))
    )
    store_tile = bind(w, 4, "threadIdx.y", fragment)
    read = bind(t, 64, "threadIdx.x", store(B, t, load(S, t)))
    before = Allocate(S, c(64), Seq((store_tile, read)))
    expected = Allocate(S, c(64), Seq((store_tile, Seq((Sync(), read)))))
    assert insert_thread_syncs(before) == expected


def test_extern_read_through_a_pointer_is_a_read():
    """A tensorized multiply reading the shared tile by address ("r") after threads wrote it."""
    S, A = buf("S", 64, scope="shared"), buf("A", 64)
    w, t = Var("w"), Var("t")
    write = bind(t, 64, "threadIdx.x", store(S, t, load(A, t)))
    mma = Evaluate(tir.call_extern("handle", "mma", AddressOf(load(S, w * 16), "r")))
    use = bind(w, 4, "threadIdx.y", mma)
    before = Allocate(S, c(64), Seq((write, use)))
    expected = Allocate(S, c(64), Seq((write, Seq((Sync(), use)))))
    assert insert_thread_syncs(before) == expected
