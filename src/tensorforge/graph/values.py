"""What an ATen value becomes while a graph is lowered: buffers in memory and lazy index functions.

A `Buffer` is a tensor that lives in memory between kernels: a graph input, a constant (a weight),
a kernel's output, or what an eager fallback returned. A `Lazy` is a value not yet computed: a
function from output indices to a tensor expression over buffers. Element-wise operators and view
operators compose lazies (a view is an index expression, never a copy), so a chain of them
becomes one kernel when the value is finally materialized. A lazy may also read one `Anchor`: a
reduction stage (matmul, convolution, row reduction, pool) not yet scheduled, whose element-wise
consumers become its epilogue in the same kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tensorforge import te
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Cast, Expr, Let

Index = tuple  # a tuple of index expressions, one per dimension
Shape = tuple  # a tuple of sizes: ints, or te expressions over the symbolic sizes


class Unsupported(Exception):  # noqa: N818 - a signal between lowering and the lowerer, not an error
    """This node cannot be lowered: it runs in eager torch instead (the reason goes in the report)."""


class NeedsEagerGraph(Exception):  # noqa: N818 - a signal, as Unsupported
    """This node cannot run inside a compiled graph at all, not even eagerly (it reads memory
    as eager lays it out, which the compiled graph does not): the whole graph runs eagerly."""


@dataclass(eq=False)
class Buffer:
    """A tensor in memory: `kind` is "input", "constant", "temp", "output" or "eager".

    `shape` is the allocation's (contiguous, row-major); `node` names the graph value it holds,
    where it holds one exactly (check compares those with eager torch).
    """

    name: str
    shape: Shape
    dtype: str
    kind: str
    node: str | None = None
    placeholder: te.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.placeholder = te.placeholder(self.shape, dtype=self.dtype, name=self.name)

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.kind}, {list(self.shape)}, {self.dtype})"


@dataclass(eq=False)
class Anchor:
    """A reduction stage inside a kernel: `tensor` (a te compute over buffers), the schedule that
    places it (`kind`: "matmul", "conv2d", "row", "softmax", "layer_norm", "window"), and its
    input buffers. Its consumers compute in its output space (`tensor.shape`)."""

    kind: str
    tensor: te.Tensor
    reads: frozenset
    nodes: tuple[str, ...]
    info: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Lazy:
    """A value as an index function: `at(index) -> Expr` over `shape` (logical, as torch sees it).

    With an anchor, the value is also defined in the anchor's space: `at_anchor(anchor_index)`,
    and `to_logical` maps an anchor index to the logical index it lands on (views that keep the
    row-major layout, reshapes, keep that correspondence; anything else materializes first).
    `source` is the buffer this value is the whole contiguous content of (reshaped), if it is.
    """

    shape: Shape
    dtype: str
    at: Callable[[Index], Expr]
    reads: frozenset = frozenset()
    nodes: tuple[str, ...] = ()
    cost: int = 1
    anchor: Anchor | None = None
    at_anchor: Callable[[Index], Expr] | None = None
    to_logical: Callable[[Index], Index] | None = None
    source: Buffer | None = None
    name: str | None = None  # the graph node whose value this is, exactly (check compares it)

    @property
    def ndim(self) -> int:
        return len(self.shape)


def read_buffer(buf: Buffer, shape: Shape | None = None) -> Lazy:
    """The whole buffer as a lazy value, viewed with `shape` (same element count) if given."""
    shape = tuple(buf.shape) if shape is None else tuple(shape)
    if same_shape(shape, buf.shape):
        at = lambda idx: buf.placeholder[tuple(idx)] if idx else buf.placeholder[()]  # noqa: E731
    else:
        at = lambda idx: buf.placeholder[tuple(reshape_index(idx, shape, buf.shape))]  # noqa: E731
    return Lazy(shape, buf.dtype, _scalar_safe(buf, at), frozenset([buf]), source=buf)


def _scalar_safe(buf: Buffer, at):
    if len(buf.shape) == 0:
        return lambda idx: buf.placeholder[()]
    return at


# -- half precision: computed in float32, stored in 16 bits ------------------------------------


def opmath_dtype(dtype: str) -> str:
    """The dtype a value of `dtype` is computed in: float32 for float16 and bfloat16 (eager
    torch's "opmath": products, sums and statistics accumulate in float32, and Inductor computes
    a fused element-wise chain in float32 too), else `dtype` itself."""
    return "float32" if dt.is_half(dtype) else dtype


def let(value: Expr, name: str, body: Callable[[Expr], Expr]) -> Expr:
    """body(v) with v bound to `value` once: the loop IR's passes walk expressions as trees and
    guard the loads in every arm of a select, so a value read in many places (and selected
    between) is better a variable than the load or expression itself (lgamma's kernel took
    minutes to build, a logcumsumexp's a minute)."""
    v = te.var(name, value.dtype)
    return Let(v, value, body(v))


def in_dtype(e: Expr, dtype: str) -> Expr:
    """`e` as `dtype`; where `e` is a value computed in `dtype` and rounded to a half type on the
    way (`Cast(float16, x)`, x float32), the rounding is dropped: inside one kernel a chain is
    computed in float32 and rounded once, where it is stored (Inductor's upcast-to-float32
    code, explicit conversions included, as Inductor does by default). An operator whose result
    jumps (a comparison, floor) does not call it on its operands: Lowerer.pointwise(jumps=)."""
    if isinstance(e, Cast) and dt.is_half(e.dtype) and e.value.dtype == dtype:
        return e.value  # Cast(float32, Cast(float16, x32)) -> x32
    return e if e.dtype == dtype else e.astype(dtype)


def rounded(at: Callable[[Index], Expr], dtype: str) -> Callable[[Index], Expr]:
    """The index function `at` with its values in `dtype`: a reduction's float32 accumulator read
    as the half value it stands for (`in_dtype` drops the rounding again where a consumer
    computes in float32, so it happens once, where the value is stored)."""

    def at_dtype(index):
        value = at(index)
        return in_dtype(value if isinstance(value, Expr) else te.const(value, dtype), dtype)

    return at_dtype


def in_opmath(e: Expr) -> Expr:
    """`e` in the dtype it is computed in (`opmath_dtype`), unrounded where it can be."""
    return in_dtype(e, opmath_dtype(e.dtype))


# -- shapes and indices -----------------------------------------------------------------------


def is_one(size) -> bool:
    return isinstance(size, int) and size == 1


def same_size(a, b) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    from tensorforge.te.expr import structural_equal

    return a is b or structural_equal(a, b)


def same_shape(a: Sequence, b: Sequence) -> bool:
    return len(a) == len(b) and all(same_size(x, y) for x, y in zip(a, b))


def is_static(sizes) -> bool:
    """Whether every size is known at compile time (an int, not a symbolic expression)."""
    return all(isinstance(size, int) for size in sizes)


def numel(shape: Shape):
    total = 1
    for size in shape:
        total = total * size
    return total


def broadcast_index(idx: Index, shape: Shape, out_shape: Shape) -> Index:
    """The index into an operand of `shape` that broadcasts to `out_shape` at `idx`."""
    lead = len(out_shape) - len(shape)
    return tuple(
        0 if is_one(size) and not is_one(out_shape[lead + d]) else idx[lead + d]
        for d, size in enumerate(shape)
    )


def reshape_index(idx: Index, out_shape: Shape, in_shape: Shape) -> Index:
    """The index into a row-major tensor of `in_shape` that a reshape to `out_shape` reads at
    `idx`. Dimensions are matched in groups of equal size products, so merging or splitting a few
    dimensions gives divisions and remainders within the group only; size-1 dimensions read 0."""
    out_keep = [(d, s) for d, s in enumerate(out_shape) if not is_one(s)]
    in_keep = [(d, s) for d, s in enumerate(in_shape) if not is_one(s)]
    result: list = [0] * len(in_shape)
    groups = _groups([s for _, s in out_keep], [s for _, s in in_keep])
    if groups is None:  # no grouping: through one linear index
        groups = [(list(range(len(out_keep))), list(range(len(in_keep))))]
    for outs, ins in groups:
        linear = 0
        for k in outs:
            d, size = out_keep[k]
            linear = linear * size + idx[d]
        for k in reversed(ins):
            d, size = in_keep[k]
            if k == ins[0]:
                result[d] = linear
            else:
                result[d] = linear % size
                linear = linear // size
    return tuple(result)


def _groups(outs: list, ins: list):
    """Pairs of (out dims, in dims) with equal size products, in order; None where they won't."""
    groups, i, j = [], 0, 0
    while i < len(outs) and j < len(ins):
        if same_size(outs[i], ins[j]):
            groups.append(([i], [j]))
            i, j = i + 1, j + 1
            continue
        if not (isinstance(outs[i], int) and isinstance(ins[j], int)):
            return None
        gi, gj, po, pi = [i], [j], outs[i], ins[j]
        i, j = i + 1, j + 1
        while po != pi:
            if po < pi:
                if i >= len(outs) or not isinstance(outs[i], int):
                    return None
                po, i = po * outs[i], i + 1
                gi.append(i - 1)
            else:
                if j >= len(ins) or not isinstance(ins[j], int):
                    return None
                pi, j = pi * ins[j], j + 1
                gj.append(j - 1)
        groups.append((gi, gj))
    return groups if i == len(outs) and j == len(ins) else None
