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
    return isinstance(x, Expr) or getattr(x, "_is_stmt", False) is True


_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(node: Any) -> tuple[str, ...]:
    """Names of the fields that may hold child nodes (cached per class: fields() is slow)."""
    cls = type(node)
    names = _FIELDS.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(cls) or cls is CommReducer:
            names = ()
        else:
            names = tuple(f.name for f in dataclasses.fields(cls))
        _FIELDS[cls] = names
    return names


def children(node: Any) -> list[Any]:
    """The direct child nodes of `node`, in field order (tuples flattened)."""
    out = []
    for name in _field_names(node):
        value = getattr(node, name)
        if _is_node(value):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if _is_node(v))
    return out


def map_children(node: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuild `node` with `fn` applied to each child; returns `node` itself if nothing changed."""
    changes = {}
    for name in _field_names(node):
        value = getattr(node, name)
        if _is_node(value):
            new = fn(value)
            if new is not value:
                changes[name] = new
        elif isinstance(value, tuple) and any(_is_node(v) for v in value):
            new_items = tuple(fn(v) if _is_node(v) else v for v in value)
            if any(n is not o for n, o in zip(new_items, value)):
                changes[name] = new_items
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
