"""Lowered-IR expressions -> llvmlite values: arithmetic, casts, vectors, math calls (loads:
llvm_memory.py)."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from tensorforge.codegen.llvm_calls import CallEmitter
from tensorforge.codegen.llvm_extern import ExternEmitter
from tensorforge.codegen.llvm_math_builder import intrinsic, mangle
from tensorforge.codegen.llvm_memory import LoadEmitter, power_of_two_pieces
from tensorforge.codegen.llvm_types import (
    FLOAT,
    I32,
    concat,
    lanes_of,
    splat_constant,
    value_type,
    vector_constant,
)
from tensorforge.errors import BuildError
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp, VectorReduce
from tensorforge.ir.extern import AddressOf, WholeBuffer
from tensorforge.ir.visit import walk
from tensorforge.target import vector_bits_of
from tensorforge.te import dtype as dt
from tensorforge.te.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Call,
    Cast,
    Const,
    Div,
    Expr,
    FloorDiv,
    FloorMod,
    Let,
    Max,
    Min,
    Mul,
    Not,
    Or,
    Select,
    Sub,
    Var,
)
from tensorforge.te.extern_call import ExternCall

_CMP = {LT: "<", LE: "<=", GT: ">", GE: ">=", EQ: "==", NE: "!="}


def _element_bits(ty: ir.Type) -> int:
    if isinstance(ty, ir.IntType):
        return ty.width
    return {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}.get(type(ty), 32)


class ExprEmitter(CallEmitter, ExternEmitter, LoadEmitter):
    """Emits expressions at the builder's position. Subclasses add statements.

    `vars` maps each bound Var to its value and `buffers` each Buffer to a pointer to its
    element 0; `func_name` names the PrimFunc in error messages.
    """

    module: ir.Module
    builder: ir.IRBuilder
    func_name: str
    vars: dict[Var, ir.Value]
    buffers: dict[Buffer, ir.Value]
    cpu_features: frozenset[str] = frozenset()  # LLVM's names ("avx512f") of what the target has

    def fail(self, message: str) -> BuildError:
        return BuildError(f"llvm codegen of '{self.func_name}': {message}")

    # -- dispatch ---------------------------------------------------------------------------------
    def expr(self, e: Expr) -> ir.Value:
        b = self.builder
        match e:
            case Var():
                if e not in self.vars:
                    raise self.fail(f"variable '{e.name}' is used but not defined")
                return self.vars[e]
            case Const(value=value):
                ty = value_type(e.dtype)
                if dt.is_bool(e.dtype):
                    value = int(bool(value))
                return splat_constant(ty, value)
            case Add(a, x) | Sub(a, x) | Mul(a, x):
                lhs, rhs = self.expr(a), self.expr(x)
                return self._arith(type(e).__name__.lower(), e.dtype, lhs, rhs, _reads_memory(e))
            case Div(a, x):
                if not dt.is_float(e.dtype):
                    raise self.fail(f"Div of integers ({e}) should be FloorDiv after lowering")
                return self.lanewise(b.fdiv, self.expr(a), self.expr(x))
            case FloorDiv(a, x) | FloorMod(a, x):
                return self._floor_div_mod(e, self.expr(a), self.expr(x))
            case Min(a, x) | Max(a, x):
                lhs, rhs = self.expr(a), self.expr(x)
                if dt.is_float(e.dtype):
                    # NOTE: llvm.maximum/minimum (a NaN operand gives NaN, as in numpy), not
                    # maxnum, which drops NaN and whose reductions LLVM's -O3 miscompiled; nor a
                    # compare + select written out, on which -O3 could loop forever
                    name = "llvm.minimum" if isinstance(e, Min) else "llvm.maximum"
                    return self.lanewise(lambda p, q: self.call_overloaded(name, p, q), lhs, rhs)
                op = "<" if isinstance(e, Min) else ">"
                return self.lanewise(
                    lambda p, q: b.select(self._compare(op, a.dtype, p, q), p, q), lhs, rhs
                )
            case LT(a, x) | LE(a, x) | GT(a, x) | GE(a, x) | EQ(a, x) | NE(a, x):
                return self._compare(_CMP[type(e)], a.dtype, self.expr(a), self.expr(x))
            case And(a, x):
                return b.and_(self.expr(a), self.expr(x))
            case Or(a, x):
                return b.or_(self.expr(a), self.expr(x))
            case Not(a):
                return b.not_(self.expr(a))
            case Select(cond, then, other):
                return self.lanewise(b.select, self.expr(cond), self.expr(then), self.expr(other))
            case Cast(dtype=dtype, value=value):
                return self.cast(self.expr(value), value.dtype, dtype)
            case Call():
                return self._call(e)
            case Let(var=var, value=value, body=body):
                with self.bound(var, self.expr(value)):
                    return self.expr(body)
            case BufferLoad():
                return self._load(e)
            case Ramp(base=base, stride=stride, lanes=lanes):
                return self._ramp(base, stride, lanes)
            case Broadcast(value=value, lanes=lanes):
                return self.splat(self.expr(value), lanes)
            case VectorReduce(op=op, value=value):
                return self._vector_reduce(op, value.dtype, self.expr(value))
            case ExternCall() | AddressOf() | WholeBuffer():
                return self.extern_expr(e)
        raise self.fail(f"cannot generate code for {type(e).__name__} ({e}); is the IR lowered?")

    def bound(self, var: Var, value: ir.Value) -> _Binding:
        """`with self.bound(var, value):` binds var inside the block."""
        return _Binding(self.vars, var, value)

    def bound_buffer(self, buffer: Buffer, ptr: ir.Value) -> _Binding:
        return _Binding(self.buffers, buffer, ptr)

    # -- arithmetic -------------------------------------------------------------------------------
    def lanewise(self, emit: Callable[..., ir.Value], *values: ir.Value) -> ir.Value:
        """`emit(*values)`; where the vectors' lane count is not a power of two and spans
        several registers (a register tile row of 56 floats), `emit` on power-of-two pieces
        of them (32 + 16 + 8), the results joined.

        NOTE: LLVM widens a <56 x float> to <64 x float>. Such a value live from one basic block
        into another (a register tile's accumulators, read after the reduction loop by a fused
        epilogue: conv + BN + ReLU at 56 columns) was rebuilt lane by lane, ~100 inserts a
        tile row, where its pieces cross as registers: the epilogue cost 0.12 ms more than a
        copy-out, twice the separate BN + ReLU pass. Under one register (14 floats of 16
        lanes) the value is kept whole: one widened register, where power-of-two pieces
        (8 + 4 + 2) tripled a 14-column tile's FMAs. (A remainder under a register kept as
        one piece, 58 -> 32 + 16 + 10, made conv 3x3 64 -> 64 at 56² 1.15 -> 1.50 ms: its
        58-column padding rows.) Operands that are not vectors of that count (a scalar
        condition) go to every piece whole.
        """
        vectors = [v.type for v in values if isinstance(v.type, ir.VectorType)]
        count = vectors[0].count if vectors else 1
        if count & (count - 1) == 0:
            return emit(*values)
        bits = max(_element_bits(t.element) for t in vectors)
        native = max(1, vector_bits_of(self.cpu_features) // bits)
        if count <= native:
            return emit(*values)
        parts = []
        for start, lanes in power_of_two_pieces(count):
            args = [
                lanes_of(self.builder, v, start, lanes)
                if isinstance(v.type, ir.VectorType) and v.type.count == count
                else v
                for v in values
            ]
            parts.append(emit(*args))
        return concat(self.builder, parts)

    def _arith(
        self, op: str, dtype: str, a: ir.Value, b: ir.Value, wraps: bool = False
    ) -> ir.Value:
        if dt.is_float(dtype):
            fn = getattr(self.builder, "f" + op)
            return self.lanewise(lambda p, q: fn(p, q, flags=FLOAT), a, b)
        # NOTE: nsw (no signed wrap) only on index arithmetic of the index-sized types: int8/
        # int16 code may rely on wrapping like numpy does, unsigned arithmetic wraps by
        # definition, and so do tensor values (`wraps`: arithmetic of loaded values), as in
        # torch; with nsw, LLVM folded an int32 (a * 3) // 3 that overflows to a
        index = dt.element_of(dtype) in ("int32", "int64") and not wraps
        flags = ("nsw",) if index else ()
        fn = getattr(self.builder, op)
        return self.lanewise(lambda p, q: fn(p, q, flags=flags), a, b)

    def _floor_div_mod(self, e: FloorDiv | FloorMod, a: ir.Value, d: ir.Value) -> ir.Value:
        b, dtype, is_div = self.builder, e.dtype, isinstance(e, FloorDiv)
        if dt.is_float(dtype):
            if is_div:
                return self.call_overloaded("llvm.floor", b.fdiv(a, d))
            r = b.frem(a, d)  # C fmod, then move to the divisor's sign (Python's %)
            zero = splat_constant(r.type, 0.0)
            fix = b.and_(
                b.fcmp_ordered("!=", r, zero),
                b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", d, zero)),
            )
            return b.select(fix, b.fadd(r, d), r)
        unsigned = dt.is_unsigned(dtype) or dt.is_bool(dtype)
        divisor = e.b.value if isinstance(e.b, Const) else None
        zero = splat_constant(a.type, 0)
        if divisor == -1 and not unsigned:  # x // -1 -> 0 - x (wrapping), x % -1 -> 0
            return b.sub(zero, a) if is_div else zero
        negated = None
        if divisor is None and unsigned:  # a divisor of 0 divides by 1: lanes a guarded
            # vector tail leaves inactive hold 0 (masked loads), and x86 divides lane by lane
            # (div), where a 0 raises SIGFPE; a 0 in an active lane is undefined in torch too
            d = b.select(b.icmp_unsigned("==", d, zero), splat_constant(d.type, 1), d)
        elif divisor is None:  # the same for 0, and -1 divides by 1 too: idiv of the minimum by
            # -1 overflows and raises SIGFPE, where torch wraps (INT_MIN // -1 == INT_MIN); the
            # quotient is negated after, the remainder by 1 is already 0 (d + 1 <=u 1: d is 0 or -1)
            one = splat_constant(d.type, 1)
            negated = b.icmp_signed("==", d, splat_constant(d.type, -1))
            d = b.select(b.icmp_unsigned("<=", b.add(d, one), one), one, d)
        if unsigned:
            return b.udiv(a, d) if is_div else b.urem(a, d)
        # truncating sdiv/srem, then step toward -inf where remainder and divisor differ in sign
        q, r = b.sdiv(a, d), b.srem(a, d)
        if divisor is not None and divisor > 0:
            fix = b.icmp_signed("<", r, zero)  # positive divisor: a negative remainder
        else:
            fix = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, d), zero))
        if is_div:
            q = b.sub(q, b.zext(fix, a.type))
            return q if negated is None else b.select(negated, b.sub(zero, q), q)
        return b.select(fix, b.add(r, d), r)

    def _compare(self, op: str, dtype: str, a: ir.Value, b: ir.Value) -> ir.Value:
        if dt.is_float(dtype):
            if op == "!=":  # NaN != NaN is true, as in Python
                return self.builder.fcmp_unordered(op, a, b)
            return self.builder.fcmp_ordered(op, a, b)
        if dt.is_unsigned(dtype) or dt.is_bool(dtype):
            return self.builder.icmp_unsigned(op, a, b)
        return self.builder.icmp_signed(op, a, b)

    def cast(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        """Convert `v` of dtype `src` to `dst` (a scalar source broadcasts to a vector dst)."""
        b = self.builder
        lanes_src, lanes_dst = dt.lanes_of(src), dt.lanes_of(dst)
        if lanes_src == 1 and lanes_dst > 1:
            return self.splat(self.cast(v, src, dt.element_of(dst)), lanes_dst)
        if lanes_src != lanes_dst:
            raise self.fail(f"cast from {src} to {dst} changes the number of lanes")
        s, d = dt.element_of(src), dt.element_of(dst)
        ty = value_type(dst)
        if s == d:
            return v
        if "bfloat16" in (s, d):
            return self._cast_bfloat16(v, s, d)
        if dt.is_bool(d):
            zero = splat_constant(v.type, 0.0 if dt.is_float(s) else 0)
            return (
                b.fcmp_unordered("!=", v, zero)
                if dt.is_float(s)
                else b.icmp_unsigned("!=", v, zero)
            )
        if dt.is_float(s) and dt.is_float(d):
            return b.fpext(v, ty) if dt.bits_of(d) > dt.bits_of(s) else b.fptrunc(v, ty)
        if dt.is_float(s):
            return b.fptoui(v, ty) if dt.is_unsigned(d) else b.fptosi(v, ty)
        signed = not (dt.is_unsigned(s) or dt.is_bool(s))
        if dt.is_float(d):
            return b.sitofp(v, ty) if signed else b.uitofp(v, ty)
        if dt.bits_of(d) == dt.bits_of(s):
            return v  # int32 <-> uint32: same bits
        if dt.bits_of(d) < dt.bits_of(s):
            return b.trunc(v, ty)
        return b.sext(v, ty) if signed else b.zext(v, ty)

    def _cast_bfloat16(self, v: ir.Value, s: str, d: str) -> ir.Value:
        """bfloat16 <-> other types through float32, with bit operations (round to nearest even)."""
        b = self.builder
        lanes = v.type.count if isinstance(v.type, ir.VectorType) else 1

        def of(scalar: ir.Type) -> ir.Type:
            return ir.VectorType(scalar, lanes) if lanes > 1 else scalar

        f32, i32 = of(ir.FloatType()), of(I32)
        wide = dt.with_lanes("float32", lanes)
        if s == "bfloat16":
            bits = b.shl(b.zext(v, i32), splat_constant(i32, 16))
            return self.cast(b.bitcast(bits, f32), wide, dt.with_lanes(d, lanes))
        x = self.cast(v, dt.with_lanes(s, lanes), wide)
        bits = b.bitcast(x, i32)
        odd = b.and_(b.lshr(bits, splat_constant(i32, 16)), splat_constant(i32, 1))
        rounded = b.lshr(
            b.add(b.add(bits, splat_constant(i32, 0x7FFF)), odd), splat_constant(i32, 16)
        )
        nan = b.fcmp_unordered("uno", x, x)
        return b.trunc(b.select(nan, splat_constant(i32, 0x7FC0), rounded), of(ir.IntType(16)))

    # -- vectors ----------------------------------------------------------------------------------
    def splat(self, v: ir.Value, lanes: int) -> ir.Value:
        """Broadcast a scalar to `lanes` lanes: insertelement + shufflevector (constants fold)."""
        vty = ir.VectorType(v.type, lanes)
        if isinstance(v, ir.Constant) and not isinstance(v.constant, (list, tuple)):
            return vector_constant(vty, (v.constant,) * lanes)
        one = self.builder.insert_element(ir.Constant(vty, ir.Undefined), v, ir.Constant(I32, 0))
        zeros = vector_constant(ir.VectorType(I32, lanes), (0,) * lanes)
        return self.builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), zeros)

    def _ramp(self, base: Expr, stride: Expr, lanes: int) -> ir.Value:
        base_v = self.splat(self.expr(base), lanes)
        if isinstance(stride, Const):
            step = int(stride.value)
            offsets = vector_constant(base_v.type, tuple(step * i for i in range(lanes)))
        else:
            iota = vector_constant(base_v.type, tuple(range(lanes)))
            offsets = self._arith("mul", base.dtype, self.splat(self.expr(stride), lanes), iota)
        return self._arith("add", base.dtype, base_v, offsets)

    def _vector_reduce(self, op: str, dtype: str, v: ir.Value) -> ir.Value:
        elem = v.type.element
        if dt.is_float(dtype):
            if op == "add":
                fn = intrinsic(
                    self.module,
                    f"llvm.vector.reduce.fadd.{mangle(v.type)}",
                    elem,
                    [elem, v.type],
                )
                # reassoc: a tree of vector adds instead of a lane-by-lane chain
                return self.builder.call(
                    fn, [ir.Constant(elem, -0.0), v], fastmath=("reassoc", "contract")
                )
            name = {"max": "fmaximum", "min": "fminimum"}.get(op)  # NaN-propagating, like Max
        elif op == "add":
            name = "add"
        else:
            signed = not (dt.is_unsigned(dtype) or dt.is_bool(dtype))
            name = {"max": "smax" if signed else "umax", "min": "smin" if signed else "umin"}.get(
                op
            )
        if name is None:
            raise self.fail(f"VectorReduce op {op!r} is not one of add, max, min")
        fn = intrinsic(self.module, f"llvm.vector.reduce.{name}.{mangle(v.type)}", elem, [v.type])
        return self.builder.call(fn, [v])


class _Binding:
    """`with emitter.bound(var, value):` binds var for the block, then restores the old binding."""

    def __init__(self, table: dict, key, value):
        self.table, self.key, self.value = table, key, value

    def __enter__(self):
        self.old = self.table.get(self.key, _MISSING)
        self.table[self.key] = self.value

    def __exit__(self, *exc):
        if self.old is _MISSING:
            del self.table[self.key]
        else:
            self.table[self.key] = self.old


_MISSING = object()


def _reads_memory(e) -> bool:
    """Whether integer arithmetic `e` computes on loaded values (tensor data, which wraps
    around), not on loop variables and sizes alone (index arithmetic, which never overflows)."""
    return dt.is_int(e.dtype) and any(isinstance(x, BufferLoad) for x in walk(e))
