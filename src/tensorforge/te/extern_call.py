"""Calls out of generated code: extern C functions, packed Python functions, LLVM intrinsics.

`te.extern(shape, inputs, fcompute)` declares a stage whose body is such a call: fcompute
receives ExternBuffers standing for the input and output tensors and returns
`tf.tir.call_packed("name", *buffers)` (a Python function registered with tf.register_func,
receiving NDArrays) or `tf.tir.call_extern("int32", "symbol", buf.access_ptr("r"), ...)`.
Lowering replaces each ExternBuffer by the buffer that holds its tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tensorforge.errors import ExprError
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Expr, Var, as_expr, const, node
from tensorforge.te.tensor import IterVar, Operation, Range, Tensor, _shape

HANDLE = "handle"  # the dtype of a pointer argument
CALL_KINDS = ("extern", "pure_extern", "packed", "llvm_intrin", "llvm_pure_intrin")


@dataclass(frozen=True, eq=False)
class ExternBuffer:
    """A buffer as an extern call sees it (TVM's tir.decl_buffer): shape, dtype and, for a
    tensor intrinsic, symbolic `strides` and `elem_offset` that tensorize binds to the region
    of the real buffer. Compared by identity."""

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    strides: tuple[Expr, ...] | None = None  # elements; None: dense row-major
    elem_offset: Expr | None = None  # a Var bound by tensorize, or None (0)
    offset_factor: int = 0
    scope: str = "global"

    def __hash__(self) -> int:
        return id(self)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def data(self) -> AccessPtr:
        """The address of the buffer's first element."""
        return AccessPtr(self, const(0), "rw")

    def access_ptr(
        self, access_mask: Any = "rw", ptr_type: str = HANDLE, content_lanes: int = 1, offset=0
    ) -> AccessPtr:
        """The address of element `offset` (counted from the buffer's first element)."""
        mask = access_mask if isinstance(access_mask, str) else "rw"
        return AccessPtr(self, as_expr(offset), mask)

    def __repr__(self) -> str:
        return f"ExternBuffer({self.name})"


@node
class AccessPtr(Expr):
    """A pointer to element `offset` of `buffer` (an extern call's argument)."""

    buffer: ExternBuffer
    offset: Expr
    access: str = "rw"

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return HANDLE

    def print_parts(self) -> str:
        off = (
            "" if isinstance(self.offset, Const) and self.offset.value == 0 else f" + {self.offset}"
        )
        return f"&{self.buffer.name}[0{off}]"


@node
class BufferArg(Expr):
    """A whole buffer passed to a packed function (which receives it as an NDArray)."""

    buffer: ExternBuffer

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return HANDLE

    def print_parts(self) -> str:
        return self.buffer.name


@node
class ExternCall(Expr):
    """A call of `name` (kind: CALL_KINDS) returning `dtype`: a C symbol, a packed function
    registered with tf.register_func, or an LLVM intrinsic ("llvm.x86...."). `source`, when
    set, is device code that defines `name` (CUDA codegen puts it before the kernel)."""

    dtype: str
    kind: str
    name: str
    args: tuple[Expr, ...]
    source: str = ""  # device code defining `name` (a CUDA tensor intrinsic), emitted once

    def print_parts(self) -> str:
        from tensorforge.te.printer import expr_to_str

        return f"{self.kind}:{self.name}({', '.join(expr_to_str(a) for a in self.args)})"


def _call_args(args: Sequence[Any], kind: str, name: str) -> tuple[Expr, ...]:
    out = []
    for position, a in enumerate(args):
        if isinstance(a, ExternBuffer):
            a = BufferArg(a) if kind == "packed" else a.data
        elif isinstance(a, Tensor):
            raise ExprError(
                f"{kind} call '{name}': argument {position} is the tensor '{a.name}'; pass the "
                f"buffers fcompute receives (ins[i], outs[i]) instead"
            )
        try:
            out.append(as_expr(a))
        except ExprError:
            raise ExprError(
                f"{kind} call '{name}': argument {position} ({a!r}) is not an expression, a buffer "
                f"or a number"
            ) from None
    return tuple(out)


def make_call(dtype: Any, kind: str, name: Any, args: Sequence[Any]) -> ExternCall:
    """An ExternCall after checking its name and dtype."""
    assert kind in CALL_KINDS
    if not isinstance(name, str) or not name:
        raise ExprError(f"{kind} call: the function name must be a non-empty string, got {name!r}")
    if kind.startswith("llvm") and not name.startswith("llvm."):
        raise ExprError(f"{kind} call: LLVM intrinsic names start with 'llvm.', got {name!r}")
    dtype = "int32" if dtype in (None, HANDLE) and kind == "packed" else dtype
    dtype = dt.check_dtype(dtype, f"{kind} call '{name}'") if dtype != HANDLE else dtype
    return ExternCall(dtype, kind, name, _call_args(args, kind, name))


def decl_buffer(
    shape: Any,
    dtype: Any = "float32",
    name: str = "buffer",
    data: Any = None,
    strides: Any = None,
    elem_offset: Any = None,
    scope: str = "",
    data_alignment: int = -1,
    offset_factor: int = 0,
    **_ignored: Any,
) -> ExternBuffer:
    """A buffer declaration (TVM's tir.decl_buffer), for te.decl_tensor_intrin's `binds`.

    `strides` may hold te.var()s and `elem_offset` be a te.var (with offset_factor > 0 one is
    made): tensorize binds them to the layout of the tensor region the intrinsic replaces.
    """
    extents = _shape(shape, f"decl_buffer '{name}'")
    dtype = dt.check_dtype(dtype, f"decl_buffer '{name}'")
    stride_exprs = None
    if strides is not None:
        stride_exprs = tuple(as_expr(s) for s in strides)
        if len(stride_exprs) != len(extents):
            raise ExprError(
                f"decl_buffer '{name}': {len(stride_exprs)} strides for {len(extents)} dimensions"
            )
    if elem_offset is None and offset_factor:
        elem_offset = Var(f"{name}_elem_offset")
    offset = as_expr(elem_offset) if elem_offset is not None else None
    return ExternBuffer(
        name, extents, dtype, stride_exprs, offset, int(offset_factor), scope or "global"
    )


def buffer_of_tensor(t: Tensor, name: str | None = None) -> ExternBuffer:
    """A dense buffer declaration with `t`'s shape and dtype."""
    return ExternBuffer(name or t.name, tuple(t.shape), t.dtype)


# -- te.extern ----------------------------------------------------------------------------------


@dataclass(eq=False)
class ExternOp(Operation):
    """A stage computed by calls (`body`) on whole buffers: `input_buffers[i]` holds
    `inputs[i]`, `output_buffers[i]` the op's output i. `axis` spans the output shape (for
    bounds and buffers; an extern stage has no loops to schedule)."""

    name: str
    tag: str
    attrs: dict
    inputs: tuple[Tensor, ...]
    input_buffers: tuple[ExternBuffer, ...]
    output_buffers: tuple[ExternBuffer, ...]
    body: tuple[Expr, ...]
    axis: tuple[IterVar, ...]
    reduce_axis: tuple[IterVar, ...] = ()
    # the loop-IR statement an ir_builder built (then `body` is empty): te does not read it;
    # lowering the stage (schedule/opaque_ops.py) puts the stage's buffers in it
    stmt: object | None = None

    @property
    def num_outputs(self) -> int:
        return len(self.output_buffers)

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.output_buffers[0].shape

    def output_dtype(self, index: int) -> str:
        return self.output_buffers[index].dtype

    @property
    def input_tensors(self) -> list[Tensor]:
        seen: list[Tensor] = []
        for t in self.inputs:
            if t not in seen:
                seen.append(t)
        return seen

    def __repr__(self) -> str:
        return f"extern({self.name})"


def extern(
    shape: Any,
    inputs: Sequence[Tensor],
    fcompute: Any,
    name: str = "extern",
    dtype: Any = None,
    in_buffers: Any = None,
    out_buffers: Any = None,
    tag: str = "",
    attrs: dict | None = None,
) -> Tensor | list[Tensor]:
    """Tensors computed by an opaque call: `fcompute(ins, outs)` gets ExternBuffers for
    `inputs` and the outputs and returns a call (tf.tir.call_packed / call_extern), a list of
    calls, or an ir_builder's result."""
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, Tensor) for t in inputs):
        raise ExprError(f"te.extern '{name}': inputs must be a list of tensors, got {inputs!r}")
    shapes = shape if shape and isinstance(shape[0], (list, tuple)) else [shape]
    shapes = [_shape(s, f"te.extern '{name}'") for s in shapes]
    dtypes = dtype if isinstance(dtype, (list, tuple)) else [dtype] * len(shapes)
    if len(dtypes) != len(shapes):
        raise ExprError(f"te.extern '{name}': {len(dtypes)} dtypes for {len(shapes)} outputs")
    dtypes = [
        dt.check_dtype(d or (inputs[0].dtype if inputs else "float32"), f"te.extern '{name}'")
        for d in dtypes
    ]
    if any(
        len(s) != len(shapes[0])
        or any(a is not b and str(a) != str(b) for a, b in zip(s, shapes[0]))
        for s in shapes
    ):
        raise ExprError(
            f"te.extern '{name}': outputs of different shapes are not supported; declare one "
            f"te.extern per output"
        )
    ins = list(in_buffers) if in_buffers is not None else [buffer_of_tensor(t) for t in inputs]
    suffix = [""] if len(shapes) == 1 else [f".v{i}" for i in range(len(shapes))]
    outs = (
        list(out_buffers)
        if out_buffers is not None
        else [ExternBuffer(f"{name}{sfx}", s, d) for s, d, sfx in zip(shapes, dtypes, suffix)]
    )
    result = fcompute(ins, outs)
    stmt = result if is_stmt(result) else None
    body = () if stmt is not None else as_call_list(result, f"te.extern '{name}'")
    axis = tuple(IterVar(Var(f"{name}.ax{d}"), Range(const(0), e)) for d, e in enumerate(shapes[0]))
    op = ExternOp(
        name, tag, dict(attrs or {}), tuple(inputs), tuple(ins), tuple(outs), body, axis, (), stmt
    )
    tensors = [op.output(i) for i in range(op.num_outputs)]
    return tensors[0] if len(tensors) == 1 else tensors


def as_call_list(result: Any, what: str) -> tuple[Expr, ...]:
    """What fcompute / fintrin returned as a tuple of calls (None: no call)."""
    if result is None:
        return ()
    if is_stmt(result):  # an ir_builder's statement: only its calls may be in it
        result = _calls_of(result, what)
    items = result if isinstance(result, (list, tuple)) else [result]
    out = []
    for item in items:
        if not isinstance(item, ExternCall):
            raise ExprError(
                f"{what}: expected tf.tir.call_packed(...) / call_extern(...) (or a list of them), "
                f"got {item!r}"
            )
        out.append(item)
    return tuple(out)


def is_stmt(value: Any) -> bool:
    """Is `value` a loop-IR statement (what tir.ir_builder's get() returns)?"""
    return getattr(value, "_is_stmt", False) is True


def _calls_of(stmt: Any, what: str) -> list[Expr]:
    """The calls of a statement that is nothing but calls (Evaluate, or a Seq of them)."""
    items = getattr(stmt, "stmts", (stmt,))
    calls = [None if hasattr(s, "body") else getattr(s, "value", None) for s in items]
    if not all(isinstance(c, ExternCall) for c in calls):
        raise ExprError(
            f"{what}: only calls (ib.emit(tf.tir.call_extern(...))) can make up this body; "
            f"loops and stores belong in a te.extern stage"
        )
    return calls
