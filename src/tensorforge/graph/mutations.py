"""Graphs that mutate: make_fx of eager code keeps its in-place operators (`clamp_min_` in
cosine_similarity, `add_`, `relu_`), which `compile_aten` users hand over as they are, while
Dynamo's graphs come functional from AOTAutograd. The lowerer reads every value as a buffer of
its own, and two values in the same storage break that (memory planning may reuse the storage
of the one while the other is still read: cosine_similarity returned wrong values), so a graph
that mutates is traced again through torch.func.functionalize first: each in-place operator
becomes its functional form. A graph input it wrote becomes an extra output of the compiled
graph, copied back into the caller's tensor after each call, as AOTAutograd does.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


def mutates(gm: torch.fx.GraphModule) -> bool:
    """Does any operator of the graph write one of its arguments (a `Tensor(a!)` schema)?"""
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is not None and schema.is_mutable:
            return True
    return False


def functional(gm: torch.fx.GraphModule, example_inputs) -> tuple[torch.fx.GraphModule, list[int]]:
    """The graph with its mutations replaced by functional operators (itself if it has none),
    and the positions of the inputs it writes, whose new values are its outputs past the
    original ones, in that order. Traced on fake tensors, so nothing is computed. A graph that
    changes an input's shape in place (`x.squeeze_()`, which the caller sees) is kept as it is:
    its in-place operator then runs eagerly."""
    if not mutates(gm):
        return gm, []
    traced = make_fx(torch.func.functionalize(gm, remove="mutations"), tracing_mode="fake")(
        *example_inputs
    )
    graph = traced.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    written, values = [], []
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.copy_.default:
            dest, value = node.args[0], node.args[1]
            if dest in placeholders and not node.users:
                if _shape(dest) != _shape(value):  # an input's shape changed in place
                    return gm, []
                written.append(placeholders.index(dest))
                values.append(value)
                graph.erase_node(node)
    if mutates(traced):  # (an input's strides changed in place)
        return gm, []
    if written:
        output = next(n for n in graph.nodes if n.op == "output")
        result = output.args[0]
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        output.args = (tuple(results + values),)
    graph.lint()
    traced.recompile()
    return traced, written


def _shape(node: torch.fx.Node):
    value = node.meta.get("val")
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


class WritesInputs:
    """A compiled graph whose outputs past `count` are new values of the inputs at `written`:
    each call copies them into the caller's tensors and returns the first `count` outputs."""

    def __init__(self, compiled, count: int, written: list[int]):
        self.compiled, self.count, self.written = compiled, count, written

    def __call__(self, inputs):
        outputs = self.compiled(inputs)
        for position, value in zip(self.written, outputs[self.count :]):
            inputs[position].copy_(value)
        return list(outputs[: self.count])

    def __getattr__(self, name):
        return getattr(self.compiled, name)


def output_count(gm: torch.fx.GraphModule) -> int:
    result = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return len(result) if isinstance(result, (list, tuple)) else 1
