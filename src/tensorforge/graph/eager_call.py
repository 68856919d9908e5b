"""An eager step's call (a node torch runs inside a compiled graph): its arguments built per
call from the parts that change, the rest passed as it is."""

from __future__ import annotations

import torch

from tensorforge.graph import symbols as sym
from tensorforge.graph.lowered import BufferArg, EagerSpec


class EagerCall:
    """An eager step's arguments, built per call from the parts that change (its buffers'
    tensors, its sizes' values): the rest (literals, lists of them) is passed as it is. A
    pytree map over every argument cost ~60 us a call (a bfloat16 convolution of 170 us took
    236 in its step)."""

    def __init__(self, step: EagerSpec):
        self._args = [_argument_builder(v) for v in step.args]
        self._static_args = tuple(step.args)
        self._kwargs = {k: _argument_builder(v) for k, v in step.kwargs.items()}
        self._static_kwargs = dict(step.kwargs)
        self.temps = []  # the temps it reads (their storage is checked against its results)
        torch.utils._pytree.tree_map(
            lambda v: (
                self.temps.append(v.buffer)
                if isinstance(v, BufferArg) and v.buffer.kind == "temp"
                else None
            ),
            (step.args, step.kwargs),
        )
        self._all_static_kwargs = all(b is None for b in self._kwargs.values())

    def arguments(self, tensors: dict, bindings: dict) -> list:
        return [
            v if b is None else b(tensors, bindings)
            for v, b in zip(self._static_args, self._args, strict=True)
        ]

    def keywords(self, tensors: dict, bindings: dict) -> dict:
        if self._all_static_kwargs:
            return self._static_kwargs
        return {
            k: v if self._kwargs[k] is None else self._kwargs[k](tensors, bindings)
            for k, v in self._static_kwargs.items()
        }


def _argument_builder(v):
    """None where `v` is passed as it is, else a function (tensors, bindings) -> its value."""
    if isinstance(v, BufferArg):
        if all(isinstance(s, int) for s in v.shape):
            sizes = torch.Size(v.shape)

            def shaped(tensors, bindings):
                tensor = tensors[v.buffer]
                return tensor if tensor.shape == sizes else tensor.view(sizes)

        else:
            shaped = lambda tensors, bindings: _shaped(tensors[v.buffer], v.shape, bindings)  # noqa: E731
        if v.permutation is None:
            return shaped
        return lambda tensors, bindings: shaped(tensors, bindings).permute(v.permutation)
    if isinstance(v, (list, tuple)):
        parts = [_argument_builder(x) for x in v]
        if all(p is None for p in parts):
            return None
        kind = type(v)

        def build(tensors, bindings):
            values = [x if p is None else p(tensors, bindings) for x, p in zip(v, parts)]
            return kind(values) if kind is not tuple else tuple(values)

        return build
    if isinstance(v, dict):
        parts = {k: _argument_builder(x) for k, x in v.items()}
        if all(p is None for p in parts.values()):
            return None
        return lambda tensors, bindings: {
            k: x if parts[k] is None else parts[k](tensors, bindings) for k, x in v.items()
        }
    if not isinstance(v, (int, float, bool, str)) and v is not None and sym.is_size_expr(v):
        return lambda tensors, bindings: sym.evaluate(v, bindings)
    return None


def _shaped(tensor: torch.Tensor, shape: tuple, bindings: dict) -> torch.Tensor:
    sizes = [sym.evaluate(s, bindings) for s in shape]
    return tensor if list(tensor.shape) == sizes else tensor.view(sizes)
