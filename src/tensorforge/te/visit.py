"""The one generic traversal over expression and statement nodes (re-exported by ir.visit).

Nodes are dataclasses whose children are nodes or tuples of nodes; these helpers loop over
`dataclasses.fields`, so a new node type needs no visitor edits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from tensorforge.te.expr import CommReducer, Expr


def _is_node(x: Any) -> bool:
    kind = _NODE.get(type(x))
    if kind is None:
        kind = _NODE[type(x)] = isinstance(x, Expr) or getattr(x, "_is_stmt", False) is True
    return kind


# NOTE: whether a type is a node, per type (`_is_stmt` is a class attribute): every pass walks
# trees through these helpers, and the dictionary costs less than isinstance and getattr
_NODE: dict[type, bool] = {}
_FIELDS: dict[type, tuple[str, ...]] = {}
_LEAF_FIELDS = ("str", "bool")  # annotations of fields that never hold a node (names, dtypes)


def _field_names(node: Any) -> tuple[str, ...]:
    """Names of the fields that may hold child nodes (cached per class: fields() is slow)."""
    cls = type(node)
    names = _FIELDS.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(cls) or cls is CommReducer:
            names = ()
        else:
            names = tuple(f.name for f in dataclasses.fields(cls) if f.type not in _LEAF_FIELDS)
        _FIELDS[cls] = names
    return names


def children(node: Any) -> list[Any]:
    """The direct child nodes of `node`, in field order (tuples flattened)."""
    out = []
    nodes = _NODE
    for name in _field_names(node):
        value = getattr(node, name)
        kind = nodes.get(type(value))
        if kind is None:
            kind = _is_node(value)
        if kind:
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if _is_node(v))
    return out


def map_children(node: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuild `node` with `fn` applied to each child; returns `node` itself if nothing changed."""
    changes = None
    nodes = _NODE
    for name in _field_names(node):
        value = getattr(node, name)
        kind = nodes.get(type(value))
        if kind is None:
            kind = _is_node(value)
        if kind:
            new = fn(value)
            if new is not value:
                if changes is None:
                    changes = {}
                changes[name] = new
        elif isinstance(value, tuple) and value:
            new_items = None
            for k, v in enumerate(value):
                if _is_node(v):
                    w = fn(v)
                    if w is not v:
                        if new_items is None:
                            new_items = list(value)
                        new_items[k] = w
            if new_items is not None:
                if changes is None:
                    changes = {}
                changes[name] = tuple(new_items)
    return dataclasses.replace(node, **changes) if changes else node


def rewrite(node: Any, rule: Callable[[Any], Any | None]) -> Any:
    """Bottom-up: rewrite the children, then apply `rule` to the rebuilt node (None keeps it)."""
    node = map_children(node, lambda child: rewrite(child, rule))
    new = rule(node)
    return node if new is None else new


def rewrite_top_down(node: Any, rule: Callable[[Any], Any | None]) -> Any:
    """Top-down: apply `rule` first; where it returns a node, that node is final (not revisited)."""
    new = rule(node)
    if new is not None:
        return new
    return map_children(node, lambda child: rewrite_top_down(child, rule))


def walk(node: Any) -> Iterator[Any]:
    """Every node under `node` (itself included), pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))
