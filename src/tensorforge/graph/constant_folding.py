"""Graph nodes whose values the compiler computes once, from the graph's constants alone: a
mixin of the Lowerer (lowerer.py), which keeps `constant`, `add_constant` and `_derived`.

A node whose tensor inputs are all constants (weight transposes, batch norm's scale arithmetic)
runs now, its result a new constant (`_fold_constants`); an operator with no kernel whose value
derives from constants and literals alone, through any chain of nodes (rotary embeddings' cos
and sin of `arange` positions), is computed by torch (`_derived_constant`).
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from tensorforge import te
from tensorforge.graph import symbols as sym
from tensorforge.graph.values import Lazy

aten = torch.ops.aten
FOLD_MAX_ELEMENTS = 1 << 22  # a folded constant's size, but for views and copies


class ConstantFolding:
    """Folding constants at compile time (needs the Lowerer's `gm`, `program`, `constant`,
    `add_constant` and its `_derived` table: node -> value, or None where not constant)."""

    def _fold_constants(self, node: torch.fx.Node, args, kwargs):
        """Run a node whose tensor inputs are all constants once, now (weight transposes,
        batch-norm scale arithmetic): its result is a constant too."""
        if not isinstance(node.target, torch._ops.OpOverload):
            return None
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            return None
        leaves = []
        torch.utils._pytree.tree_map(leaves.append, (args, kwargs))
        tensors = [v for v in leaves if isinstance(v, Lazy)]
        if not tensors or any(self.constant(v) is None for v in tensors):
            return None
        if any(isinstance(v, te.Expr) for v in leaves):
            return None
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return None
        # NOTE: a view or a copy (a weight's transpose, its cast) folds at any size: unfolded,
        # the matmul reads the weight through it as a strided gather, not as packed panels
        # (a 4096 x 4096 linear at batch 1: 2.9 GB/s from memory against eager's 23); the
        # limit spares the compile other work on big constants
        copy_like = node.target.is_view or node.target in (
            aten._to_copy.default,
            aten.clone.default,
        )
        if val.numel() > FOLD_MAX_ELEMENTS and not copy_like:
            return None

        def real(v):
            return self.constant(v) if isinstance(v, Lazy) else v

        real_args, real_kwargs = torch.utils._pytree.tree_map(real, (args, kwargs))
        with torch.no_grad():
            result = node.target(*real_args, **real_kwargs)
        self.program.folded.append(node.name)
        return self.add_constant(result, node.name)

    def _derived_constant(self, node):
        """The node's value computed by torch from the graph's constants (weights, get_attr)
        and literals, or None where it reads an input, a size or anything random (or torch
        fails on it). Its inputs first, walked with a stack (graphs are deep)."""
        stack = [node]
        while stack:
            top = stack[-1]
            if top in self._derived:
                stack.pop()
                continue
            if top.op == "call_function" and self._deterministic(top):
                pending = [n for n in top.all_input_nodes if n not in self._derived]
                if pending:
                    stack.extend(pending)
                    continue
            stack.pop()
            self._derived[top] = self._evaluate(top)
        return self._derived[node]

    def _evaluate(self, node):
        if node.op == "get_attr":
            return getattr(self.gm, node.target)
        if node.op != "call_function" or not self._deterministic(node):
            return None
        table = {n: self._derived[n] for n in node.all_input_nodes}
        if any(v is None for v in table.values()):
            return None
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), table.__getitem__)
        try:
            with torch.no_grad():
                return node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - then it runs eagerly, as it would have
            return None

    @staticmethod
    def _deterministic(node) -> bool:
        target, val = node.target, node.meta.get("val")
        if not (isinstance(target, torch._ops.OpOverload) or target is operator.getitem):
            return False
        if isinstance(target, torch._ops.OpOverload):
            if torch.Tag.nondeterministic_seeded in target.tags:
                return False
        leaves = torch.utils._pytree.tree_leaves(val)
        small = sum(v.numel() for v in leaves if isinstance(v, torch.Tensor)) <= 1 << 22
        sizes = [s for v in leaves if isinstance(v, torch.Tensor) for s in v.shape]
        sizes += [v for v in leaves if isinstance(v, (torch.SymInt, torch.SymFloat))]
        return small and not any(sym.is_symbolic(s) for s in sizes)
