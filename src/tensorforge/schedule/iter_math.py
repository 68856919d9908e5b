"""Loop extents and root-axis values derived through a stage's relations (split, fuse, ...).

Each relation knows its own meaning (relations.py); these functions only walk the relations,
forward for extents and backward for values.
"""

from __future__ import annotations

from collections.abc import Mapping

from tensorforge.schedule.stage import Stage
from tensorforge.te.expr import Expr
from tensorforge.te.tensor import IterVar


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
    extents: dict[IterVar, Expr] = {iv: overrides.get(iv, e) for iv, e in root_extents.items()}
    for rel in stage.relations:  # in order: a relation's sources come before it
        for iv, extent in rel.derived_extents(extents).items():
            extents[iv] = overrides.get(iv, extent)
    return extents


def iter_values(
    stage: Stage, extents: Mapping[IterVar, Expr], leaf_values: Mapping[IterVar, Expr]
) -> dict[IterVar, Expr]:
    """Value of every iter var (root axes included, relative to their region's min) given the
    leaves', where `extents` are the extents in effect at this point of the nest (iter_extents
    with the peeled tail's overrides, if any)."""
    values: dict[IterVar, Expr] = dict(leaf_values)
    for rel in reversed(stage.relations):
        values.update(rel.source_values(values, extents))
    return values


def leaf_descendants(stage: Stage, iv: IterVar) -> list[IterVar]:
    """The leaf vars derived from `iv` (itself if it is a leaf)."""
    if iv in stage.leaf_iter_vars:
        return [iv]
    out: list[IterVar] = []
    for rel in stage.relations:
        if iv in rel.sources:
            for child in rel.derived:
                out += [d for d in leaf_descendants(stage, child) if d not in out]
    return out


def splits_depend_on_extent_of(stage: Stage, iv: IterVar) -> bool:
    """Does the way leaf values combine (iter_values) change with the extent of `iv`?

    A fuse divides by its inner extent and an nparts split strides by ceil(parent / nparts):
    either one below `iv` does.
    """
    derived = {iv}
    for rel in stage.relations:  # in order: parents come before their children
        if not any(source in derived for source in rel.sources):
            continue
        if rel.depends_on_extent_of(derived):
            return True
        derived |= set(rel.derived)
    return False
