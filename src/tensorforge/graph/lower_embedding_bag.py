"""embedding_bag (sum, mean, max; offsets, include_last_offset, per_sample_weights, padding_idx)
as an ir_builder kernel: each bag's output row sums (averages, takes the largest of) the weight
rows its indices select.

One task per bag (CPU: bags in parallel, the row's elements the inner loop; CUDA: one thread
per output element), each walking its bag's indices in order: deterministic, no atomics. An
index outside the weight (eager raises) or equal to padding_idx adds nothing and does not
count; an empty bag gives zeros, as eager's. Offsets are clamped into the index list.
"""

from __future__ import annotations

import math

import torch

from tensorforge import te
from tensorforge.graph.extern_kernels import each, extern_kernel, vector_loop, wide
from tensorforge.graph.lower_reduce import later_outputs_read
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.values import Lazy, Unsupported, is_one

aten = torch.ops.aten

SUM, MEAN, MAX = 0, 1, 2
LOCAL_ROW = 256  # elements of a bag's row kept in registers (a local array) while it sums


def _mode_of(node) -> int:
    return node.args[4] if len(node.args) > 4 else node.kwargs.get("mode", SUM)


# 1 thread, 512 bags of 16 rows of 64 from 10000 (benchmarks/scatters.py): sum 0.023 ms eager
# against 0.043, mean 0.044 against 0.047 (fbgemm's kernels); max 1.5 against 0.18
BAGS = (aten._embedding_bag_forward_only.default, aten._embedding_bag.default)
eager_on_cpu(*BAGS, when=lambda node: _mode_of(node) != MAX, what="sum / mean")


@lowers(*BAGS)
def embedding_bag(
    ctx,
    node,
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=SUM,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    if later_outputs_read(node):
        raise Unsupported("embedding_bag's offset2bag, bag sizes or max indices are read")
    weight, indices, offsets = (ctx.no_anchor(v) for v in (weight, indices, offsets))
    if weight.dtype not in ("float32", "float64") or weight.ndim != 2:
        raise Unsupported(f"embedding_bag of a {weight.ndim}-d {weight.dtype} weight")
    if indices.ndim != 1 or offsets.ndim != 1 or indices.dtype not in ("int32", "int64"):
        raise Unsupported("embedding_bag with indices or offsets not 1-d integers")
    rows, width, count, bounds = (*weight.shape, indices.shape[0], offsets.shape[0])
    bags = bounds - 1 if include_last_offset else bounds
    empty = any(isinstance(s, int) and s < 1 for s in (bags, width))
    if empty or mode not in (SUM, MEAN, MAX):
        raise Unsupported("embedding_bag with no bags or an empty weight row")
    rows, count = wide(rows), wide(count)  # (int64, as the indices are read)
    weighted = isinstance(per_sample_weights, Lazy)
    operands = [weight, indices, offsets] + ([ctx.no_anchor(per_sample_weights)] if weighted else [])  # fmt: skip
    cuda = ctx.target.kind == "cuda"
    dtype = weight.dtype
    lanes = ctx.target.vector_lanes(dtype) if not cuda else 1
    padding = padding_idx if padding_idx is not None and padding_idx >= 0 else None

    def program(ib, ins, out):
        table, index, offset = ins[:3]

        def bag_range(j):
            """[start, end) of bag j in the index list, clamped into it."""
            start = te.min(te.max(wide(offset[j]), 0), count)
            if include_last_offset:
                end = wide(offset[j + 1])
            else:  # the last bag ends with the list (its following offset is read, not used)
                following = wide(offset[te.min(j + 1, bounds - 1)])
                end = te.if_then_else(j + 1 < bounds, following, count)
            return ib.let("start", start), ib.let("end", te.min(te.max(end, start), count))

        def entry(p):
            """(the weight row of index list position p, whether it counts)."""
            i = ib.let("row", wide(index[p]))
            valid = (i >= 0) & (i < rows)
            if padding is not None:
                valid = valid & (i != padding)
            return i, valid

        def value(i, p, d):
            v = table[i * width + d]
            return v * ins[3][p] if weighted else v

        initial = te.const(-math.inf if mode == MAX else 0.0, dtype)

        def combine(old, new):
            return te.if_then_else(new > old, new, old) if mode == MAX else old + new

        def finish(total, seen):
            if mode == MEAN:
                return te.if_then_else(seen > 0, total / seen.astype(dtype), te.const(0, dtype))
            if mode == MAX:
                return te.if_then_else(seen > 0, total, te.const(0, dtype))
            return total

        if cuda:  # one thread per output element, its sum in a register
            with each(ib, bags * width, True, "f") as f:
                j, d = ib.let("j", f // width), ib.let("d", f % width)
                acc = ib.allocate(dtype, 1, name="acc", scope="local")
                seen = ib.allocate("int64", 1, name="seen", scope="local")
                acc[0], seen[0] = initial, te.const(0, "int64")
                start, end = bag_range(j)
                with ib.for_range(start, end, name="p") as p:
                    i, valid = entry(p)
                    with ib.if_scope(valid):
                        acc[0] = combine(acc[0], value(i, p, d))
                        seen[0] = seen[0] + 1
                out[f] = finish(acc[0], seen[0])
            return
        with each(ib, bags, False, "j", parallel=not is_one(bags)) as j:
            # the bag's row accumulates in registers where it is short, else in the output
            local = isinstance(width, int) and width <= LOCAL_ROW
            row = ib.allocate(dtype, width, name="row", scope="local") if local else out
            base = 0 if local else j * width
            seen = ib.allocate("int64", 1, name="seen", scope="local")
            seen[0] = te.const(0, "int64")

            def clear(d):
                row[base + d] = initial

            vector_loop(ib, width, lanes, clear)
            start, end = bag_range(j)
            with ib.for_range(start, end, name="p") as p:
                i, valid = entry(p)
                with ib.if_scope(valid):
                    seen[0] = seen[0] + 1

                    def add(d):
                        row[base + d] = combine(row[base + d], value(i, p, d))

                    vector_loop(ib, width, lanes, add)

            def store(d):
                out[j * width + d] = finish(row[base + d], seen[0])

            vector_loop(ib, width, lanes, store)

    result = extern_kernel(ctx, node, operands, (bags, width), dtype, program)
    return result, None, None, None
