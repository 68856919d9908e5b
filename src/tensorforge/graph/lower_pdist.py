"""F.pdist (aten._pdist_forward) on CPU targets as an ir_builder kernel: the p-norm distance of
each pair of rows i < j of an (n, m) matrix, in torch's order (row i's pairs, then row i + 1's).

Each task is a row i; its pairs are taken LANES at a time along j, a vector of sums over the m
columns, so the columns of a few rows read are contiguous: the matrix is read transposed, (m, n)
padded with LANES columns of zeros (the last block's lanes past n read them, their results are
not stored). Eager's kernel vectorizes along the columns instead, which a few columns leave
mostly idle (2000 x 3: 38 ms, 19 ns a pair).
"""

from __future__ import annotations

import math

import torch

from tensorforge import te
from tensorforge.graph.extern_kernels import each, extern_kernel, wide
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.values import Lazy, Unsupported, in_dtype, opmath_dtype

aten = torch.ops.aten

LANES = 16  # pairs a step computes side by side (a vector of float32 sums)
FEW_COLUMNS = 32  # past these, only p = 1 and 2 beat eager's kernel


def _p_of(node) -> float:
    return float(node.args[1]) if len(node.args) > 1 else float(node.kwargs.get("p", 2.0))


def _eager_wins(node) -> bool:
    """Many columns with another p than 1 or 2 (eager's kernel vectorizes along the columns)."""
    val = node.args[0].meta.get("val") if hasattr(node.args[0], "meta") else None
    shape = tuple(getattr(val, "shape", ()))
    m = shape[-1] if shape else None
    return _p_of(node) not in (1.0, 2.0) and not (isinstance(m, int) and m <= FEW_COLUMNS)


# 1 thread, float32, eager ms against the kernel's (load ~7): 2000 x 3, p = 2: 40.3 against
# 0.99, p = 1 32.0 / 0.92, p = 0 30.7 / 1.03, inf 33.4 / 1.04, 3 145 / 39; 256 x 17, p = 2:
# 0.161 / 0.054, inf 0.152 / 0.125, 3 5.95 / 4.70; 1000 x 64, p = 2: 2.87 / 2.27, p = 1 2.26 /
# 2.05, but p = 0 4.82 / 4.72, inf 4.04 / 7.45, 3 205 / 235 (pow lane by lane)
eager_on_cpu(aten._pdist_forward.default, when=_eager_wins, what="of many columns, p not 1 or 2")


def _term(p: float, diff: te.Expr) -> te.Expr:
    """One column's contribution to a pair's sum."""
    a = te.abs(diff)
    if p == 0:  # (a NaN stays NaN, as eager's min(ceil(|diff|), 1))
        zero, one = te.const(0.0, diff.dtype), te.const(1.0, diff.dtype)
        return te.if_then_else(diff == zero, zero, te.if_then_else(diff == diff, one, diff))
    if p == 1 or p == math.inf:
        return a
    if p == 2:
        return diff * diff
    return te.power(a, te.const(p, diff.dtype))


def _combine(p: float, total: te.Expr, term: te.Expr) -> te.Expr:
    return te.max(total, term) if p == math.inf else total + term


def _finish(p: float, total: te.Expr) -> te.Expr:
    if p in (0, 1, math.inf):
        return total
    if p == 2:
        return te.sqrt(total)
    return te.power(total, te.const(1.0 / p, total.dtype))


@lowers(aten._pdist_forward.default)
def pdist(ctx, node, x, p=2.0):
    if ctx.target.kind != "llvm":
        raise Unsupported("pdist on a GPU (the kernel is the CPU's)")
    x = ctx.lazy(x)
    p = float(p)
    if x.ndim != 2 or not (isinstance(x.shape[0], int) and isinstance(x.shape[1], int)):
        raise Unsupported("pdist of other than a 2-d matrix of static size")
    if x.dtype not in ("float32", "float64") or p < 0 or math.isnan(p):
        raise Unsupported(f"pdist of {x.dtype}, p = {p}")
    n, m = x.shape
    if n < 2 or m < 1:
        raise Unsupported("pdist of fewer than 2 rows or no columns")
    acc = opmath_dtype(x.dtype)
    width = n + LANES

    def transposed(idx):
        c, j = idx
        v = in_dtype(x.at((te.min(j, n - 1), c)), acc)
        return te.if_then_else(j < n, v, te.const(0.0, acc))

    columns = Lazy((m, width), acc, transposed, x.reads, x.nodes + (node.name,), 2)
    pairs = n * (n - 1) // 2

    def program(ib, ins, out):
        xt = ins[0]
        with each(ib, n - 1, False, "i") as i:
            first = ib.let("first", i + 1)
            base = ib.let("base", i * n - i * (i + 1) // 2)  # the pair (i, i + 1)'s place
            blocks = (wide(n) - first + (LANES - 1)) // LANES
            with ib.for_range(0, blocks, name="b") as b:
                j0 = ib.let("j0", first + b * LANES)
                sums = ib.allocate(acc, LANES, name="sums", scope="local")
                with ib.for_range(0, LANES, name="l", kind="vectorize") as lane:
                    sums[lane] = te.const(0.0, acc)
                with ib.for_range(0, m, name="c") as c:
                    xi = ib.let("xi", xt[c * width + i])
                    with ib.for_range(0, LANES, name="l", kind="vectorize") as lane:
                        term = _term(p, xi - xt[c * width + j0 + lane])
                        sums[lane] = _combine(p, sums[lane], term)
                at = base + (j0 - first)
                with ib.if_scope(j0 + LANES <= n):
                    with ib.for_range(0, LANES, name="l", kind="vectorize") as lane:
                        out[at + lane] = in_dtype(_finish(p, sums[lane]), x.dtype)
                with ib.else_scope():
                    with ib.for_range(0, wide(n) - j0, name="l") as lane:
                        out[at + lane] = in_dtype(_finish(p, sums[lane]), x.dtype)

    return extern_kernel(ctx, node, [columns], (pairs,), x.dtype, program)
