"""The CPU GEMM tutorial's schedule steps, written the TVM way, each checked against NumPy.

Each step adds to the one before (the default schedule, blocking, vectorize, loop permutation, array packing, a write
cache tiled through `C.op.axis` after `cache_write`, parallel), as a ported TVM script does.
Sizes are non-divisible where the schedule allows it (M by the block, K by the k split).
"""

import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.testing import check_against_numpy

M, N, K = 70, 96, 50  # 70 % 16 and 50 % 4 leave tails; the packed layout needs N % BN == 0
BN = 16
STEPS = ["default", "blocking", "vectorize", "permute", "packing", "write_cache", "parallel"]


def gemm(packed: bool):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    if not packed:
        C = te.compute((M, N), lambda m, n: te.sum(A[m, k] * B[k, n], axis=k), name="C")
        return A, B, None, C
    packedB = te.compute((N // BN, K, BN), lambda x, y, z: B[y, x * BN + z], name="packedB")
    C = te.compute(
        (M, N),
        lambda m, n: te.sum(A[m, k] * packedB[n // BN, k, n % BN], axis=k),
        name="C",
    )
    return A, B, packedB, C


def schedule(step: str):
    """The tutorial's schedule up to and including `step`."""
    upto = STEPS.index(step)
    A, B, packedB, C = gemm(packed=upto >= STEPS.index("packing"))
    s = te.create_schedule(C.op)
    if upto >= STEPS.index("write_cache"):
        CC = s.cache_write(C, "global")
        # the copy-out stage keeps the original axes: C.op.axis names its loops
        mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], BN, BN)
        s[CC].compute_at(s[C], no)
        mc, nc = s[CC].op.axis
        (kaxis,) = s[CC].op.reduce_axis
        ko, ki = s[CC].split(kaxis, factor=4)
        s[CC].reorder(ko, mc, ki, nc)
        s[CC].unroll(ki)
        s[CC].vectorize(nc)
    elif upto >= STEPS.index("blocking"):
        mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], BN, BN)
        (kaxis,) = s[C].op.reduce_axis
        ko, ki = s[C].split(kaxis, factor=4)
        if upto >= STEPS.index("permute"):
            s[C].reorder(mo, no, ko, mi, ki, ni)
        else:
            s[C].reorder(mo, no, ko, ki, mi, ni)
        if upto >= STEPS.index("vectorize"):
            s[C].vectorize(ni)
    if packedB is not None:
        x, y, z = s[packedB].op.axis
        s[packedB].vectorize(z)
        s[packedB].parallel(x)
    if upto >= STEPS.index("parallel"):
        s[C].parallel(mo)
    return s, A, B, C


@pytest.mark.parametrize("step", STEPS)
def test_gemm_tutorial_step_matches_numpy(step):
    s, A, B, C = schedule(step)
    check_against_numpy(s, [A, B], [C], lambda a, b: a @ b, rtol=1e-4, atol=1e-4)


def test_copy_out_stage_keeps_the_original_axes():
    A, B, _, C = gemm(packed=False)
    s = te.create_schedule(C.op)
    original = C.op.axis
    CC = s.cache_write(C, "global")
    assert list(s[C].op.axis) == list(original)  # the very same IterVars
    assert s[C].leaf_iter_vars == list(original)
    assert not set(s[CC].op.axis) & set(original)  # the cache gets fresh ones


def test_a_replaced_axis_with_a_leafs_name_says_which_object_differs():
    A, B, _, C = gemm(packed=False)
    s = te.create_schedule(C.op)
    old = C.op.axis[0]
    s.rfactor(C, C.op.reduce_axis[0])  # the final stage gets fresh axes named like the old
    assert any(v.name == old.name for v in s[C].leaf_iter_vars)
    with pytest.raises(
        tf.ScheduleError,
        match=r"'m' is not a leaf axis of stage 'C' \(it belongs to another stage\): this 'm' is "
        r"an axis of no stage of this schedule .*, a different object from the leaf 'm'",
    ):
        s[C].split(old, factor=4)


def test_an_axis_of_another_stage_is_named():
    A, B, _, C = gemm(packed=False)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    with pytest.raises(tf.ScheduleError, match=r"this 'm.c' is an axis of stage 'C.global'; leaf"):
        s[C].split(s[CC].op.axis[0], factor=4)
