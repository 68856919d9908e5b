"""Reductions: te.sum / te.max / te.min and user-defined commutative reducers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tensorforge.errors import ExprError
from tensorforge.te import dtype as dt
from tensorforge.te.expr import CommReducer, Expr, Max, Min, Reduce, Var, as_expr, const
from tensorforge.te.tensor import IterKind, IterVar


def comm_reducer(
    fcombine: Callable[..., Any], fidentity: Callable[..., Any], name: str = "reduce"
) -> Callable[..., Any]:
    """A reducer from `fcombine(x, y)` and `fidentity(dtype)`; tuples give multi-value reducers.

    The result is called like te.sum: `reducer(expr_or_tuple, axis=k, where=None)`.
    """

    def reducer(source: Any, axis: Any = None, where: Any = None, **kwargs) -> Any:
        sources = (
            tuple(as_expr(s) for s in source)
            if isinstance(source, (tuple, list))
            else (as_expr(source),)
        )
        dtypes = [s.dtype for s in sources]
        lhs = tuple(Var(f"x{i}", d) for i, d in enumerate(dtypes))
        rhs = tuple(Var(f"y{i}", d) for i, d in enumerate(dtypes))
        args = (lhs if len(lhs) > 1 else lhs[0], rhs if len(rhs) > 1 else rhs[0])
        combined = fcombine(*args) if len(lhs) == 1 else fcombine(lhs, rhs)
        result = tuple(combined) if isinstance(combined, (tuple, list)) else (combined,)
        identity = fidentity(*dtypes)
        identity = tuple(identity) if isinstance(identity, (tuple, list)) else (identity,)
        if len(result) != len(sources) or len(identity) != len(sources):
            raise ExprError(
                f"comm_reducer '{name}': fcombine and fidentity must return {len(sources)} values"
            )
        result = tuple(as_expr(r, d) for r, d in zip(result, dtypes))
        identity = tuple(as_expr(v, d).astype(d) for v, d in zip(identity, dtypes))
        combiner = CommReducer(name, lhs, rhs, result, identity)
        return apply_reducer(combiner, sources, axis, where)

    reducer.__name__ = name
    return reducer


def apply_reducer(combiner: CommReducer, sources: tuple[Expr, ...], axis: Any, where: Any) -> Any:
    if axis is None:
        raise ExprError(f"{combiner.name}: give the reduction axis (axis=k or axis=[k1, k2])")
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    for a in axes:
        if not isinstance(a, IterVar) or a.kind is not IterKind.REDUCE:
            raise ExprError(f"{combiner.name}: axis {a!r} is not a te.reduce_axis")
    condition = const(True) if where is None else as_expr(where)
    if not dt.is_bool(condition.dtype):
        raise ExprError(f"{combiner.name}: where= must be a boolean expression, got {condition}")
    reduces = [Reduce(combiner, sources, axes, condition, i) for i in range(len(sources))]
    return reduces[0] if len(reduces) == 1 else tuple(reduces)


def _lowest(dtype: str) -> Expr:
    if dt.is_float(dtype):
        return const(-np.inf, dtype)
    if dt.is_bool(dtype):
        return const(False, dtype)
    return const(int(np.iinfo(dtype).min), dtype)


def _highest(dtype: str) -> Expr:
    if dt.is_float(dtype):
        return const(np.inf, dtype)
    if dt.is_bool(dtype):
        return const(True, dtype)
    return const(int(np.iinfo(dtype).max), dtype)


_sum = comm_reducer(lambda x, y: x + y, lambda d: const(0, d), name="sum")
_max = comm_reducer(lambda x, y: Max(x, y), _lowest, name="max")
_min = comm_reducer(lambda x, y: Min(x, y), _highest, name="min")


def sum(expr: Any, axis: Any = None, where: Any = None) -> Expr:  # noqa: A001 - TVM's name
    """Sum of `expr` over the reduction axis (or axes) where `where` holds."""
    return _sum(expr, axis=axis, where=where)


def max(a: Any, axis: Any = None, where: Any = None) -> Expr:  # noqa: A001
    """Reduction max over `axis`, or `te.max(a, b)`: the element-wise maximum of two expressions."""
    return _two_or_reduce(Max, _max, a, axis, where)


def min(a: Any, axis: Any = None, where: Any = None) -> Expr:  # noqa: A001
    """Reduction min over `axis`, or `te.min(a, b)`: the element-wise minimum."""
    return _two_or_reduce(Min, _min, a, axis, where)


def _two_or_reduce(node: type, reducer: Callable, a: Any, axis: Any, where: Any) -> Expr:
    if axis is not None and not isinstance(axis, (IterVar, list, tuple)):
        from tensorforge.te.expr import _operands

        x, y = _operands(a, axis)  # te.max(a, b): element-wise
        return node(x, y)
    if axis is None and where is None:
        raise ExprError(f"te.{reducer.__name__}: give a reduction axis, or two expressions")
    return reducer(a, axis=axis, where=where)
