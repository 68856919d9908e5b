"""Lowering reads the schedule and never writes it; its steps show under trace=True.

Each history test lowers a schedule, changes it, lowers again and compares with a fresh
schedule built straight to the final state: the printed IR must be equal (output never depends
on lowering history).
"""

import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.schedule.to_ir import STEPS
from tensorforge.testing import check_against_numpy

CUDA = "cuda -arch=sm_90"  # lowering for CUDA needs no GPU


def chain(n=61):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + B[i] * A[i], name="C")
    return A, B, C


def gpu_schedule(A, B, C, at_thread: bool):
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    if at_thread:
        s[B].compute_at(s[C], tx)
    return s


def test_cuda_compute_root_after_lowering_matches_a_fresh_schedule():
    A, B, C = chain()
    s = gpu_schedule(A, B, C, at_thread=True)
    first = tf.lower(s, [A, C], target=CUDA)
    assert "scope='local'" in str(first)  # inferred: B is per thread inside threadIdx.x
    assert s[B].scope == "global" and not s[B].scope_explicit  # ... but not written back
    s[B].compute_root()
    again = str(tf.lower(s, [A, C], target=CUDA))
    fresh = str(tf.lower(gpu_schedule(A, B, C, at_thread=False), [A, C], target=CUDA))
    assert again == fresh
    assert "scope='local'" not in again and "scope='global'" in again


def test_cuda_lowering_twice_gives_the_same_ir():
    A, B, C = chain()
    s = gpu_schedule(A, B, C, at_thread=True)
    assert str(tf.lower(s, [A, C], target=CUDA)) == str(tf.lower(s, [A, C], target=CUDA))


def test_cuda_block_level_intermediate_is_shared_only_while_placed_there():
    A, B, C = chain(64)
    s = gpu_schedule(A, B, C, at_thread=False)
    s[B].compute_at(s[C], s[C].leaf_iter_vars[0])  # inside blockIdx.x only: per block
    assert "scope='shared'" in str(tf.lower(s, [A, C], target=CUDA))
    s[B].compute_at(s[C], s[C].leaf_iter_vars[1])
    moved = str(tf.lower(s, [A, C], target=CUDA))
    assert moved == str(tf.lower(gpu_schedule(A, B, C, at_thread=True), [A, C], target=CUDA))


def row_sum_schedule(cross_thread: bool):
    A = te.placeholder((6, 70), name="A")
    k = te.reduce_axis((0, 70), name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, k] * 2.0, axis=k), name="S")
    s = te.create_schedule(S.op)
    s[S].bind(S.op.axis[0], te.thread_axis("blockIdx.x"))
    if cross_thread:
        s[S].bind(k, te.thread_axis("threadIdx.x"))
    return s, [A, S], k


def test_cuda_reduction_bound_to_threads_after_lowering_matches_a_fresh_schedule():
    s, args, k = row_sum_schedule(cross_thread=False)
    assert "warp_shuffle" not in str(tf.lower(s, args, target=CUDA))
    s[args[1]].bind(k, te.thread_axis("threadIdx.x"))
    again = str(tf.lower(s, args, target=CUDA))
    fresh, fresh_args, _ = row_sum_schedule(cross_thread=True)
    assert again == str(tf.lower(fresh, fresh_args, target=CUDA))
    assert "warp_shuffle_down(" in again and "thread_allreduce = sum over threadIdx.x" in again


def cpu_schedule(A, B, C, level: int | None):
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    if level is not None:
        s[B].compute_at(s[C], [xo, xi][level])
    return s


def test_cpu_compute_at_then_compute_root_matches_a_fresh_schedule():
    A, B, C = chain()
    s = cpu_schedule(A, B, C, level=0)
    tf.lower(s, [A, C])
    s[B].compute_root()
    assert str(tf.lower(s, [A, C])) == str(tf.lower(cpu_schedule(A, B, C, None), [A, C]))
    check_against_numpy(s, [A], [C], lambda a: 2 * a + 2 * a * a)


def test_cpu_compute_at_moved_between_lowerings_matches_a_fresh_schedule():
    A, B, C = chain()
    s = cpu_schedule(A, B, C, level=0)
    tf.lower(s, [A, C])
    s[B].compute_at(s[C], s[C].leaf_iter_vars[1])
    assert str(tf.lower(s, [A, C])) == str(tf.lower(cpu_schedule(A, B, C, 1), [A, C]))


def matmul(n=19, m=23, k=11):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def cached(A, B, C, scope: str, level: int):
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, scope, [C])
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    s[AA].compute_at(s[C], [io, jo][level])
    return s, AA


def test_cpu_cache_read_changed_between_lowerings_matches_a_fresh_schedule():
    A, B, C = matmul()
    s, AA = cached(A, B, C, "local", level=0)
    tf.lower(s, [A, B, C])
    s[AA].compute_at(s[C], s[C].leaf_iter_vars[1])
    fresh, _ = cached(A, B, C, "local", level=1)
    assert str(tf.lower(s, [A, B, C])) == str(tf.lower(fresh, [A, B, C]))
    check_against_numpy(s, [A, B], [C], lambda a, b: a @ b, rtol=1e-4, atol=1e-4)


def test_trace_shows_every_lowering_step(capsys):
    A, B, C = chain()
    s = gpu_schedule(A, B, C, at_thread=True)
    tf.lower(s, [A, C], target=CUDA, trace=True)
    out = capsys.readouterr().out
    positions = [out.index(f"# schedule: after {step.__name__}\n") for step in STEPS]
    assert positions == sorted(positions)
    assert "  B: local" in out  # infer_scopes
    assert "  B: loops i: 1" in out  # infer_bounds: one element per thread
    assert "  params: A, C" in out
    assert out.index("# schedule: after order_params") < out.index("# after flatten_storage")


@pytest.mark.parametrize("order", ["consumer_first", "producer_first"])
def test_compute_at_legality_is_judged_on_the_finished_schedule(order):
    # B is read only by D, and D is computed inside C: B at C is legal once D is there
    A = te.placeholder((30,), name="A")
    B = te.compute((30,), lambda i: A[i] + 1.0, name="B")
    D = te.compute((30,), lambda i: B[i] * 3.0, name="D")
    C = te.compute((30,), lambda i: D[i] - A[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=7)
    steps = [lambda: s[D].compute_at(s[C], xo), lambda: s[B].compute_at(s[C], xo)]
    for step in steps if order == "consumer_first" else reversed(steps):
        step()
    check_against_numpy(s, [A], [C], lambda a: (a + 1.0) * 3.0 - a)


def test_an_attachment_illegal_on_the_finished_schedule_names_stage_and_axis():
    A = te.placeholder((30,), name="A")
    B = te.compute((30,), lambda i: A[i] + 1.0, name="B")
    D = te.compute((30,), lambda i: B[i] * 3.0, name="D")
    C = te.compute((30,), lambda i: D[i] - A[i], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=7)
    s[B].compute_at(s[C], xo)  # accepted: C depends on B (through D) ...
    with pytest.raises(
        tf.ScheduleError,
        match=r"'B' is computed at 'i.outer' of 'C', but 'C' does not consume 'B' \(directly, or "
        r"through stages computed inside it\); 'B' is read by: D",
    ):
        tf.lower(s, [A, C])  # ... but D stays at root


def test_compute_at_a_stage_that_never_reads_it_is_refused_at_once():
    A = te.placeholder((30,), name="A")
    B = te.compute((30,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((30,), lambda i: A[i] * 2.0, name="C")
    s = te.create_schedule([B.op, C.op])
    with pytest.raises(tf.ScheduleError, match=r"'C' does not consume 'B'"):
        s[B].compute_at(s[C], C.op.axis[0])
