"""Tensors, the operations that produce them, and iteration variables."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tensorforge.errors import ExprError
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Expr, Reduce, TensorRead, Var, as_expr, const


class IterKind(enum.Enum):
    DATA_PAR = "data_par"  # a spatial axis
    REDUCE = "reduce"  # a reduction axis
    THREAD = "thread"  # a GPU thread/block index


@dataclass(frozen=True)
class Range:
    """The half-open interval [min, min + extent)."""

    min: Expr
    extent: Expr

    @staticmethod
    def of(value: Any) -> Range:
        if isinstance(value, Range):
            return value
        if isinstance(value, (tuple, list)) and len(value) == 2:
            lo, hi = as_expr(value[0]), as_expr(value[1])
            extent = hi - lo
            if isinstance(lo, Const) and isinstance(hi, Const):
                extent = const(hi.value - lo.value)  # int64 past int32's range
            return Range(lo, extent)
        return Range(const(0), as_expr(value))


@dataclass(frozen=True, eq=False)
class IterVar:
    """A loop of a stage: its variable, its domain and its kind. Compared by identity."""

    var: Var
    dom: Range | None
    kind: IterKind = IterKind.DATA_PAR
    thread_tag: str = ""

    @property
    def name(self) -> str:
        return self.var.name

    def __hash__(self) -> int:
        return id(self)

    # An IterVar used in arithmetic stands for its variable (TVM allows `k` in `A[i, k]`).
    def _v(self):
        return self.var

    def __add__(self, o):
        return self.var + o

    def __radd__(self, o):
        return o + self.var

    def __sub__(self, o):
        return self.var - o

    def __rsub__(self, o):
        return o - self.var

    def __mul__(self, o):
        return self.var * o

    def __rmul__(self, o):
        return o * self.var

    def __floordiv__(self, o):
        return self.var // o

    def __mod__(self, o):
        return self.var % o

    def __lt__(self, o):
        return self.var < o

    def __le__(self, o):
        return self.var <= o

    def __gt__(self, o):
        return self.var > o

    def __ge__(self, o):
        return self.var >= o

    def __repr__(self) -> str:
        return f"IterVar({self.name}, {self.kind.value})"


class Operation:
    """Something that produces tensors: a placeholder (input) or a compute."""

    name: str

    @property
    def num_outputs(self) -> int:
        return 1

    def output(self, index: int) -> Tensor:
        return Tensor(self, index)

    @property
    def input_tensors(self) -> list[Tensor]:
        return []


@dataclass(eq=False)
class PlaceholderOp(Operation):
    name: str
    shape: tuple[Expr, ...]
    dtype: str

    def __repr__(self) -> str:
        return f"placeholder({self.name})"


@dataclass(eq=False)
class ComputeOp(Operation):
    name: str
    tag: str
    attrs: dict
    axis: tuple[IterVar, ...]
    reduce_axis: tuple[IterVar, ...]
    body: tuple[Expr, ...]

    @property
    def num_outputs(self) -> int:
        return len(self.body)

    @property
    def shape(self) -> tuple[Expr, ...]:
        return tuple(iv.dom.extent for iv in self.axis)

    @property
    def input_tensors(self) -> list[Tensor]:
        from tensorforge.te.visit import walk

        seen: list[Tensor] = []
        for b in self.body:
            for n in walk(b):
                if isinstance(n, TensorRead) and n.tensor not in seen:
                    seen.append(n.tensor)
        return seen

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.body[0], Reduce)

    def __repr__(self) -> str:
        return f"compute({self.name})"


@dataclass(frozen=True)
class Tensor:
    """Output `value_index` of `op`. Index it (`T[i, j]`) to read it inside a compute."""

    op: Operation
    value_index: int = 0

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.op.shape

    @property
    def dtype(self) -> str:
        if isinstance(self.op, PlaceholderOp):
            return self.op.dtype
        if not isinstance(self.op, ComputeOp):  # te.extern, te.scan
            return self.op.output_dtype(self.value_index)
        return self.op.body[self.value_index].dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def name(self) -> str:
        if self.op.num_outputs == 1:
            return self.op.name
        return f"{self.op.name}.v{self.value_index}"

    def __getitem__(self, indices: Any) -> TensorRead:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise ExprError(
                f"tensor '{self.name}' has {self.ndim} dimensions but was indexed with {len(indices)}"
            )
        exprs = []
        for position, index in enumerate(indices):
            e = _as_expr_in(index, f"index {position} of tensor '{self.name}'")
            if not dt.is_int(e.dtype):
                raise ExprError(
                    f"index {position} of tensor '{self.name}' is {e} of dtype {e.dtype}; "
                    f"indices must be integers"
                )
            exprs.append(e)
        return TensorRead(self, tuple(exprs))

    def __hash__(self) -> int:
        return hash((id(self.op), self.value_index))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Tensor)
            and self.op is other.op
            and self.value_index == other.value_index
        )

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={list(map(str, self.shape))}, {self.dtype})"


# -- builders (API.md §1) ---------------------------------------------------------------------


def _shape(shape: Any, what: str) -> tuple[Expr, ...]:
    if isinstance(shape, (int, Expr)):
        shape = (shape,)
    out = []
    if isinstance(shape, str) or not hasattr(shape, "__iter__"):
        raise ExprError(f"{what}: the shape must be a tuple of extents, got {shape!r}")
    for extent in shape:
        e = _as_expr_in(extent, f"{what}: shape entry")
        if not dt.is_int(e.dtype):
            raise ExprError(f"{what}: shape entries must be integers, got {extent!r}")
        if isinstance(e, Const) and e.value < 0:
            raise ExprError(f"{what}: shape entries must be non-negative, got {extent!r}")
        out.append(e)
    return tuple(out)


def _index_dtype(extent: Expr) -> str:
    """The dtype of a loop over `extent`: int64 for an int64 extent, else int32."""
    return "int64" if extent.dtype == "int64" else "int32"


def _as_expr_in(value: Any, what: str) -> Expr:
    """as_expr, with an error that says where the bad value came from."""
    try:
        return as_expr(value)
    except ExprError as err:
        raise ExprError(f"{what}: {err}") from None


def var(name: str = "v", dtype: str = "int32") -> Var:
    """A symbolic scalar: a dynamic shape or a scalar argument."""
    return Var(name, dt.check_dtype(dtype, f"var '{name}'"))


def placeholder(shape: Any, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    op = PlaceholderOp(name, _shape(shape, f"placeholder '{name}'"), dt.check_dtype(dtype, name))
    return op.output(0)


def reduce_axis(dom: Any, name: str = "rv") -> IterVar:
    """A reduction axis over `dom` = (lo, hi)."""
    if not (isinstance(dom, (tuple, list)) and len(dom) == 2):
        raise ExprError(f"reduce_axis '{name}': dom must be a (lo, hi) pair, got {dom!r}")
    rng = Range.of(dom)
    return IterVar(Var(name, _index_dtype(rng.extent)), rng, IterKind.REDUCE)


def thread_axis(dom: Any = None, tag: str = "", name: str = "") -> IterVar:
    """A GPU thread axis: `thread_axis("threadIdx.x")` or `thread_axis((0, n), "threadIdx.x")`."""
    if isinstance(dom, str):
        dom, tag = None, dom
    valid = {f"{p}.{d}" for p in ("blockIdx", "threadIdx") for d in "xyz"} | {"vthread"}
    if tag not in valid:
        raise ExprError(
            f"thread_axis: unknown tag {tag!r}; expected one of {', '.join(sorted(valid))}"
        )
    return IterVar(
        Var(name or tag), Range.of(dom) if dom is not None else None, IterKind.THREAD, tag
    )


def compute(
    shape: Any,
    fcompute: Callable[..., Any],
    name: str = "compute",
    tag: str = "",
    attrs: dict | None = None,
) -> Tensor | list[Tensor]:
    """A tensor whose element at `indices` is `fcompute(*indices)` (a tuple: several outputs)."""
    extents = _shape(shape, f"compute '{name}'")
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        names = [f"i{k}" for k in range(len(extents))]
    else:
        names = [p.name for p in params]
        if len(names) != len(extents):
            raise ExprError(
                f"compute '{name}': fcompute takes {len(names)} indices but the shape has "
                f"{len(extents)} dimensions"
            )
    # an axis is as wide as its extent: a (2**31 + 5,) shape has an int64 axis, as in TVM
    axis = tuple(
        IterVar(Var(n, _index_dtype(e)), Range(const(0, _index_dtype(e)), e))
        for n, e in zip(names, extents)
    )
    result = fcompute(*[iv.var for iv in axis])
    bodies = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    bodies = tuple(_as_expr_in(b, f"compute '{name}': the value of fcompute") for b in bodies)
    reductions = [b for b in bodies if isinstance(b, Reduce)]
    if reductions and len(reductions) != len(bodies):
        raise ExprError(f"compute '{name}': cannot mix reduction and non-reduction outputs")
    if reductions:
        first = reductions[0]
        for r in reductions[1:]:
            if r.combiner is not first.combiner or r.axis != first.axis:
                raise ExprError(f"compute '{name}': all outputs must come from the same reduction")
    _check_no_nested_reduce(name, bodies)
    reduce_ivs = reductions[0].axis if reductions else ()
    op = ComputeOp(name, tag, dict(attrs or {}), axis, tuple(reduce_ivs), bodies)
    outputs = [op.output(i) for i in range(len(bodies))]
    return outputs[0] if len(outputs) == 1 else outputs


def _check_no_nested_reduce(name: str, bodies: Sequence[Expr]) -> None:
    from tensorforge.te.visit import walk

    for b in bodies:
        inner = b.source if isinstance(b, Reduce) else (b,)
        for e in inner:
            if any(isinstance(n, Reduce) for n in walk(e)):
                raise ExprError(
                    f"compute '{name}': a reduction must be the whole body (te.sum(...)), "
                    f"not part of a larger expression; compute it in its own stage"
                )
