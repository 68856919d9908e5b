"""GPU intrinsic calls in the loop IR: thread indices and warp shuffles (the CUDA writer prints them).

They are `Call` nodes with reserved names, made by lower_thread_allreduce:

    thread_index(0)                           the thread's index along threadIdx.x (1: y, 2: z)
    warp_shuffle_down(mask, value, offset, w)  `value` of lane `lane + offset` in its w-lane segment
    warp_shuffle(mask, value, lane, w)         `value` of lane `lane` in its w-lane segment

`mask` (uint32) names the lanes that take part; every one of them must reach the call.
"""

from __future__ import annotations

from tensorforge.te.expr import Call, Const, Expr

THREAD_INDEX = "thread_index"
WARP_SHUFFLE_DOWN = "warp_shuffle_down"
WARP_SHUFFLE = "warp_shuffle"
GPU_INTRINSICS = (THREAD_INDEX, WARP_SHUFFLE_DOWN, WARP_SHUFFLE)


def thread_index(axis: str) -> Call:
    """threadIdx.x / y / z as an int32 expression."""
    return Call("int32", THREAD_INDEX, (Const("xyz".index(axis), "int32"),))


def warp_shuffle_down(mask: Expr, value: Expr, offset: int, width: int) -> Call:
    args = (mask, value, Const(offset, "int32"), Const(width, "int32"))
    return Call(value.dtype, WARP_SHUFFLE_DOWN, args)


def warp_shuffle(mask: Expr, value: Expr, lane: int, width: int) -> Call:
    return Call(
        value.dtype, WARP_SHUFFLE, (mask, value, Const(lane, "int32"), Const(width, "int32"))
    )
