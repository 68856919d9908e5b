"""lower_thread_allreduce: a ThreadAllReduce becomes warp shuffles, shared scratch and barriers."""

import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.errors import LoweringError
from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.gpu_intrin import warp_shuffle, warp_shuffle_down
from tensorforge.ir.passes.lower_thread_allreduce import lower_thread_allreduce, plan_strategy
from tensorforge.ir.passes.verify import verify
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    IfThenElse,
    KernelLaunch,
    LetStmt,
    Seq,
    Sync,
    ThreadAllReduce,
)
from tensorforge.ir.visit import walk
from tensorforge.te.expr import LT, Add, Const, Var
from tests.ir.builders import (
    argmax_reducer,
    bind,
    buf,
    c,
    f32,
    load,
    store,
    sum_reducer,
)

A, B = buf("A", 4096), buf("B", 64)
RED = buf("red", 1, scope="local")


def reduce_kernel(extent, tag="threadIdx.x", launched=None, condition=None):
    """B[0] = sum over `extent` threads along `tag` of A[k] (the loop bound to `launched`)."""
    k = Var("k")
    allreduce = ThreadAllReduce(sum_reducer(), (load(A, k),), (RED,), tag, extent, condition)
    body = Seq((allreduce, IfThenElse(k.__eq__(c(0)), store(B, c(0), load(RED, c(0))))))
    return k, allreduce, Allocate(RED, c(1), bind(k, launched or extent, tag, body))


def stores(stmt):
    return [n for n in walk(stmt) if isinstance(n, BufferStore)]


def test_warp_of_four_threads_shuffles_down_then_broadcasts():
    k, _, before = reduce_kernel(4)
    red = load(RED, c(0))
    mask, o1, o2 = (
        Var("red_mask", "uint32"),
        Var("red_other", "float32"),
        Var("red_other", "float32"),
    )
    tail = Seq((store(RED, c(0), red + o2), store(RED, c(0), warp_shuffle(mask, red, 0, 4))))
    halves = Seq(
        (store(RED, c(0), red + o1), LetStmt(o2, warp_shuffle_down(mask, red, 1, 4), tail))
    )
    lowered = Seq(
        (
            store(RED, c(0), load(A, k)),
            LetStmt(
                mask, Const(0xF, "uint32"), LetStmt(o1, warp_shuffle_down(mask, red, 2, 4), halves)
            ),
        )
    )
    note = "sum over threadIdx.x: 4 of 4 threads, warp"
    first = IfThenElse(k.__eq__(c(0)), store(B, c(0), load(RED, c(0))))
    body = Seq((Attr("thread_allreduce", note, lowered), first))
    expected = Allocate(RED, c(1), bind(k, 4, "threadIdx.x", body))
    out = lower_thread_allreduce(before)
    assert str(out) == str(expected)  # fresh variables: compared by name
    assert not any(isinstance(n, ThreadAllReduce) for n in walk(out))
    verify(out)


def test_expected_text_of_the_warp_case():
    out = lower_thread_allreduce(reduce_kernel(4)[2])
    assert str(out).splitlines()[2:] == [
        "    # attr thread_allreduce = sum over threadIdx.x: 4 of 4 threads, warp",
        "    red[0] = A[k]",
        "    red_mask = uint32(15)",
        "    red_other = warp_shuffle_down(red_mask, red[0], 2, 4)",
        "    red[0] = red[0] + red_other",
        "    red_other = warp_shuffle_down(red_mask, red[0], 1, 4)",
        "    red[0] = red[0] + red_other",
        "    red[0] = warp_shuffle(red_mask, red[0], 0, 4)",
        "    if k == 0:",
        "        B[0] = red[0]",
    ]


def test_fewer_threads_than_launched_contribute_the_identity():
    k, _, before = reduce_kernel(20, launched=32, condition=LT(Var("g"), c(5)))
    out = lower_thread_allreduce(before)
    guarded = [
        n
        for n in walk(out)
        if isinstance(n, IfThenElse) and n.then_case == store(RED, c(0), load(A, k))
    ]
    assert len(guarded) == 1
    assert str(guarded[0].condition) == "thread_index(0) < 20 and g < 5"
    assert store(RED, c(0), f32(0.0)) in stores(out)  # the identity first


def test_one_thread_needs_no_communication():
    k, _, before = reduce_kernel(1)
    out = lower_thread_allreduce(before)
    assert not any(isinstance(n, (Sync, LetStmt)) for n in walk(out))
    assert store(RED, c(0), load(A, k)) in stores(out)


@pytest.mark.parametrize(
    "extent, block, tag, strategy",
    [
        (1, (1, 1, 1), "threadIdx.x", "none"),
        (32, (32, 1, 1), "threadIdx.x", "warp"),
        (20, (20, 1, 1), "threadIdx.x", "warp"),  # one group: the last lanes add nothing
        (16, (16, 8, 1), "threadIdx.x", "warp"),  # two groups per warp
        (100, (100, 1, 1), "threadIdx.x", "warps+shared"),
        (128, (128, 4, 1), "threadIdx.x", "warps+shared"),
        (100, (100, 4, 1), "threadIdx.x", "shared-tree"),  # groups straddle warps
        (7, (4, 7, 1), "threadIdx.y", "shared-tree"),
        (3, (2, 2, 3), "threadIdx.z", "shared-tree"),
    ],
)
def test_strategy_follows_the_block(extent, block, tag, strategy):
    allreduce = ThreadAllReduce(sum_reducer(), (f32(1.0),), (RED,), tag, extent)
    assert plan_strategy(allreduce, block) == strategy


def test_warps_and_shared_keeps_one_partial_per_warp_between_barriers():
    out = lower_thread_allreduce(reduce_kernel(100)[2])
    (scratch,) = [n for n in walk(out) if isinstance(n, Allocate) and n.buffer.scope == "shared"]
    assert scratch.extent == c(4)  # 100 threads: 4 warps
    assert sum(isinstance(n, Sync) for n in walk(out)) == 2
    verify(out)


def test_shared_tree_over_y_halves_the_stride_each_step():
    k, ty = Var("k"), Var("ty")
    allreduce = ThreadAllReduce(sum_reducer(), (load(A, ty),), (RED,), "threadIdx.y", 6)
    body = bind(k, 4, "threadIdx.x", bind(ty, 6, "threadIdx.y", allreduce))
    out = lower_thread_allreduce(Allocate(RED, c(1), body))
    (scratch,) = [n for n in walk(out) if isinstance(n, Allocate) and n.buffer.scope == "shared"]
    assert scratch.extent == c(24)
    steps = [n for n in walk(out) if isinstance(n, IfThenElse)]
    assert [str(s.condition) for s in steps] == [
        f"thread_index(1) < {step} and thread_index(1) + {step} < 6" for step in (4, 2, 1)
    ]
    reads = [n for n in walk(out) if isinstance(n, BufferLoad) and n.buffer is scratch.buffer]
    assert [str(r.indices[0]) for r in reads] == [
        "red_tid + 16",
        "red_tid + 8",
        "red_tid + 4",
        "red_tid - thread_index(1) * 4",
    ]
    verify(out)


def test_each_kernel_has_its_own_block():
    k1, _, first = reduce_kernel(64)
    k2, _, second = reduce_kernel(8)
    out = lower_thread_allreduce(
        Seq((KernelLaunch("kernel0", first), KernelLaunch("kernel1", second)))
    )
    notes = [n.value for n in walk(out) if isinstance(n, Attr)]
    assert notes == [
        "sum over threadIdx.x: 64 of 64 threads, warps+shared",
        "sum over threadIdx.x: 8 of 8 threads, warp",
    ]


def test_tuple_reducer_reads_every_value_before_writing():
    k = Var("k")
    red_i, red_v = buf("red_i", 1, "int32", "local"), buf("red_v", 1, scope="local")
    allreduce = ThreadAllReduce(argmax_reducer(), (k, load(A, k)), (red_i, red_v), "threadIdx.x", 2)
    loops = bind(k, 2, "threadIdx.x", allreduce)
    text = str(lower_thread_allreduce(Allocate(red_i, c(1), Allocate(red_v, c(1), loops))))
    step = text.index("red_other = warp_shuffle_down(red_mask, red_v[0], 1, 2)")
    new_i = text.index("red_new = select(red_v[0] >= red_other, red_i[0], red_other)", step)
    new_v = text.index("red_new = select(red_v[0] >= red_other, red_v[0], red_other)", step)
    assert new_i < new_v < text.index("red_i[0] = red_new", new_v)


@pytest.mark.parametrize(
    "tag, launched, message",
    [
        ("blockIdx.x", 32, "only threadIdx.x/y/z can be reduced"),
        ("threadIdx.x", 16, "extent 32, but the kernel launches only 16 threads"),
    ],
)
def test_unreducible_tags_and_extents_are_refused(tag, launched, message):
    k = Var("k")
    allreduce = ThreadAllReduce(sum_reducer(), (load(A, k),), (RED,), tag, 32)
    with pytest.raises(LoweringError, match=message):
        lower_thread_allreduce(Allocate(RED, c(1), bind(k, launched, "threadIdx.x", allreduce)))


def test_symbolic_thread_count_is_refused():
    k, n = Var("k"), Var("n")
    allreduce = ThreadAllReduce(sum_reducer(), (load(A, k),), (RED,), "threadIdx.x", 32)
    body = bind(k, n, "threadIdx.x", allreduce)
    with pytest.raises(LoweringError, match="symbolic count"):
        lower_thread_allreduce(Allocate(RED, c(1), body))


def test_cuda_lowering_shows_the_pass_and_leaves_no_allreduce(capsys):
    A_ = te.placeholder((8, 70), name="A")
    k = te.reduce_axis((0, 70), name="k")
    S = te.compute((8,), lambda i: te.sum(A_[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    s[S].bind(S.op.axis[0], te.thread_axis("blockIdx.x"))
    s[S].bind(k, te.thread_axis("threadIdx.x"))
    func = tf.lower(s, [A_, S], target="cuda", trace=True)
    assert "# after lower_thread_allreduce \n" in capsys.readouterr().out
    assert not any(isinstance(n, ThreadAllReduce) for n in walk(func.body))
    assert any(isinstance(n, Add) for n in walk(func.body))
