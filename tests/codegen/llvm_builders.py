"""Hand-built lowered PrimFuncs for the llvm backend's tests: IR shorthands, aligned arrays,
compiling and calling a PrimFunc."""

import numpy as np

from tensorforge.codegen.llvm import LLVMCodegen
from tensorforge.ir.expr import Buffer, BufferLoad, Ramp
from tensorforge.ir.stmt import (
    BufferStore,
    For,
    LoopKind,
    PrimFunc,
)
from tensorforge.runtime.llvm_exec import LLVMExecutable
from tensorforge.target import Target
from tensorforge.te.expr import (
    Const,
    FloorDiv,
    Var,
)

TARGET = Target("llvm")


def c(value, dtype="int32"):
    return Const(value, dtype)


def ramp(base, lanes, stride=1):
    return Ramp(base, c(stride), lanes)


def load(buffer, index, predicate=None):
    return BufferLoad(buffer, (index,), predicate)


def store(buffer, index, value, predicate=None):
    return BufferStore(buffer, (index,), value, predicate)


def loop(var, extent, body, kind=LoopKind.SERIAL, start=0):
    extent = extent if not isinstance(extent, int) else c(extent)
    return For(var, c(start), extent, body, kind)


def aligned(array):
    """A copy of `array` in 64-byte aligned memory, as the CPU contract requires."""
    array = np.asarray(array)
    raw = np.empty(array.nbytes + 64, np.uint8)
    offset = (-raw.ctypes.data) % 64
    out = raw[offset : offset + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def compile_func(func):
    source = LLVMCodegen().generate(func, TARGET)
    return source, LLVMExecutable(source, TARGET)


def run(func, *args):
    """Compile `func` and call it; numpy arguments pass by address (and are updated in place)."""
    _, exe = compile_func(func)
    exe.call([a.ctypes.data if isinstance(a, np.ndarray) else a for a in args])
    return exe


def unary_kernel(name, op, lanes, dtype="float32"):
    """B[i] = op(A[i]) for i < n, n a multiple of `lanes`, `lanes` at a time."""
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), dtype), Buffer("B", (n,), dtype)
    if lanes == 1:
        body = loop(i, n, store(B, i, op(load(A, i))))
    else:
        index = ramp(i * c(lanes), lanes)
        body = loop(i, FloorDiv(n, c(lanes)), store(B, index, op(load(A, index))))
    return PrimFunc(name, (A, B, n), body)
