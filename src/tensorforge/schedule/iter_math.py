"""Loop extents and root-axis values derived through a stage's split/fuse relations."""

from __future__ import annotations

from collections.abc import Mapping

from tensorforge.ir.arith import simplify_expr
from tensorforge.schedule.relations import Fuse, Split
from tensorforge.schedule.stage import Stage
from tensorforge.te.expr import Expr, const
from tensorforge.te.tensor import IterVar


def ceil_div(a: Expr, b: Expr) -> Expr:
    return simplify_expr((a + b - 1) // b)


def iter_extents(
    stage: Stage,
    root_extents: Mapping[IterVar, Expr],
    overrides: Mapping[IterVar, Expr] | None = None,
) -> dict[IterVar, Expr]:
    """Extent of every iter var of `stage`, from its root extents down through the relations.

    `overrides` replaces the extent of some vars (a peeled tail runs its inner loop over the
    remainder only); the vars derived from them follow.
    """
    overrides = overrides or {}
    extents: dict[IterVar, Expr] = {}
    for iv, e in root_extents.items():
        extents[iv] = overrides.get(iv, e)
    for rel in stage.relations:
        if isinstance(rel, Split):
            parent = extents[rel.parent]
            if rel.factor is not None:
                inner, outer = rel.factor, ceil_div(parent, rel.factor)
            else:
                outer, inner = rel.nparts, ceil_div(parent, rel.nparts)
            extents[rel.outer] = overrides.get(rel.outer, outer)
            extents[rel.inner] = overrides.get(rel.inner, simplify_expr(inner))
        elif isinstance(rel, Fuse):
            fused = simplify_expr(extents[rel.outer] * extents[rel.inner])
            extents[rel.fused] = overrides.get(rel.fused, fused)
    return extents


def split_factor(rel: Split, extents: Mapping[IterVar, Expr]) -> Expr:
    """The stride of `outer` in `parent`.

    A factor split's stride is its factor, even in a peeled tail whose inner loop runs over the
    remainder only; an nparts split's stride is ceil(parent / nparts) of the parent's extent
    *here* (a tail's parent is shorter than the main loop's).
    """
    return rel.factor if rel.factor is not None else extents[rel.inner]


def iter_values(
    stage: Stage, extents: Mapping[IterVar, Expr], leaf_values: Mapping[IterVar, Expr]
) -> dict[IterVar, Expr]:
    """Value of every iter var (root axes included, relative to their region's min) given the
    leaves', where `extents` are the extents in effect at this point of the nest (iter_extents
    with the peeled tail's overrides, if any)."""
    values: dict[IterVar, Expr] = dict(leaf_values)
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            factor = split_factor(rel, extents)
            values[rel.parent] = values[rel.outer] * factor + values[rel.inner]
        elif isinstance(rel, Fuse):
            inner_extent = extents[rel.inner]
            values[rel.outer] = values[rel.fused] // inner_extent
            values[rel.inner] = values[rel.fused] % inner_extent
    return values


def leaf_descendants(stage: Stage, iv: IterVar) -> list[IterVar]:
    """The leaf vars derived from `iv` (itself if it is a leaf)."""
    if iv in stage.leaf_iter_vars:
        return [iv]
    out: list[IterVar] = []
    for rel in stage.relations:
        if isinstance(rel, Split) and rel.parent is iv:
            out += leaf_descendants(stage, rel.outer) + leaf_descendants(stage, rel.inner)
        elif isinstance(rel, Fuse) and iv in (rel.outer, rel.inner):
            out += [d for d in leaf_descendants(stage, rel.fused) if d not in out]
    return out


def splits_depend_on_extent_of(stage: Stage, iv: IterVar) -> bool:
    """Does the way leaf values combine (iter_values) change with the extent of `iv`?

    A fuse divides by its inner extent and an nparts split strides by ceil(parent / nparts):
    either one below `iv` does.
    """
    derived = {iv}
    for rel in stage.relations:  # in order: parents come before their children
        if isinstance(rel, Split) and rel.parent in derived:
            if rel.nparts is not None:
                return True
            derived |= {rel.outer, rel.inner}
        elif isinstance(rel, Fuse) and (rel.outer in derived or rel.inner in derived):
            if rel.inner in derived:
                return True
            derived.add(rel.fused)
    return False


def zero() -> Expr:
    return const(0)
