"""Calls out of generated code -> llvmlite: extern C functions, LLVM intrinsics, and packed
Python functions (through runtime/packed_func.py's one C entry point)."""

from __future__ import annotations

from llvmlite import ir

from tensorforge.codegen.llvm_types import I32, I64, PTR, value_type
from tensorforge.ir.extern import AddressOf, WholeBuffer
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Expr
from tensorforge.te.extern_call import HANDLE, ExternCall

# the symbol JIT-compiled code calls packed functions through (runtime/packed_func.py)
PACKED_SYMBOL = "__tf_call_packed"
F64 = ir.DoubleType()


class ExternEmitter:
    """The extern-call half of ExprEmitter (a mixin using its builder, module, expr, fail)."""

    def extern_expr(self, e: Expr) -> ir.Value:
        match e:
            case AddressOf(load=load):
                (index,) = load.indices
                return self.builder.gep(
                    self.buffer_ptr(load.buffer),
                    [self.index64(index)],
                    source_etype=_memory_type(load.buffer.dtype),
                )
            case WholeBuffer(buffer=buffer):
                return self.buffer_ptr(buffer)
            case ExternCall(kind="packed"):
                return self._packed_call(e)
            case ExternCall():
                return self._extern_call(e)
        raise self.fail(f"cannot generate code for {type(e).__name__} ({e})")

    def _extern_call(self, e: ExternCall) -> ir.Value:
        args = [self.expr(a) for a in e.args]
        ret = ir.VoidType() if e.dtype == HANDLE else value_type(e.dtype)
        fn = self.module.globals.get(e.name)
        types = [a.type for a in args]
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, types), name=e.name)
        elif list(fn.function_type.args) != types or fn.function_type.return_type != ret:
            raise self.fail(
                f"'{e.name}' is called with different argument or result types in one kernel: "
                f"({', '.join(map(str, types))}) -> {ret} and {fn.function_type}"
            )
        return self.builder.call(fn, args)

    def _packed_call(self, e: ExternCall) -> ir.Value:
        b = self.builder
        kinds: list[str] = []
        values: list[ir.Value] = []
        for a in e.args:
            if isinstance(a, WholeBuffer):
                buf = a.buffer
                kinds.append(f"B{buf.dtype}:{len(buf.shape)}")
                values.append(b.ptrtoint(self.buffer_ptr(buf), I64))
                values += [self.index64(extent) for extent in buf.shape]
            elif isinstance(a, AddressOf) or a.dtype == HANDLE:
                kinds.append("I")
                values.append(b.ptrtoint(self.expr(a), I64))
            elif dt.is_float(a.dtype):
                kinds.append("F")
                wide = self.cast(self.expr(a), a.dtype, "float64")
                values.append(b.bitcast(wide, I64))
            else:
                kinds.append("I")
                values.append(self.cast(self.expr(a), a.dtype, "int64"))
        signature = ";".join([e.name, *kinds]) + "\0"
        text = bytearray(signature.encode())
        count = len(self.module.globals)
        sig = ir.GlobalVariable(
            self.module, ir.ArrayType(ir.IntType(8), len(text)), f".packed{count}"
        )
        sig.global_constant = True
        sig.linkage = "private"
        sig.initializer = ir.Constant(ir.ArrayType(ir.IntType(8), len(text)), text)
        slots = self.alloca(ir.ArrayType(I64, max(len(values), 1)), "packed_args")
        for i, v in enumerate(values):
            at = b.gep(slots, [ir.Constant(I64, i)], source_etype=I64)
            b.store(v, at)
        fn = self.module.globals.get(PACKED_SYMBOL)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(I32, [PTR, PTR]), name=PACKED_SYMBOL)
        result = b.call(fn, [sig, slots])
        return result if e.dtype == "int32" else self.cast(result, "int32", e.dtype)


def _memory_type(dtype: str) -> ir.Type:
    from tensorforge.codegen.llvm_types import memory_type

    return memory_type(dtype)
