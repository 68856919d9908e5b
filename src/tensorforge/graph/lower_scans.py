"""Scans: cumsum, cumprod, cummax / cummin (with indices) and logcumsumexp along any dimension,
as blocked reductions.

A prefix scan is cut in blocks: one kernel reduces each block, the blocks' own prefix scans give
each block its carry (the blocks before it, combined), and the output's kernel reduces its own
block up to itself and combines the carry as an epilogue. With static sizes, blocks of 16 and the
block totals' prefixes computed the same way, until they fit one block (4099 elements: 257 block
totals, 17, 2, then one kernel; about 8 + 8 + 8 reads an element); at run-time sizes, blocks of
64 and each carry reduced directly (two levels, about 32 + m / 128 reads an element). A dimension
of at most 16 (static) is one kernel (one of 64 reads 32 elements an output: 4096 rows of 50,
1 thread: cumsum 2.0 -> 0.36 ms, cummin 63 -> 2.6 ms). Each kernel is a plain reduction (anchors of kind "scan":
the rules' reduction schedule, which "auto" keeps; the first guess took 100x longer on block
sums). Sums and products are float32 for half types (int64 for integers and bools), as torch's.

Every scan is one `_Scan`: a reducer, its identity and its binary combine (the carry's epilogue).
cummax's index at i is the last position k <= i whose element is the running extreme there (or a
NaN): a running max of such positions, itself a scan of a pointwise key (torch's `>=` rule: ties
take the later index; a NaN sticks and each later NaN takes the index). That is the GPU's way; on
the CPU one ir_builder kernel walks each line carrying the extreme and writes both outputs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tensorforge import te
from tensorforge.graph.extern_kernels import Lines, each, extern_kernel_outputs, wide
from tensorforge.graph.lower_reduce import reduction_anchor
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.values import Lazy, Unsupported, in_dtype, is_one, let, opmath_dtype
from tensorforge.te import dtype as dt

aten = torch.ops.aten

ONE_KERNEL = STATIC_BLOCK = 16  # a static dimension up to this is one block
# (longer static dimensions: blocks of STATIC_BLOCK, their totals' prefixes recursively)
RUN_TIME_BLOCK = 64  # a run-time extent's block (its carries reduced directly)


@dataclass(frozen=True)
class _Scan:
    """What a scan combines: `reducer` (te.sum's signature), its `identity(dtype)`, and
    `combine(a, b)`, the same operation on two values (a block's carry and its own part)."""

    name: str
    reducer: Callable
    identity: Callable
    combine: Callable


def _max_propagating_nan(a, b):  # (LLVM's maxnum and CUDA's fmaxf drop a NaN)
    if not dt.is_float(a.dtype):
        return te.max(a, b)
    return te.if_then_else((b > a) | (b != b), b, a)  # (a NaN: a stays; b NaN: b)


def _min_propagating_nan(a, b):
    if not dt.is_float(a.dtype):
        return te.min(a, b)
    return te.if_then_else((b < a) | (b != b), b, a)


def _log_add_exp(a, b):
    """log(exp(a) + exp(b)) without overflow; equal operands (both -inf or +inf) give
    a + log 2, so -inf stays -inf and +inf stays +inf."""
    big, small = te.max(a, b), te.min(a, b)
    spread = te.log(te.exp(small - big) + te.const(1, a.dtype))
    same = a + te.const(math.log(2), a.dtype)
    either_nan = te.if_then_else(a != a, a, b)
    return te.if_then_else(
        (a != a) | (b != b), either_nan, te.if_then_else(a == b, same, big + spread)
    )


def _lowest(dtype):
    return te.const(-math.inf, dtype) if dt.is_float(dtype) else te.min_value(dtype)


def _highest(dtype):
    return te.const(math.inf, dtype) if dt.is_float(dtype) else te.max_value(dtype)


def _scan(name, combine, identity) -> _Scan:
    return _Scan(name, te.comm_reducer(combine, identity, name=name), identity, combine)


SUM = _Scan("cumsum", te.sum, lambda dtype: te.const(0, dtype), operator.add)
PROD = _scan("cumprod", operator.mul, lambda dtype: te.const(1, dtype))
MAX = _scan("cummax", _max_propagating_nan, _lowest)
MIN = _scan("cummin", _min_propagating_nan, _highest)
LOG_SUM_EXP = _scan("logcumsumexp", _log_add_exp, lambda dtype: te.const(-math.inf, dtype))
LAST = _scan("last_position", te.max, lambda dtype: te.const(-1, dtype))


@lowers(aten.cumsum.default, aten.cumprod.default)
def cumsum(ctx, node, x, dim, dtype=None):
    out = ctx.dtype_of(node)
    acc = opmath_dtype(out)
    x = ctx.no_anchor(x)
    if x.ndim == 0:  # (dim 0 or -1: the element itself)
        return ctx.pointwise(lambda v: v, [x], compute=acc)
    scan = SUM if node.target is aten.cumsum.default else PROD
    return _prefix_scan(ctx, node, x, dim % x.ndim, scan, acc, out)


CHUNK_OF_LINES = 64  # lines side by side a task walks where they are interleaved (dim < -1)
SHORT_LINE = 64  # cummax / cummin of static contiguous lines up to this long run eagerly on CPUs


def _short_contiguous_lines(node) -> bool:
    """Are the lines of the scan static, at most SHORT_LINE long and contiguous (dim -1)?
    1 thread (Zen 4), 204800 elements, cummin in lines of m, eager against the kernel: m = 16
    0.54 ms against 0.61, 50 0.33 against 0.31, 128 0.245 against 0.070 (each line's new
    extremes, ~ln m of them, cost both a mispredicted branch; short lines are mostly that)."""
    shape = tuple(node.args[0].meta["val"].shape)
    d = node.args[1] % max(len(shape), 1)
    m = shape[d] if shape else 1
    last = all(isinstance(s, int) and s == 1 for s in shape[d + 1 :])
    return isinstance(m, int) and m <= SHORT_LINE and last


eager_on_cpu(
    aten.cummax.default,
    aten.cummin.default,
    when=_short_contiguous_lines,
    what="of short contiguous lines",
)


def _running_extreme(ctx, node, x: Lazy, d: int, scan: _Scan, out: str) -> tuple[Lazy, Lazy]:
    """cummax / cummin on the CPU as one kernel writing values and indices: each line walks its
    elements carrying the running extreme and its index, a branch where a new one is taken
    (rare on most data, so predicted). Lines in parallel; lines interleaved in memory (a scan
    along an outer dimension) go CHUNK_OF_LINES side by side, a select per element (vectors).
    1 thread (Zen 4), float32, eager against the kernel (benchmarks/scans.py): cummax of
    64 x 4096 along -1 0.225 ms against 0.093, along 0 of 4096 x 50 0.456 against 0.281
    (session 18's two kernels, indices then a gather of the values, took 0.20 against 0.12)."""
    lines = Lines(x.shape, d)
    m, inner = lines.extent, lines.inner
    is_max = scan is MAX
    nan_aware = dt.is_float(x.dtype)

    def takes(v, best):  # torch's rule: a NaN takes the index; later equals take it too
        newer = v >= best if is_max else v <= best
        return (newer | (v != v)) if nan_aware else newer

    def program(ib, ins, outs):
        source, values, indices = ins[0], outs[0], outs[1]
        if is_one(inner):
            with each(ib, lines.count, False, "r", parallel=not is_one(lines.count)) as r:
                start = ib.let("start", lines.start(r))
                j = ib.allocate("int64", 1, name="j", scope="local")
                j[0] = te.const(0, "int64")
                with ib.while_loop(j[0] < wide(m)):  # here j's element is a new extreme
                    at = ib.let("at", j[0])
                    best = ib.let("best", source[start + at])
                    values[start + at], indices[start + at] = _cast(best, out), at
                    j[0] = at + 1
                    # the run up to the next one: the extreme held in a register, so the
                    # compares are off the loop's critical path, and a loop exit is never a
                    # select (an if here became one: compare, mask, blend each step, 1.1 ms);
                    # whole blocks first, where none of the block's elements is taken
                    if not (isinstance(m, int) and m < RUN_BLOCK):
                        # (both sides of `&` are read: the block's reads clamped into the line)
                        first = te.max(te.min(j[0], wide(m) - RUN_BLOCK), 0)
                        block = [
                            takes(source[start + _clamped(first + c, m)], best)
                            for c in range(RUN_BLOCK)
                        ]
                        with ib.while_loop((j[0] + RUN_BLOCK <= wide(m)) & ~_any(block)):
                            with ib.for_range(0, RUN_BLOCK, name="c", kind="vectorize") as c:
                                values[start + j[0] + c] = _cast(best, out)
                                indices[start + j[0] + c] = at
                            j[0] = j[0] + RUN_BLOCK
                    following = source[start + te.min(j[0], wide(m) - 1)]  # (clamped: in bounds)
                    with ib.while_loop((j[0] < wide(m)) & ~takes(following, best)):
                        values[start + j[0]], indices[start + j[0]] = _cast(best, out), at
                        j[0] = j[0] + 1
            return
        chunks = (wide(inner) + (CHUNK_OF_LINES - 1)) // CHUNK_OF_LINES
        with each(ib, wide(lines.outer) * chunks, False, "t") as t:
            o, first = ib.let("o", t // chunks), ib.let("first", (t % chunks) * CHUNK_OF_LINES)
            width = ib.let("width", te.min(wide(inner) - first, CHUNK_OF_LINES))
            base = ib.let("base", o * (wide(m) * wide(inner)) + first)
            best = ib.allocate(x.dtype, CHUNK_OF_LINES, name="best", scope="local")
            at = ib.allocate("int64", CHUNK_OF_LINES, name="at", scope="local")
            with ib.for_range(0, width, name="c") as c:
                best[c], at[c] = source[base + c], te.const(0, "int64")
            with ib.for_range(0, wide(m), name="j") as j:
                row = ib.let("row", base + j * wide(inner))
                with ib.for_range(0, width, name="c") as c:
                    v = ib.let("v", source[row + c])
                    take = takes(v, best[c])
                    best[c] = te.if_then_else(take, v, best[c])
                    at[c] = te.if_then_else(take, j, at[c])
                    values[row + c] = _cast(best[c], out)
                    indices[row + c] = at[c]

    return extern_kernel_outputs(ctx, node, [x], x.shape, (out, "int64"), program)


RUN_BLOCK = 8


def _any(terms: list):
    while len(terms) > 1:
        terms = [a | b for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) // 2 * 2 :]
    return terms[0]


def _clamped(position, m):  # (a static line of a whole block reads in bounds as it is)
    return position if isinstance(m, int) else te.min(position, wide(m) - 1)


def _cast(e, dtype: str):
    return e if e.dtype == dtype else e.astype(dtype)


@lowers(aten.logcumsumexp.default)
def logcumsumexp(ctx, node, x, dim):
    out = ctx.dtype_of(node)
    acc = opmath_dtype(out)
    x = ctx.no_anchor(x)
    if x.ndim == 0:
        return ctx.pointwise(lambda v: v, [x], compute=acc)
    d = dim % x.ndim
    if isinstance(x.shape[d], int) and x.shape[d] > ONE_KERNEL:
        return _log_cumsum_exp(ctx, node, x, d, acc, out)
    return _prefix_scan(ctx, node, x, d, LOG_SUM_EXP, acc, out)


# (of values with NaN and +-inf left out: `b > a` is x86's max instruction, where te.max's
# maxnum also orders NaNs)
FINITE_MAX = te.comm_reducer(lambda a, b: te.if_then_else(b > a, b, a), _lowest, name="finite_max")


def _finite_or_zero(v):
    return te.if_then_else(v - v == te.const(0, v.dtype), v, te.const(0, v.dtype))


def _log_cumsum_exp(ctx, node, x: Lazy, d: int, acc: str, out: str) -> Lazy:
    """logcumsumexp along a static dimension longer than a block: in block b, each element's
    s + log(sum of exp(x_k - s)) over the block's elements up to it, s the largest finite one
    among them (a kernel of its own: so no term above 1 and the largest exactly 1, none
    underflows), combined by log-add-exp with the carry, the blocks before b (the block totals'
    own logcumsumexp, recursively). One exp a term and one log an output, where log-add-exp at
    every step of the block (`_prefix_scan`'s) took an exp and a log a term (1 thread, 64 x
    4096: 11.8 ms against eager's 6.2). +-inf and NaN are terms as any: exp(inf) is inf,
    exp(-inf) 0, NaN stays NaN (s is 0 where no element is finite)."""
    m, block, shape = x.shape[d], STATIC_BLOCK, x.shape

    def along(index, position):
        return (*index[:d], position, *index[d + 1 :])

    def value(v):
        return in_dtype(v, acc)

    k = te.reduce_axis((0, block), name="k")

    def running_finite_max(*i):
        v = value(x.at(along(i, (i[d] // block) * block + k.var)))
        finite = let(v, "v", lambda v: te.if_then_else(v - v == te.const(0, acc), v, _lowest(acc)))
        return FINITE_MAX(finite, axis=k, where=k.var <= i[d] % block)

    shifts = _stored(ctx, node, x, shape, running_finite_max, acc, "shifts")
    blocks = (m + block - 1) // block
    k2 = te.reduce_axis((0, block), name="k")

    def block_sum(*i):  # the block's terms against its last element's shift
        last = te.min(i[d] * block + block - 1, m - 1)
        shift = _finite_or_zero(shifts.at(along(i, last)))
        position = i[d] * block + k2.var
        v = value(x.at(along(i, te.min(position, m - 1))))  # (clamped: read in bounds)
        return te.sum(te.exp(v - shift), axis=k2, where=position < m)

    both = Lazy(x.shape, acc, lambda i: x.at(i), x.reads | shifts.reads, x.nodes)
    sums = _stored(ctx, node, both, along(shape, blocks), block_sum, acc, "block_sums")

    def total(i):
        last = te.min(i[d] * block + block - 1, m - 1)
        return _finite_or_zero(shifts.at(along(i, last))) + te.log(sums.at(i))

    totals = Lazy(along(shape, blocks), acc, total, sums.reads | shifts.reads, x.nodes)
    totals = ctx.materialize(totals)  # (read twice a term below: inlined, a minute to build)
    prefixes = ctx.materialize(
        _log_cumsum_exp(ctx, node, totals, d, acc, acc)
        if blocks > ONE_KERNEL
        else _prefix_scan(ctx, node, totals, d, LOG_SUM_EXP, acc, acc)
    )
    carry = _Carry(prefixes, along, inclusive=True, scan=LOG_SUM_EXP)
    k3 = te.reduce_axis((0, block), name="k")

    def own_block(*i):
        shift = _finite_or_zero(shifts.at(i))
        v = value(x.at(along(i, (i[d] // block) * block + k3.var)))
        return te.sum(te.exp(v - shift), axis=k3, where=k3.var <= i[d] % block)

    stage = te.compute(shape, own_block, name=ctx.unique(f"logcumsumexp_{node.name}"))
    reads = x.reads | shifts.reads | carry.reads
    anchor = reduction_anchor(ctx, "scan", [stage], reads, shape, x.nodes + (node.name,))

    def at(ia):  # (each operand of log-add-exp, read several times there, bound once)
        local = _finite_or_zero(shifts.at(tuple(ia))) + te.log(stage[tuple(ia)])
        carried = carry(ia, ia[d] // block)
        return let(carried, "carry", lambda c: let(local, "local", lambda v: _log_add_exp(c, v)))

    return ctx.anchored(anchor, at, out)


@lowers(aten.cummax.default, aten.cummin.default)
def cummax(ctx, node, x, dim):
    """The running extreme and the index holding it (the later one of equals, a NaN's)."""
    scan = MAX if node.target is aten.cummax.default else MIN
    out = ctx.dtype_of(node, 0)
    if dt.is_bool(out):
        raise Unsupported(f"{scan.name} of bool tensors")
    x = ctx.no_anchor(x)
    if x.ndim == 0:
        shape = x.shape
        values = ctx.pointwise(lambda v: v, [x], shape=shape, dtype=out)
        return values, ctx.pointwise(lambda v: 0, [x], shape=shape, dtype="int64")
    d = dim % x.ndim
    empty = any(isinstance(s, int) and s == 0 for s in x.shape)
    if ctx.target.kind != "cuda" and not empty:
        return _running_extreme(ctx, node, x, d, scan, out)
    values = ctx.materialize(_prefix_scan(ctx, node, x, d, scan, x.dtype, out))

    def key(v, best, *index):  # this position where it holds the running extreme (or a NaN)
        here = index[d].astype(position)
        held = (v == best) | (v != v) if dt.is_float(x.dtype) else v == best
        return te.if_then_else(held, here, te.const(-1, position))

    # positions in int32 where they fit (vector max of int64 needs AVX-512)
    m = x.shape[d]
    position = "int32" if isinstance(m, int) and m < 2**31 else "int64"
    keys = Lazy(
        x.shape,
        position,
        lambda index: key(x.at(index), values.at(index), *index),
        x.reads | values.reads,
        x.nodes + (node.name,),
    )
    return values, _prefix_scan(ctx, node, keys, d, LAST, position, "int64")


def _prefix_scan(ctx, node, x: Lazy, d: int, scan: _Scan, acc: str, out: str) -> Lazy:
    """The inclusive prefix scan of `x` along `d`, in `out` (an anchored value)."""
    m = x.shape[d]
    block = _block_size(m)
    shape = x.shape

    def along(index, position):  # index with dimension d replaced
        return (*index[:d], position, *index[d + 1 :])

    carry = None
    if not (isinstance(m, int) and m <= block):
        carry = _carries(ctx, node, x, d, m, block, scan, acc, along)
    k = te.reduce_axis((0, block), name="k")

    def own_block(*i):  # the elements of i's block up to i
        start = (i[d] // block) * block
        v = in_dtype(x.at(along(i, start + k.var)), acc)
        return scan.reducer(v, axis=k, where=k.var <= i[d] % block)

    stage = te.compute(shape, own_block, name=ctx.unique(f"{scan.name}_{node.name}"))
    reads = x.reads | (carry.reads if carry is not None else frozenset())
    anchor = reduction_anchor(ctx, "scan", [stage], reads, shape, x.nodes + (node.name,))

    def at(ia):
        total = stage[tuple(ia)]
        if carry is None:
            return total
        return scan.combine(carry(ia, ia[d] // block), total)

    return ctx.anchored(anchor, at, out)


def _block_size(m) -> int:
    if not isinstance(m, int):
        return RUN_TIME_BLOCK
    return m if m <= ONE_KERNEL else STATIC_BLOCK


class _Carry:
    """Block b's carry at an index: the blocks before b combined (read from memory)."""

    def __init__(self, stored: Lazy, along, inclusive: bool, scan: _Scan):
        self.stored, self.along, self.inclusive, self.scan = stored, along, inclusive, scan
        self.reads = stored.reads

    def __call__(self, index, b):
        if not self.inclusive:  # (stored: the blocks before each, combined)
            return self.stored.at(self.along(index, b))
        before = self.stored.at(self.along(index, te.max(b - 1, 0)))  # (clamped: in bounds)
        return te.if_then_else(b > 0, before, self.scan.identity(self.stored.dtype))


def _carries(ctx, node, x: Lazy, d: int, m, block: int, scan: _Scan, acc: str, along) -> _Carry:
    """Each block's carry along d: with static sizes the block totals' own inclusive prefix
    scans (the same scheme, one level down), else each carry reduced directly from the totals."""
    blocks = (m + block - 1) // block
    shape = along(x.shape, blocks)
    k = te.reduce_axis((0, block), name="k")

    def block_total(*i):
        position = i[d] * block + k.var
        inside = position < m
        v = in_dtype(x.at(along(i, te.min(position, m - 1))), acc)  # (clamped: read in bounds)
        return scan.reducer(v, axis=k, where=inside)

    totals = _stored(ctx, node, x, shape, block_total, acc, "block_totals")
    if isinstance(m, int):
        prefixes = ctx.materialize(_prefix_scan(ctx, node, totals, d, scan, acc, acc))
        return _Carry(prefixes, along, inclusive=True, scan=scan)
    b = te.reduce_axis((0, blocks), name="b")

    def carry(*i):
        return scan.reducer(totals.at(along(i, b.var)), axis=b, where=b.var < i[d])

    stored = _stored(ctx, node, totals, shape, carry, acc, "carries")
    return _Carry(stored, along, inclusive=False, scan=scan)


def _stored(ctx, node, source: Lazy, shape, body, acc: str, name: str) -> Lazy:
    """The reduction `body` over `shape` (reading `source`) as a kernel of its own, stored."""
    stage = te.compute(shape, body, name=ctx.unique(f"{name}_{node.name}"))
    anchor = reduction_anchor(ctx, "scan", [stage], source.reads, shape, source.nodes)
    return ctx.materialize(ctx.anchored(anchor, lambda ia: stage[tuple(ia)], acc))
