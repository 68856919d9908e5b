"""The simplify pass: expressions under loop ranges, dead loops and branches, flat sequences."""

from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp
from tensorforge.ir.passes.simplify import simplify
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Realize,
    Seq,
    Sync,
)
from tensorforge.te import size_var
from tensorforge.te.expr import GE, GT, LT, Add, Const, FloorDiv, FloorMod, Max, Min, Var, const

A = Buffer("A", (const(1024),), "float32")
B = Buffer("B", (const(1024),), "float32")
EMPTY = Seq(())


def store(index, value=None, predicate=None):
    return BufferStore(A, (index,), const(1.0) if value is None else value, predicate)


def test_simplify_drops_add_zero():
    i = Var("i")
    assert simplify(store(Add(i, const(0)))) == store(i)


def test_loop_of_extent_zero_disappears():
    i = Var("i")
    assert simplify(For(i, const(0), const(0), store(i))) == EMPTY
    n = Var("n")
    assert simplify(For(i, const(0), n - n, store(i))) == EMPTY


def test_loop_of_extent_one_becomes_its_body():
    i, j = Var("i"), Var("j")
    loop = For(i, const(3), const(1), store(i * 4 + j))
    assert simplify(loop) == store(j + 12)


def test_parallel_and_thread_loops_of_extent_one_stay():
    i = Var("i")
    parallel = For(i, const(0), const(1), store(i), LoopKind.PARALLEL)
    assert simplify(parallel) is parallel
    bound = For(i, const(0), const(1), store(i), LoopKind.THREAD_BINDING, "threadIdx.x")
    assert simplify(bound) is bound


def test_guard_proven_by_loop_ranges_is_removed():
    io, ii = Var("io"), Var("ii")
    guarded = IfThenElse(LT(io * 32 + ii, const(1000)), store(io * 32 + ii))
    nest = For(io, const(0), const(31), For(ii, const(0), const(32), guarded))
    expected = For(io, const(0), const(31), For(ii, const(0), const(32), store(io * 32 + ii)))
    assert simplify(nest) == expected


def test_guard_that_may_fail_stays():
    io, ii = Var("io"), Var("ii")
    guarded = IfThenElse(LT(io * 32 + ii, const(1000)), store(io * 32 + ii))
    nest = For(io, const(0), const(32), For(ii, const(0), const(32), guarded))
    assert simplify(nest) is nest


def test_index_simplified_with_ranges():
    i, j = Var("i"), Var("j")
    loop = For(j, const(0), const(4), store(FloorDiv(i * 4 + j, const(4)) + FloorMod(j, const(4))))
    assert simplify(loop) == For(j, const(0), const(4), store(i + j))


def test_loop_min_is_part_of_the_range():
    i = Var("i")
    loop = For(i, const(4), const(4), IfThenElse(GE(i, const(4)), store(i)))
    assert simplify(loop) == For(i, const(4), const(4), store(i))


def test_constant_conditions_pick_a_branch():
    i = Var("i")
    assert simplify(IfThenElse(const(True), store(i), store(i + 1))) == store(i)
    assert simplify(IfThenElse(const(False), store(i), store(i + 1))) == store(i + 1)
    assert simplify(IfThenElse(LT(const(2), const(1)), store(i))) == EMPTY


def test_empty_branches_and_bodies_go():
    i, n = Var("i"), Var("n")
    cond = LT(i, n)
    assert simplify(IfThenElse(cond, store(i), EMPTY)) == IfThenElse(cond, store(i))
    assert simplify(IfThenElse(cond, EMPTY)) == EMPTY
    assert simplify(IfThenElse(cond, EMPTY, store(i))) == IfThenElse(GE(i, n), store(i))
    assert simplify(For(i, const(0), n, Seq((EMPTY, Seq(()))))) == EMPTY
    bound = For(i, const(0), const(32), EMPTY, LoopKind.THREAD_BINDING, "threadIdx.x")
    assert simplify(bound) is bound  # the launch shape comes from thread loops: keep it


def test_nested_seqs_flatten():
    i = Var("i")
    a, b, c = store(i), store(i + 1), store(i + 2)
    assert simplify(Seq((a, Seq((b, EMPTY)), Seq((Seq((c,)),))))) == Seq((a, b, c))
    assert simplify(Seq((EMPTY, a))) == a


def test_let_of_const_or_var_is_substituted():
    i, x = Var("i"), Var("x")
    assert simplify(LetStmt(x, const(3), store(i + x))) == store(i + 3)
    assert simplify(LetStmt(x, i, store(x * 2))) == store(i * 2)


def test_let_value_bounds_its_var():
    i, x = Var("i"), Var("x")
    body = IfThenElse(GT(x, const(0)), store(x))
    loop = For(i, const(0), const(10), LetStmt(x, i * 2 + 1, body))
    assert simplify(loop) == For(i, const(0), const(10), LetStmt(x, i * 2 + 1, store(x)))


def test_ranges_pass_through_allocate_attr_realize():
    i = Var("i")
    index = FloorDiv(i, const(8))
    for wrap in (
        lambda s: Allocate(B, const(8), s),
        lambda s: Attr("pragma_unroll", 1, s),
        lambda s: Realize(B, (const(0),), (const(8),), s),
    ):
        loop = For(i, const(0), const(8), wrap(store(index)))
        assert simplify(loop) == For(i, const(0), const(8), wrap(store(const(0))))


def test_allocate_with_nothing_inside_goes():
    assert simplify(Allocate(B, const(8), EMPTY)) == EMPTY


def test_scalar_predicates():
    i = Var("i")
    assert simplify(store(i, predicate=LT(const(0), const(1)))) == store(i)
    assert simplify(store(i, predicate=LT(const(1), const(0)))) == EMPTY
    loop = For(i, const(0), const(8), store(i, predicate=LT(i, const(8))))
    assert simplify(loop) == For(i, const(0), const(8), store(i))
    guarded_load = BufferLoad(B, (i,), LT(i, const(8)))
    loop = For(i, const(0), const(8), store(i, guarded_load))
    assert simplify(loop) == For(i, const(0), const(8), store(i, BufferLoad(B, (i,))))


def test_vector_stores_keep_their_predicates():
    i = Var("i")
    mask = LT(Ramp(i * 8, const(1), 8), Broadcast(const(1000), 8))  # i unbounded: lanes differ
    vector = BufferStore(A, (Ramp(i * 8, const(1), 8),), Broadcast(const(1.0), 8), mask)
    assert simplify(vector) is vector
    on = BufferStore(
        A, (Ramp(i * 8, const(1), 8),), Broadcast(const(1.0), 8), Broadcast(const(True), 8)
    )
    assert simplify(on) == BufferStore(A, (Ramp(i * 8, const(1), 8),), Broadcast(const(1.0), 8))


def test_a_uniform_vector_mask_is_a_branch():
    # A[v] = B[w if broadcast(c)] if broadcast(c) -> if c: A[v] = B[w]
    i = Var("i")
    uniform = Broadcast(GE(i, const(1)), 8)
    load = BufferLoad(B, (Ramp(i * 8, const(1), 8),), uniform)
    out = simplify(BufferStore(A, (Ramp(i * 8, const(1), 8),), load, uniform))
    assert isinstance(out, IfThenElse) and out.then_case.predicate is None
    assert out.then_case.value.predicate is None
    messy = BufferStore(A, (Ramp(i * 8 + 0, const(1), 8),), Broadcast(const(1.0), 8))
    assert simplify(messy) == BufferStore(A, (Ramp(i * 8, const(1), 8),), Broadcast(const(1.0), 8))


def test_clamps_no_lane_reaches_go():
    # a pool's padding clamp of a vector of window columns: max(ramp(16j + 1, 2, 8), 0) holds
    # no clamp for j >= 0; min(ramp(16j, 2, 8), 111) none for j <= 6, one lane's for j = 7
    j = Var("j")
    ramp = Ramp(j * 16 + 1, const(2), 8)
    low = For(
        j,
        const(0),
        const(7),
        store(Ramp(j * 8, const(1), 8), BufferLoad(B, (Max(ramp, Broadcast(const(0), 8)),))),
    )
    assert simplify(low) == For(
        j, const(0), const(7), store(Ramp(j * 8, const(1), 8), BufferLoad(B, (ramp,)))
    )
    below = Max(Ramp(j * 16 - 1, const(2), 8), Broadcast(const(0), 8))
    kept = For(j, const(0), const(7), store(Ramp(j * 8, const(1), 8), BufferLoad(B, (below,))))
    assert simplify(kept) == kept
    high = Min(Ramp(j * 16, const(2), 8), Broadcast(const(111), 8))
    for extent, folds in [(7, True), (8, False)]:
        loop = For(
            j, const(0), const(extent), store(Ramp(j * 8, const(1), 8), BufferLoad(B, (high,)))
        )
        index = simplify(loop).body.value.indices[0]
        assert isinstance(index, Ramp) is folds  # else the min stays


def test_evaluate_of_a_constant_goes():
    assert simplify(Evaluate(const(0))) == EMPTY


def test_unchanged_tree_is_returned_as_is():
    i, j = Var("i"), Var("j")
    body = Seq((store(i * 32 + j), Sync(), IfThenElse(LT(j, Var("n")), store(j))))
    nest = For(i, const(0), const(4), For(j, const(0), const(32), body))
    assert simplify(nest) is nest


def test_only_the_changed_path_is_rebuilt():
    i, j = Var("i"), Var("j")
    kept = For(j, const(0), const(8), store(j))
    nest = For(i, const(0), const(4), Seq((kept, store(i + 0))))
    out = simplify(nest)
    assert out.body.stmts[0] is kept
    assert out.body.stmts[1] == store(i)


def test_symbolic_extent_guard():
    """A tail loop `for ii in range(min(32, n - io*32))` proves its own guard `io*32 + ii < n`."""
    io, ii, n = Var("io"), Var("ii"), Var("n")
    from tensorforge.te.expr import Min

    extent = Min(const(32), n - io * 32)
    guarded = IfThenElse(LT(io * 32 + ii, n), store(io * 32 + ii))
    nest = For(io, const(0), (n + 31) // 32, For(ii, const(0), extent, guarded))
    out = simplify(nest)
    assert out.body.body == store(io * 32 + ii)
    assert isinstance(out.body.extent, type(Min(n, const(32))))
    assert out.body.extent == Min(n - io * 32, const(32))
    assert out.extent == FloorDiv(n + 31, const(32))
    assert isinstance(out.extent.b, Const)


def test_load_predicates_go_where_every_lane_lies_inside_the_buffer():
    # a pad's edge: the index is clamped into the 8 x 7 input; the mask only kept memory safe
    i = Var("i")
    P = Buffer("P", (const(8), const(7)), "float32")
    rows = Broadcast(Max(Min(i - 1, const(7)), const(0)) * 7, 8)
    index = Add(rows, Max(Ramp(const(-1), const(1), 8), Broadcast(const(0), 8)))
    mask = GE(Ramp(const(-1), const(1), 8), Broadcast(const(0), 8))
    before = For(
        i, const(0), const(10), store(Ramp(i * 8, const(1), 8), BufferLoad(P, (index,), mask))
    )
    after = simplify(before)
    assert after.body.value.predicate is None
    # unclamped rows: row 7 reaches element 7*7 + 6 = 55 of 56, row 8 would not fit
    for rows_end, kept in ((8, False), (9, True)):
        index = Add(Broadcast(i * 7, 8), Max(Ramp(const(-1), const(1), 8), Broadcast(const(0), 8)))
        loop = For(
            i,
            const(0),
            const(rows_end),
            store(Ramp(i * 8, const(1), 8), BufferLoad(P, (index,), mask)),
        )
        assert (simplify(loop).body.value.predicate is not None) == kept


def test_load_predicates_stay_on_scalar_loads_and_symbolic_buffers():
    # a scalar load keeps its predicate (vectorized later it would become a lane-by-lane gather)
    i, n = Var("i"), Var("n")
    clamped = BufferLoad(B, (Max(i - 1, const(0)),), GE(i, const(1)))
    loop = For(i, const(0), const(1024), store(i, clamped))
    assert simplify(loop) is loop
    symbolic = Buffer("S", (n,), "float32")  # a size known only at run time
    index = Add(Broadcast(i * 8, 8), Max(Ramp(const(-1), const(1), 8), Broadcast(const(0), 8)))
    mask = GE(Ramp(const(-1), const(1), 8), Broadcast(const(0), 8))
    guarded = BufferLoad(symbolic, (index,), mask)
    loop = For(i, const(0), const(8), store(Ramp(i * 8, const(1), 8), guarded))
    assert simplify(loop).body.value.predicate is not None
    # one condition for every lane: kept (the backend branches around the load and skips it)
    P = Buffer("P", (const(64),), "float32")
    uniform = BufferLoad(P, (index,), Broadcast(GE(i, const(1)), 8))
    loop = For(i, const(0), const(8), store(Ramp(i * 8, const(1), 8), uniform))
    assert simplify(loop).body.value.predicate is not None


def test_load_predicates_go_where_a_run_time_sized_buffer_provably_holds_every_lane():
    # a matrix product's row min(i, n - 1) of an [n, 64] matrix, read under a column mask
    # (its last partial panel): the row lies inside whatever n is, so the load is unmasked
    i, k, n, m = Var("i"), Var("k"), size_var("n", min_value=1), Var("m")
    A = Buffer("A", (n * 64,), "float32")
    row = Min(i, n - 1)
    columns = LT(Ramp(const(0), const(1), 8), Broadcast(m, 8))
    load = BufferLoad(A, (Broadcast(row * 64 + k, 8),), columns)
    body = store(Ramp(const(0), const(1), 8), load)
    loop = For(i, const(0), n + 3, For(k, const(0), const(64), body))  # rows past n: clamped
    value = simplify(loop).body.body.value
    assert value == Broadcast(BufferLoad(A, (simplify_expr(row * 64 + k),)), 8)  # one scalar load
    # without the clamp, row i of a loop past n may lie outside: kept
    beyond = BufferLoad(A, (Broadcast(i * 64 + k, 8),), columns)
    loop = For(
        i, const(0), n + 1, For(k, const(0), const(64), store(Ramp(const(0), const(1), 8), beyond))
    )
    assert simplify(loop).body.body.value.predicate is not None


def test_stored_integer_values_wrap_and_their_indices_do_not():
    # torch's integer tensors wrap around: (x * 3) // 3 is not x where x * 3 overflows, and
    # x * 4 > x is not x * 3 > 0; the loads' own indices are index arithmetic (no overflow)
    i = Var("i")
    X = Buffer("X", (const(1024),), "int32")
    Y = Buffer("Y", (const(1024),), "int32")
    x = BufferLoad(X, (FloorDiv(i * 3, const(3)),))
    product = x * const(3)
    wrapped = BufferStore(
        Y, (i + const(0),), FloorDiv(product, const(3)) + (x * 4 > x).astype("int32")
    )
    assert simplify(wrapped) == BufferStore(
        Y,
        (i,),
        FloorDiv(BufferLoad(X, (i,)) * const(3), const(3))
        + (BufferLoad(X, (i,)) * 4 > BufferLoad(X, (i,))).astype("int32"),
    )
    assert simplify_expr(FloorDiv(i * 3, const(3)), data=True) == i  # (no load: an index)
    assert simplify_expr(FloorDiv(product, const(3))) == BufferLoad(X, (i,))  # (an index)
