"""tensorforge.tir: TVM's `tvm.tir` names (API.md §7): constants, selects, calls out of
generated code (extern C functions, packed Python functions, LLVM intrinsics), buffer
declarations for tensor intrinsics, and the loop-IR node classes."""

from __future__ import annotations

from typing import Any

from tensorforge.errors import ExprError
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.extern import AddressOf
from tensorforge.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Seq,
)
from tensorforge.te import dtype as dt
from tensorforge.te.expr import (
    Add,
    Call,
    Cast,
    Const,
    Div,
    Expr,
    FloorDiv,
    FloorMod,
    Max,
    Min,
    Mul,
    Sub,
    Var,
    _operands,
    _to_bool,
    as_expr,
)
from tensorforge.te.expr import Select as _SelectNode
from tensorforge.te.expr import const as _const
from tensorforge.te.extern_call import ExternBuffer, ExternCall, decl_buffer, make_call
from tensorforge.te.intrin import (
    abs,
    acos,
    acosh,
    all,
    any,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    ceil,
    cos,
    cosh,
    erf,
    erfc,
    exp,
    exp2,
    expm1,
    floor,
    fmod,
    hypot,
    if_then_else,
    log,
    log1p,
    log2,
    log10,
    power,
    round,
    rsqrt,
    sigmoid,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
)
from tensorforge.te.tvm_compat import (
    floordiv,
    floormod,
    indexdiv,
    indexmod,
    max_value,
    min_value,
    size_var,
)
from tensorforge.tir import ir_builder


def const(value: Any, dtype: str | None = None) -> Const:
    """A typed constant (TVM's tir.const): ints are int32 and floats float32 by default."""
    return _const(value, dtype)


def Select(condition: Any, true_value: Any, false_value: Any) -> Expr:  # noqa: N802 - TVM's name
    """`true_value if condition else false_value`; both sides may be evaluated (unlike
    if_then_else, whose untaken side never reads memory)."""
    cond = _to_bool(as_expr(condition))
    a, b = _operands(true_value, false_value)
    return _SelectNode(cond, a, b)


def IntImm(dtype: str, value: int) -> Const:  # noqa: N802 - TVM's name
    if not dt.is_int(dt.check_dtype(dtype, "IntImm")):
        raise TypeError(f"IntImm: {dtype} is not an integer dtype")
    return _const(int(value), dtype)


def FloatImm(dtype: str, value: float) -> Const:  # noqa: N802 - TVM's name
    if not dt.is_float(dt.check_dtype(dtype, "FloatImm")):
        raise TypeError(f"FloatImm: {dtype} is not a float dtype")
    return _const(float(value), dtype)


def call_packed(name: str, *args: Any) -> ExternCall:
    """Call the Python function registered as `name` (tf.register_func); buffers arrive as
    NDArrays that share the kernel's memory, numbers as Python numbers."""
    return make_call("int32", "packed", name, args)


def call_extern(dtype: Any, name: str, *args: Any) -> ExternCall:
    """Call the C function `name` (found in this process: libm, or a library loaded with
    tf.runtime.load_library / compiled with tf.runtime.compile_c)."""
    return make_call(dtype, "extern", name, args)


def call_pure_extern(dtype: Any, name: str, *args: Any) -> ExternCall:
    """call_extern of a function without side effects (e.g. libm's `expf`)."""
    return make_call(dtype, "pure_extern", name, args)


def call_llvm_pure_intrin(dtype: Any, name: str, *args: Any) -> ExternCall:
    """Call the LLVM intrinsic `name` ("llvm.fma.f32", "llvm.x86.avx512.dpbf16ps.512", ...).

    TVM passes the argument count first; a leading count equal to the number of remaining
    arguments is accepted and dropped."""
    return make_call(dtype, "llvm_pure_intrin", name, _drop_count(args))


def call_llvm_intrin(dtype: Any, name: str, *args: Any) -> ExternCall:
    """call_llvm_pure_intrin of an intrinsic with side effects (stores, prefetches)."""
    return make_call(dtype, "llvm_intrin", name, _drop_count(args))


def address_of(load: Any) -> AddressOf:
    """The address of the element `load` reads (TVM's tir.address_of), e.g. an ir_builder
    pointer's `ptr[i]`, for a call: `call_extern("float32", "atomicAdd", address_of(p[i]), v)`."""
    if not isinstance(load, BufferLoad):
        raise ExprError(f"address_of: expected a buffer element (ptr[i]), got {load!r}")
    return AddressOf(load)


def _drop_count(args: tuple) -> tuple:
    if args and isinstance(args[0], int) and args[0] == len(args) - 1:
        return args[1:]
    if args and isinstance(args[0], Const) and args[0].value == len(args) - 1:
        return args[1:]
    return args


def __getattr__(name: str):
    from tensorforge.tvm_names import TIR, missing

    raise missing("tensorforge.tir", name, TIR, globals())


__all__ = [
    "Add",
    "Allocate",
    "Buffer",
    "BufferLoad",
    "BufferStore",
    "Call",
    "Cast",
    "Div",
    "Evaluate",
    "ExternBuffer",
    "ExternCall",
    "FloatImm",
    "FloorDiv",
    "FloorMod",
    "For",
    "IfThenElse",
    "IntImm",
    "LetStmt",
    "Max",
    "Min",
    "Mul",
    "PrimFunc",
    "Select",
    "Seq",
    "Sub",
    "Var",
    "abs",
    "acos",
    "acosh",
    "all",
    "any",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "address_of",
    "call_extern",
    "call_llvm_intrin",
    "call_llvm_pure_intrin",
    "call_packed",
    "call_pure_extern",
    "ceil",
    "const",
    "cos",
    "cosh",
    "decl_buffer",
    "erf",
    "erfc",
    "exp",
    "exp2",
    "expm1",
    "floor",
    "floordiv",
    "floormod",
    "fmod",
    "hypot",
    "if_then_else",
    "indexdiv",
    "indexmod",
    "ir_builder",
    "log",
    "log10",
    "log1p",
    "log2",
    "max_value",
    "min_value",
    "power",
    "round",
    "rsqrt",
    "sigmoid",
    "sin",
    "sinh",
    "size_var",
    "sqrt",
    "tan",
    "tanh",
]
