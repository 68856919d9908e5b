"""The operation graph: a networkx DAG from producers to consumers."""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from tensorforge.te.tensor import Operation


def op_graph(outputs: Iterable[Operation]) -> nx.DiGraph:
    """Every operation the outputs depend on, with an edge producer -> consumer."""
    graph = nx.DiGraph()
    stack = list(outputs)
    while stack:
        op = stack.pop()
        if op in graph and graph.nodes[op].get("visited"):
            continue
        graph.add_node(op, visited=True)
        for t in op.input_tensors:
            graph.add_edge(t.op, op)
            if not graph.nodes[t.op].get("visited"):
                stack.append(t.op)
    return graph


def topological_ops(outputs: Iterable[Operation]) -> list[Operation]:
    """Producers before consumers, ties broken by first discovery for a stable order."""
    outputs = list(outputs)
    graph = op_graph(outputs)
    order = {op: i for i, op in enumerate(_dfs_post_order(outputs))}
    return list(nx.lexicographical_topological_sort(graph, key=lambda op: order[op]))


def _dfs_post_order(outputs: list[Operation]) -> list[Operation]:
    seen: set[int] = set()
    out: list[Operation] = []

    def visit(op: Operation) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        out.append(op)

    for op in outputs:
        visit(op)
    return out
