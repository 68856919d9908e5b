"""Graph outputs that are views of graph inputs through run-time sizes, returned as real views.

AOTAutograd returns an output that aliases an input as a view of that input: it replays the
view's operators on it where their arguments are static; where one is symbolic (`x[:, n // 2:]`,
`x.chunk(2, 1)` of a dynamic size), it calls `input.as_strided(size, stride, storage_offset)`
with the metadata of the tensor the compiled graph returned for it. A kernel's output is a new
contiguous tensor (offset 0, row-major strides), so that view read the wrong elements of the
input (or, for an expanded view, past its end). Such outputs are computed here by torch, on the
inputs themselves: their view operators (and the size arithmetic they read) replayed on each
call's arguments, as cheap as eager and aliasing as eager does.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from tensorforge.graph import symbols as sym


def view_outputs(gm: torch.fx.GraphModule) -> dict[int, torch.fx.Node]:
    """Output position -> node, for each output that is views of a graph input only, at least
    one of them taking a size computed in the graph (those of literal sizes AOT replays)."""
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    values = output.args[0]
    values = list(values) if isinstance(values, (tuple, list)) else [values]
    found = {}
    for k, node in enumerate(values):
        if isinstance(node, torch.fx.Node) and node.op != "placeholder":
            chain = _view_chain(node)
            if chain is not None and any(_symbolic_args(n) for n in chain) and _cheap(node):
                found[k] = node
    return found


def _cheap(node: torch.fx.Node) -> bool:
    """Everything the view reads is inputs, views and sizes (no tensor is computed)."""
    seen = set()
    _ancestors(node, seen)
    return all(
        n.op == "placeholder"
        or n.target is operator.getitem
        or getattr(n.target, "is_view", False)
        or not isinstance(n.meta.get("val"), torch.Tensor)
        for n in seen
    )


def _view_chain(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The view nodes from a placeholder to `node` (None where another operator is on the way)."""
    chain = []
    while node.op != "placeholder":
        target = node.target
        if target is operator.getitem:  # one view of a split
            node = node.args[0]
            continue
        if node.op != "call_function" or not getattr(target, "is_view", False):
            return None
        chain.append(node)
        node = node.args[0]
        if not isinstance(node, torch.fx.Node):
            return None
    return chain[::-1]


def _symbolic_args(node: torch.fx.Node) -> bool:
    """A size argument computed in the graph (from the symbols; a size Dynamo specialized to an
    int after tracing, such as chunk's, was still symbolic in the view AOT recorded) or
    symbolic itself."""
    values = torch.fx.node.map_arg((node.args[1:], node.kwargs), lambda n: n)
    leaves = torch.utils._pytree.tree_leaves(values)
    return any(isinstance(v, torch.fx.Node) or sym.is_symbolic(v) for v in leaves)


class WithOutputViews:
    """A compiled graph whose `views` outputs are replaced, each call, by the graph's own view
    operators run on the call's inputs (`gm` interpreted over those nodes' ancestors only)."""

    _boxed_call = True

    def __init__(self, compiled, gm: torch.fx.GraphModule, views: dict[int, torch.fx.Node]):
        self.compiled = compiled
        self.views = views
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.position = {n: k for k, n in enumerate(placeholders)}
        needed = set()
        for node in views.values():
            _ancestors(node, needed)
        self.nodes = [n for n in gm.graph.nodes if n in needed and n.op != "placeholder"]

    def __call__(self, args: list) -> list:
        outputs = self.compiled(args)
        env = {}

        def value(n):
            return env[n] if n in env else args[self.position[n]]

        for node in self.nodes:
            call_args, call_kwargs = torch.fx.node.map_arg((node.args, node.kwargs), value)
            env[node] = node.target(*call_args, **call_kwargs)
        for k, node in self.views.items():
            outputs[k] = value(node)
        return outputs


def _ancestors(node: torch.fx.Node, seen: set) -> None:
    stack = [node]
    while stack:
        top = stack.pop()
        if top not in seen:
            seen.add(top)
            stack.extend(top.all_input_nodes)
