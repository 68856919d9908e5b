"""View and layout operators as index expressions (no copies): reshape, permute, expand, slice,
select, split, cat, squeeze/unsqueeze.

A reshape of a value that reads an anchor keeps it (the row-major order is unchanged: the anchor's
consumers still compute in its space); any other view of one materializes it first.
"""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.registry import lowers
from tensorforge.graph.symbols import is_symbolic
from tensorforge.graph.values import (
    Lazy,
    NeedsEagerGraph,
    Unsupported,
    broadcast_index,
    is_one,
    is_static,
    read_buffer,
    reshape_index,
    same_shape,
)
from tensorforge.ir.arith import simplify_expr
from tensorforge.te.expr import Cast, TensorRead
from tensorforge.te.visit import walk

aten = torch.ops.aten


def _no_logical(idx):
    raise AssertionError("an anchored value is read in its anchor's space")


def _view(x: Lazy, shape: tuple, at) -> Lazy:
    return Lazy(shape, x.dtype, at, x.reads, x.nodes, x.cost)


@lowers(
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.unsqueeze.default,
    aten.flatten.using_ints,
)
def reshape(ctx, node, x, *rest):
    return reshaped(ctx.lazy(x), ctx.shape_of(node))


def reshaped(x: Lazy, out: tuple) -> Lazy:
    """`x` viewed as `out` (same element count, row-major): an index expression, no copy."""
    if x.anchor is not None:
        old, in_shape = x.to_logical, x.shape
        return Lazy(
            out,
            x.dtype,
            _no_logical,
            x.reads,
            x.nodes,
            x.cost,
            x.anchor,
            x.at_anchor,
            lambda ia: reshape_index(old(ia), in_shape, out),
        )
    if x.source is not None:
        return read_buffer(x.source, out)
    return _view(x, out, lambda idx: x.at(reshape_index(idx, out, x.shape)))


@lowers(aten.as_strided.default)
def as_strided(ctx, node, x, size, stride, storage_offset=None):
    """x's storage read at other strides (AOTAutograd's restrides, e.g. of a (1, 768, 1, 1)
    mean to channels-last strides in ConvNeXt): out[idx] is the element at storage position
    offset + sum(idx * stride), where x's elements fill their storage densely, in some order of
    its dimensions (eager's strides for x, from its fake tensor: a permute's result is not
    row-major). Any other layout would need memory that we do not hold as eager does (our
    buffers are row-major, the part of a base outside x absent): the graph runs eagerly."""
    source = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    order = _dense_order(source) if isinstance(source, torch.Tensor) else None
    if order is None:
        raise NeedsEagerGraph(f"{node.name}: as_strided of a tensor that does not fill its storage")
    if not is_static([*size, *stride, storage_offset or 0, *x.shape]):
        raise Unsupported("as_strided at run-time sizes")
    x = ctx.no_anchor(x)
    in_memory = [x.shape[d] for d in order]  # x's dimensions from the outermost in storage
    numel = 1
    for extent in in_memory:
        numel *= extent

    def at(idx):
        flat = storage_offset or 0
        for i, extent, step in zip(idx, size, stride):
            if extent != 1:
                flat = flat + i * step
        position = reshape_index((flat,), (numel,), in_memory)
        index = [0] * x.ndim
        for d, i in zip(order, position):
            index[d] = i
        return x.at(tuple(index))

    return _view(x, ctx.shape_of(node), at)


def _dense_order(t: torch.Tensor) -> list[int] | None:
    """t's dimensions from the largest stride down, where t's elements fill its storage exactly
    (no gaps, no overlap, from its start); None otherwise."""
    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return None
    if t.storage_offset() != 0 or nbytes != t.numel() * t.element_size():
        return None
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), d))
    expected = 1
    for d in reversed(order):
        if t.shape[d] != 1 and t.stride(d) != expected:
            return None
        expected *= t.shape[d]
    return order


@lowers(aten.permute.default)
def permute(ctx, node, x, dims):
    x = ctx.no_anchor(x)
    dims = [d % x.ndim for d in dims]
    inverse = [dims.index(k) for k in range(x.ndim)]
    return _view(
        x, ctx.shape_of(node), lambda idx: x.at(tuple(idx[inverse[k]] for k in range(x.ndim)))
    )


@lowers(aten.t.default, aten.transpose.int)
def transpose(ctx, node, x, d0=0, d1=1):
    x = ctx.no_anchor(x)
    if x.ndim < 2:
        return x
    dims = list(range(x.ndim))
    d0, d1 = d0 % x.ndim, d1 % x.ndim
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return _view(
        x, ctx.shape_of(node), lambda idx: x.at(tuple(idx[dims[k]] for k in range(x.ndim)))
    )


@lowers(aten.flip.default)
def flip(ctx, node, x, dims):
    x = ctx.no_anchor(x)
    flipped = {d % x.ndim for d in dims} if x.ndim else set()
    size = x.shape
    return _view(
        x,
        ctx.shape_of(node),
        lambda idx: x.at(tuple(size[d] - 1 - i if d in flipped else i for d, i in enumerate(idx))),
    )


@lowers(aten.repeat.default)
def repeat(ctx, node, x, repeats):
    """Tiles of x, `repeats` along each dimension (new leading ones first): element i of a
    dimension of x's size n is element i % n of x."""
    x = ctx.no_anchor(x)
    out = ctx.shape_of(node)
    lead = len(out) - x.ndim
    return _view(x, out, lambda idx: x.at(tuple(i % n for i, n in zip(idx[lead:], x.shape))))


@lowers(aten.expand.default)
def expand(ctx, node, x, size, implicit=False):
    x = ctx.no_anchor(x)
    out = ctx.shape_of(node)
    lead = len(out) - x.ndim
    if all(is_one(s) for s in out[:lead]) and same_shape(out[lead:], x.shape):
        return reshape(ctx, node, x)  # only leading 1s: the same elements in the same order
    return _view(x, out, lambda idx: x.at(broadcast_index(idx, x.shape, out)))


@lowers(aten.slice.Tensor)
def slice_(ctx, node, x, dim=0, start=None, end=None, step=1):
    x = ctx.no_anchor(x)
    dim = dim % x.ndim
    size = x.shape[dim]
    start = 0 if start is None else start
    if isinstance(start, int) and start < 0:  # from the end, at least 0 (x[-3:] of 2: all)
        start = max(start + size, 0) if isinstance(size, int) else te.max(size + start, 0)
    if isinstance(start, int) and isinstance(size, int):
        start = min(start, size)
    out = ctx.shape_of(node)

    def at(idx):
        inner = list(idx)
        inner[dim] = idx[dim] * step + start if step != 1 else idx[dim] + start
        return x.at(tuple(inner))

    return _view(x, out, at)


@lowers(aten.select.int)
def select(ctx, node, x, dim, index):
    x = ctx.no_anchor(x)
    dim = dim % x.ndim
    if isinstance(index, int) and index < 0:  # (torch checks it is in range)
        index = x.shape[dim] + index
    return _view(
        x, ctx.shape_of(node), lambda idx: x.at(tuple(idx[:dim]) + (index,) + tuple(idx[dim:]))
    )


@lowers(aten.diagonal.default)
def diagonal(ctx, node, x, offset=0, dim1=0, dim2=1):
    """The diagonal of dims dim1 and dim2 (above it for offset > 0, below for < 0) as x's last
    dimension, the other dims kept in order: out[..., k] = x[.., k + below, .., k + above, ..]."""
    x = ctx.no_anchor(x)
    dim1, dim2 = dim1 % x.ndim, dim2 % x.ndim
    rest = [d for d in range(x.ndim) if d not in (dim1, dim2)]
    above, below = max(offset, 0), max(-offset, 0)

    def at(idx):
        index = [None] * x.ndim
        for d, i in zip(rest, idx[:-1]):
            index[d] = i
        index[dim1], index[dim2] = idx[-1] + below, idx[-1] + above
        return x.at(tuple(index))

    return _view(x, ctx.shape_of(node), at)


@lowers(aten.unfold.default)
def unfold(ctx, node, x, dimension, size, step):
    """Windows of `size` every `step` along `dimension`, each a new last dimension:
    out[.., i, .., j] = x[.., i * step + j, ..]."""
    x = ctx.no_anchor(x)
    if x.ndim == 0:
        return _view(x, ctx.shape_of(node), lambda idx: x.at(()))
    dim = dimension % x.ndim

    def at(idx):
        index = list(idx[:-1])
        index[dim] = idx[dim] * step + idx[-1]
        return x.at(tuple(index))

    return _view(x, ctx.shape_of(node), at)


@lowers(aten.split.Tensor, aten.split_with_sizes.default)
def split(ctx, node, x, sizes, dim=0):
    x = ctx.no_anchor(x)
    dim = dim % x.ndim
    results, offset = [], 0
    for k in range(len(node.meta["val"])):
        shape = ctx.shape_of(node, k)
        results.append(_offset_view(x, shape, dim, offset))
        offset = offset + shape[dim]
    return tuple(results)


def _offset_view(x: Lazy, shape, dim: int, offset) -> Lazy:
    def at(idx):
        inner = list(idx)
        inner[dim] = idx[dim] + offset
        return x.at(tuple(inner))

    return _view(x, shape, at)


@lowers(aten.cat.default)
def cat(ctx, node, tensors, dim=0):
    out = ctx.shape_of(node)
    dim = dim % len(out)
    dtype = ctx.dtype_of(node)
    parts = [ctx.no_anchor(t) for t in tensors]
    parts = [p for p in parts if not (isinstance(p.shape[dim], int) and p.shape[dim] == 0)]
    if not parts:
        raise Unsupported("cat of empty tensors")
    if any(p.ndim != len(out) for p in parts):
        raise Unsupported("cat of tensors of different ranks")
    offsets, offset = [], 0
    for p in parts:
        offsets.append(offset)
        offset = offset + p.shape[dim]

    def at(idx):
        i = idx[dim]
        value = None
        for p, start in zip(parts, offsets):
            inner = list(idx)
            # clamped: a select may read both sides, so neither may leave its part
            inner[dim] = te.max(te.min(i - start, p.shape[dim] - 1), 0)
            here = p.at(tuple(inner))
            here = here if here.dtype == dtype else here.astype(dtype)
            value = here if value is None else te.if_then_else(i >= start, here, value)
        return value

    reads = frozenset().union(*[p.reads for p in parts])
    nodes = tuple(n for p in parts for n in p.nodes) + (node.name,)
    return Lazy(out, dtype, at, reads, nodes, 1 + sum(p.cost for p in parts))


@lowers(aten.index.Tensor, aten._unsafe_index.Tensor)
def index(ctx, node, x, indices):
    """x[..., i0, i1, ...] with integer index tensors (broadcast together) on consecutive
    dimensions: a gather, each index read at the output's position (a nearest upsample's
    `arange * scale` indices are expressions, no memory). Out-of-range indices are clamped."""
    x = ctx.no_anchor(x)
    dims = [d for d, t in enumerate(indices) if t is not None]
    if not dims or dims != list(range(dims[0], dims[-1] + 1)):
        raise Unsupported("index tensors on dimensions that are not consecutive")
    tensors = [ctx.no_anchor(indices[d]) for d in dims]
    if any(t.dtype not in ("int64", "int32") for t in tensors):
        raise Unsupported("boolean or non-integer index tensors")
    out = ctx.shape_of(node)
    first, rank = dims[0], len(out) - (x.ndim - len(dims))  # rank: of the broadcast indices
    bshape = out[first : first + rank]

    def at(idx):
        inner = list(idx[:first])
        for d, t in zip(dims, tensors):
            i = t.at(broadcast_index(idx[first : first + rank], t.shape, bshape)).astype("int32")
            size = x.shape[d]
            i = te.if_then_else(i < 0, i + size, i)  # torch's negative indices count from the end
            inner.append(te.max(te.min(i, size - 1), 0))
        inner.extend(idx[first + rank :])
        return x.at(tuple(inner))

    reads = frozenset().union(x.reads, *[t.reads for t in tensors])
    nodes = tuple(n for t in (x, *tensors) for n in t.nodes) + (node.name,)
    return Lazy(out, x.dtype, at, reads, nodes, 2 + x.cost + sum(t.cost for t in tensors))


def _clamped_index(i, size):
    """An index read from a tensor as an in-range int32 position (negative: from the end)."""
    i = i.astype("int32")
    i = te.if_then_else(i < 0, i + size, i)
    return te.max(te.min(i, size - 1), 0)


@lowers(aten.index_select.default)
def index_select(ctx, node, x, dim, index):
    """x's slices along `dim` at the positions a 1-d (or 0-d) index tensor holds."""
    x, index = ctx.no_anchor(x), ctx.no_anchor(index)
    dim = dim % max(x.ndim, 1)
    if x.ndim == 0 or index.ndim > 1:
        raise Unsupported("index_select of a 0-d tensor or by a 2-d index")

    def at(idx):
        inner = list(idx)
        inner[dim] = _clamped_index(index.at((idx[dim],) if index.ndim else ()), x.shape[dim])
        return x.at(tuple(inner))

    nodes = x.nodes + index.nodes + (node.name,)
    return Lazy(ctx.shape_of(node), x.dtype, at, x.reads | index.reads, nodes, 2 + x.cost)


@lowers(aten.gather.default)
def gather(ctx, node, x, dim, index, sparse_grad=False):
    """out[i] = x[i, with i[dim] replaced by index[i]] (the output takes the index's shape)."""
    x, index = ctx.no_anchor(x), ctx.no_anchor(index)
    if x.ndim == 0 or x.ndim != index.ndim:
        raise Unsupported("gather of a 0-d tensor")
    dim = dim % x.ndim

    def at(idx):
        inner = list(idx)
        inner[dim] = _clamped_index(index.at(tuple(idx)), x.shape[dim])
        return x.at(tuple(inner))

    nodes = x.nodes + index.nodes + (node.name,)
    return Lazy(ctx.shape_of(node), x.dtype, at, x.reads | index.reads, nodes, 2 + x.cost)


@lowers(aten.constant_pad_nd.default)
def constant_pad_nd(ctx, node, x, pad, value=0):
    """F.pad(x, (left, right, top, bottom, ...), value): pairs from the last dimension back; a
    negative pad crops."""
    x = ctx.no_anchor(x)
    out = ctx.shape_of(node)
    starts = {x.ndim - 1 - k: pad[2 * k] for k in range(len(pad) // 2)}

    def at(idx):
        inner, inside = list(idx), []
        for d, before in starts.items():
            inner[d] = idx[d] - before
            inside += [inner[d] >= 0, inner[d] < x.shape[d]]
            inner[d] = te.max(te.min(inner[d], x.shape[d] - 1), 0)
        v = x.at(tuple(inner))
        return te.if_then_else(te.all(*inside), v, te.const(value, v.dtype)) if inside else v

    return Lazy(out, x.dtype, at, x.reads, x.nodes + (node.name,), 2 + x.cost)


# In-place writes into a part of a tensor (`x[:, 1:3] = y`, `x[0] = y`, `x.diagonal().copy_(y)`)
# reach the graph functionalized as these: the whole input, with the part replaced by `src`.
# Each is a select between the two reads; the source's index is clamped, since a select may
# read both sides.


def _with_part(ctx, node, x: Lazy, src: Lazy, inside, src_index) -> Lazy:
    x, src = ctx.no_anchor(x), ctx.no_anchor(src)
    dtype = x.dtype

    def at(idx):
        part = src.at(src_index(idx))
        part = part if part.dtype == dtype else part.astype(dtype)
        return te.if_then_else(inside(idx), part, x.at(tuple(idx)))

    nodes = x.nodes + src.nodes + (node.name,)
    return Lazy(ctx.shape_of(node), dtype, at, x.reads | src.reads, nodes, 2 + x.cost + src.cost)


def _clamp(i, size):
    return te.max(te.min(i, size - 1), 0)


@lowers(aten.slice_scatter.default)
def slice_scatter(ctx, node, x, src, dim=0, start=None, end=None, step=1):
    dim = dim % x.ndim
    size = x.shape[dim]
    start = 0 if start is None else start
    if isinstance(start, int) and start < 0:
        start = max(start + size, 0) if isinstance(size, int) else te.max(size + start, 0)
    count = src.shape[dim]  # (torch checks that it is the slice's length)

    def inside(idx):
        j = idx[dim] - start
        conditions = [j >= 0, j < count * step]
        if step != 1:
            conditions.append(j % step == 0)
        return te.all(*conditions)

    def src_index(idx):
        inner = list(idx)
        j = idx[dim] - start
        inner[dim] = _clamp(j // step if step != 1 else j, count)
        return tuple(inner)

    return _with_part(ctx, node, x, src, inside, src_index)


@lowers(aten.select_scatter.default)
def select_scatter(ctx, node, x, src, dim, index):
    dim = dim % x.ndim
    if isinstance(index, int) and index < 0:
        index = x.shape[dim] + index
    return _with_part(
        ctx,
        node,
        x,
        src,
        lambda idx: idx[dim] == index,
        lambda idx: tuple(idx[:dim]) + tuple(idx[dim + 1 :]),
    )


@lowers(aten.diagonal_scatter.default)
def diagonal_scatter(ctx, node, x, src, offset=0, dim1=0, dim2=1):
    dim1, dim2 = dim1 % x.ndim, dim2 % x.ndim
    rest = [d for d in range(x.ndim) if d not in (dim1, dim2)]
    above, below = max(offset, 0), max(-offset, 0)
    length = src.shape[-1]

    def inside(idx):
        k = idx[dim1] - below
        return te.all(idx[dim2] - above == k, k >= 0, k < length)

    def src_index(idx):
        return tuple(idx[d] for d in rest) + (_clamp(idx[dim1] - below, length),)

    return _with_part(ctx, node, x, src, inside, src_index)


@lowers(aten.copy.default)
def copy(ctx, node, x, src, non_blocking=False):
    """Functional `x.copy_(src)`: src broadcast to x's shape, in x's dtype (x is not read)."""
    src = ctx.no_anchor(src)
    out, dtype = ctx.shape_of(node), ctx.dtype_of(node)

    def at(idx):
        v = src.at(broadcast_index(idx, src.shape, out))
        return v if v.dtype == dtype else v.astype(dtype)

    return Lazy(out, dtype, at, src.reads, src.nodes + (node.name,), 1 + src.cost)


# ops a lazy value passes through without a copy of its own (clone: the copy bmm's
# decomposition asks for, which the graph layer folds into the index expression)
_VIEWS = {
    aten.clone.default,
    aten.expand.default,
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.transpose.int,
    aten.permute.default,
    aten.slice.Tensor,
    aten.select.int,
    aten.unsqueeze.default,
    aten.squeeze.dim,
}


def rows_contiguous(arg) -> bool:
    """Whether the fx value `arg` has unit stride along its last axis where it is read, as
    eager torch lays it out: its rows lie contiguous. A chain of views alone has its strides
    in the last one's value (a transpose of a transpose is contiguous); through a clone (which
    the lowering reads through, but whose value is contiguous) every view it is taken of must
    have them."""
    chain, node = [], arg
    while isinstance(node, torch.fx.Node):
        chain.append(node)
        if node.target not in _VIEWS or not node.args:
            break
        node = node.args[0]
    if not any(n.target == aten.clone.default for n in chain):
        chain = chain[:1]
    for node in chain:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.ndim == 0:
            return False
        # NOTE: a symbolic stride or size is not known to be 1: int() of it would make Dynamo
        # specialize the size (a guard: a compile per sequence length of attention's K and V)
        if not (_is_one(val.stride()[-1]) or _is_one(val.shape[-1])):
            return False
    return bool(chain)


def _is_one(size) -> bool:
    return not is_symbolic(size) and int(size) == 1


def reads_across_rows(x: Lazy) -> bool:
    """Does `x` read one buffer where its last index moves along another axis of the buffer
    (a permuted view: ConvNeXt's channels-last layer norm over an NCHW convolution's output,
    each row a column of it)? Such a row is read one element per cache line; a copy that
    transposes it first in tiles is cheaper (its layer norm 468 -> 97 + 61 us at 96 x 56²)."""
    if x.anchor is not None or x.ndim < 2 or len(x.reads) != 1:
        return False
    idx = tuple(te.var(f"row_index{d}") for d in range(x.ndim))
    read = x.at(idx)
    while isinstance(read, Cast):
        read = read.value
    if not isinstance(read, TensorRead) or not read.indices:
        return False
    last = idx[-1]
    moves = [any(v is last for v in walk(simplify_expr(e))) for e in read.indices]
    return any(moves) and not moves[-1]
