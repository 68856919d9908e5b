"""Split a GPU function into kernels: one per root stage, intermediates allocated by the host.

A schedule whose root stages are bound to different grids (rfactor partials in one kernel, the
combine in another; or a bound stage after an unbound one) cannot run as one kernel: a block
cannot wait for the whole grid, and a kernel cannot allocate global memory. As TVM's host/device
split does, each root stage's nest becomes a `KernelLaunch` (launched in order, so each sees
everything the ones before it wrote) and the global intermediates between them stay at the
top, where the host allocates them in device memory before the first launch:

    allocate T (global):                 allocate T (global):
        for b in blockIdx.x: T[..] = ..  ->  kernel kernel0: for b in blockIdx.x: T[..] = ..
        for c in blockIdx.x: C[..] = T.. ->  kernel kernel1: for c in blockIdx.x: C[..] = T..

Consecutive root statements bound to no thread axis share one kernel (one thread runs them in
order). A function of one kernel and no global intermediate stays as it is.
"""

from __future__ import annotations

import dataclasses

from tensorforge.ir.stmt import Allocate, For, KernelLaunch, LoopKind, Seq, Stmt, seq
from tensorforge.ir.visit import walk


def split_device_kernels(stmt: Stmt) -> Stmt:
    """Wrap each root stage's nest in a KernelLaunch where there are several or an intermediate."""
    allocations: list[Allocate] = []
    body = stmt
    while isinstance(body, Allocate) and body.buffer.scope == "global":
        allocations.append(body)
        body = body.body
    kernels: list[list[Stmt]] = []
    for root in list(body.stmts) if isinstance(body, Seq) else [body]:
        if kernels and not _bound(root) and not _bound(kernels[-1][-1]):
            kernels[-1].append(root)  # unbound statements run in order in one thread anyway
        else:
            kernels.append([root])
    if not allocations and len(kernels) <= 1:
        return stmt
    out: Stmt = seq(*(KernelLaunch(f"kernel{i}", seq(*k)) for i, k in enumerate(kernels)))
    for allocation in reversed(allocations):
        out = dataclasses.replace(allocation, body=out)
    return out


def _bound(s: Stmt) -> bool:
    return any(isinstance(n, For) and n.kind is LoopKind.THREAD_BINDING for n in walk(s))
