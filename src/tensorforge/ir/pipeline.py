"""The lowering pipeline: every pass, in order. Read this function and you have read the compiler."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from tensorforge.ir.passes.flatten_storage import flatten_storage
from tensorforge.ir.passes.fold_lane_masks import fold_lane_masks
from tensorforge.ir.passes.guard_select_loads import guard_select_loads
from tensorforge.ir.passes.inject_virtual_threads import inject_virtual_threads
from tensorforge.ir.passes.legalize_bfloat16 import legalize_bfloat16
from tensorforge.ir.passes.peel_vector_bounds import peel_vector_bounds
from tensorforge.ir.passes.simplify import simplify
from tensorforge.ir.passes.unmask_private_stores import unmask_private_stores
from tensorforge.ir.passes.unroll_loops import unroll_loops
from tensorforge.ir.passes.vectorize_loops import vectorize_loops
from tensorforge.ir.passes.vectorize_partial_combines import vectorize_partial_combines
from tensorforge.ir.passes.verify import verify_func
from tensorforge.ir.stmt import PrimFunc, Stmt
from tensorforge.target import Target


def passes_for(target: Target) -> list[Callable[[Stmt], Stmt]]:
    # NOTE: on the CPU a double_buffer mark stays an Attr the backend walks through (a no-op)
    gpu_only: list[Callable[[Stmt], Stmt]] = []
    if target.is_gpu:
        from tensorforge.ir.passes.guard_thread_extents import guard_thread_extents
        from tensorforge.ir.passes.inject_double_buffer import inject_double_buffer
        from tensorforge.ir.passes.insert_thread_syncs import insert_thread_syncs
        from tensorforge.ir.passes.lower_thread_allreduce import lower_thread_allreduce
        from tensorforge.ir.passes.split_device_kernels import split_device_kernels

        gpu_only = [
            split_device_kernels,  # one kernel per root stage, intermediates left to the host
            inject_double_buffer,  # double_buffer() marks -> two copies, fill ahead
            insert_thread_syncs,  # __syncthreads() between shared writes and reads
            guard_thread_extents,  # thread loops take their launch extent, guarded if smaller
            lower_thread_allreduce,  # cross-thread reductions -> warp shuffles, shared memory, barriers
        ]
    # bfloat16 computed in float32, rounded after each operation (last: nothing folds the roundings)
    legalize = [] if target.kind.facts.bfloat16_arithmetic else [legalize_bfloat16]
    # a masked store into a buffer of one thread, whole (its old lanes back): CPU only, where
    # every allocation belongs to the thread that runs it
    cpu_only = [] if target.is_gpu else [unmask_private_stores]
    return [
        flatten_storage,  # n-d buffer access -> 1-d offsets, Realize -> Allocate
        inject_virtual_threads,  # vthread loops -> interleaved copies, local storage per copy
        guard_select_loads,  # a load in an untaken select arm never touches memory
        simplify,  # canonical indices, guards proven away, peeled tails folded
        vectorize_partial_combines,  # a serial combine of contiguous partials -> one reduction
        vectorize_loops,  # vectorized loops -> Ramp / Broadcast vector code
        unroll_loops,  # unrolled loops -> copies of their body
        fold_lane_masks,  # masks that unrolling made constant: dropped (or the store is)
        *gpu_only,
        simplify,
        peel_vector_bounds,  # iterations whose lanes alone are clamped or masked: peeled
        *cpu_only,
        *legalize,
    ]


def run_pipeline(
    func: PrimFunc, target: Target, trace: bool = False, debug: bool | None = None
) -> PrimFunc:
    """Lower `func` through every pass, then verify the result (LoweringError if it is invalid).

    With `trace`, print the IR after each pass. With `debug` (or env TF_DEBUG_PASSES=1), verify
    after every pass, so an error names the pass that broke the IR.
    """
    if debug is None:
        debug = os.environ.get("TF_DEBUG_PASSES", "") not in ("", "0")
    if trace:
        print(f"# schedule -> loop IR\n{func}")
    for run in passes_for(target):
        body = run(func.body)
        if trace:
            print(f"# after {run.__name__}", "(unchanged)" if body is func.body else "")
            if body is not func.body:
                print(dataclasses.replace(func, body=body))
        func = dataclasses.replace(func, body=body)
        if debug:
            verify_func(func, after=run.__name__, final=False)
    return verify_func(func, after="the pass pipeline")
