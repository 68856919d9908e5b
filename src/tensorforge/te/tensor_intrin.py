"""te.decl_tensor_intrin: a hardware instruction (or a micro-kernel) described as a small
compute, with the calls that perform it; `s[T].tensorize(axis, intrin)` puts the calls in place
of a matching loop nest.

`fintrin(ins, outs)` receives one ExternBuffer per input and output of `op` (from `binds`, or
dense ones) and returns the calls that compute the whole op (`body`), or the triple
(body, reset, update): `reset` sets the output to the reduction's identity and `update`
accumulates into it, for nests whose outer loops continue the reduction. A call's pointer
arguments (`buf.access_ptr("r")`) and the buffers' symbolic strides are bound, at tensorize, to
the region of the real tensors the nest covers, so the same declaration serves any codegen
that prints calls (an extern C micro-kernel, an LLVM intrinsic, a CUDA mma sequence).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tensorforge.errors import ExprError
from tensorforge.te.expr import Const, Expr
from tensorforge.te.extern_call import ExternBuffer, as_call_list, buffer_of_tensor, decl_buffer
from tensorforge.te.tensor import ComputeOp, Tensor


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """A declared intrinsic: its compute `op`, the buffers of its tensors (inputs then outputs,
    in `tensors` order) and its calls."""

    name: str
    op: ComputeOp
    tensors: tuple[Tensor, ...]
    buffers: tuple[ExternBuffer, ...]
    body: tuple[Expr, ...]
    reset: tuple[Expr, ...] | None
    update: tuple[Expr, ...] | None

    def buffer_for(self, tensor: Tensor) -> ExternBuffer:
        return self.buffers[self.tensors.index(tensor)]

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"


def decl_tensor_intrin(
    op: Any,
    fintrin: Any,
    name: str = "tensor_intrin",
    binds: dict | None = None,
    device_source: str = "",
    **_ignored: Any,
) -> TensorIntrin:
    """Declare a tensor intrinsic computing `op` (a te.compute's op, on placeholders of
    constant shape) by the calls `fintrin(ins, outs)` returns.

    `device_source` (beyond TVM) is device code defining the functions the calls name (a CUDA
    `__device__` function wrapping `mma.sync`): the code generator emits it once per kernel."""
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp):
        raise ExprError(f"decl_tensor_intrin '{name}': op must be a te.compute's op, got {op!r}")
    for iv in (*op.axis, *op.reduce_axis):
        if not isinstance(iv.dom.extent, Const):
            raise ExprError(
                f"decl_tensor_intrin '{name}': axis '{iv.name}' of '{op.name}' has extent "
                f"{iv.dom.extent}; an intrinsic's shape must be constant"
            )
    inputs = list(op.input_tensors)
    outputs = [op.output(i) for i in range(op.num_outputs)]
    binds = dict(binds or {})
    for t in binds:
        if t not in inputs and t not in outputs:
            raise ExprError(
                f"decl_tensor_intrin '{name}': binds has '{t.name}', which '{op.name}' neither "
                f"reads nor computes"
            )
    buffers = [binds.get(t) or buffer_of_tensor(t) for t in (*inputs, *outputs)]
    for t, b in zip((*inputs, *outputs), buffers):
        if not isinstance(b, ExternBuffer):
            raise ExprError(
                f"decl_tensor_intrin '{name}': the buffer of '{t.name}' must come from "
                f"tf.tir.decl_buffer, got {b!r}"
            )
    result = fintrin(buffers[: len(inputs)], buffers[len(inputs) :])
    if isinstance(result, tuple) and len(result) == 3:
        body, reset, update = (as_call_list(r, f"decl_tensor_intrin '{name}'") for r in result)
    else:
        body = as_call_list(result, f"decl_tensor_intrin '{name}'")
        reset = update = None
    if device_source:
        body, reset, update = (
            None if calls is None else tuple(_with_source(c, device_source) for c in calls)
            for calls in (body, reset, update)
        )
    return TensorIntrin(name, op, tuple(inputs + outputs), tuple(buffers), body, reset, update)


def _with_source(call: Any, source: str) -> Any:
    return call if call.source else dataclasses.replace(call, source=source)


__all__ = ["TensorIntrin", "decl_buffer", "decl_tensor_intrin"]
