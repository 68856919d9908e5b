"""Calls in lowered IR -> llvmlite: abs, sqrt, rounding, pow, and the math functions (float32
as inlined polynomials from llvm_math, float64 through LLVM's intrinsics or libm; atan2 and
hypot through libm per lane)."""

from __future__ import annotations

from llvmlite import ir

from tensorforge.codegen import llvm_math
from tensorforge.codegen.llvm_math_builder import intrinsic, overloaded
from tensorforge.codegen.llvm_types import I32, splat_constant
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Call
from tensorforge.te.intrin import BITWISE, LIBM_UNARY

FLOAT_BINARY = ("pow", "atan2", "hypot", "fmod", "copysign", "nextafter")


class CallEmitter:
    """The call half of ExprEmitter (a mixin: it uses the emitter's builder, module, expr, cast,
    fail and cpu_features)."""

    def call_overloaded(self, base: str, *args: ir.Value, fastmath: tuple = ()) -> ir.Value:
        return self.builder.call(
            overloaded(self.module, base, args[0].type, len(args)), list(args), fastmath=fastmath
        )

    def _call(self, e: Call) -> ir.Value:
        b, name = self.builder, e.name
        if name == "omp_get_thread_num":  # the worker's index inside a PARALLEL loop (0 outside)
            return b.call(intrinsic(self.module, "omp_get_thread_num", I32, []), [])
        args = [self.expr(a) for a in e.args]
        want = 2 if name in FLOAT_BINARY or name in BITWISE else 1
        if len(args) != want:
            raise self.fail(f"intrinsic {name!r} takes {want} argument(s), got {len(args)}")
        x, dtype = args[0], e.args[0].dtype
        if name == "abs":
            if dt.is_float(dtype):
                return self.call_overloaded("llvm.fabs", x)
            if dt.is_unsigned(dtype) or dt.is_bool(dtype):
                return x
            zero = splat_constant(x.type, 0)
            return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        if name in BITWISE:
            return self._bitwise(name, x, args[1], dtype)
        if not dt.is_float(dtype):
            raise self.fail(f"intrinsic {name!r} needs a float argument, got {dtype}")
        if dt.element_of(dtype) == "float16":  # compute in float32
            wide = dt.with_lanes("float32", dt.lanes_of(dtype))
            result = self._float_call(name, [self.cast(a, dtype, wide) for a in args], wide)
            return self.cast(result, wide, dtype)

        def piece(*xs: ir.Value) -> ir.Value:  # a power-of-two piece of the lanes (lanewise)
            lanes = xs[0].type.count if isinstance(xs[0].type, ir.VectorType) else 1
            return self._float_call(name, list(xs), dt.with_lanes(dtype, lanes))

        return self.lanewise(piece, *args)

    def _bitwise(self, name: str, x: ir.Value, y: ir.Value, dtype: str) -> ir.Value:
        b = self.builder
        if name == "shift_right":
            return b.lshr(x, y) if dt.is_unsigned(dtype) else b.ashr(x, y)
        emit = {"bitwise_and": b.and_, "bitwise_or": b.or_, "bitwise_xor": b.xor}
        return emit.get(name, b.shl)(x, y)

    def _float_call(self, name: str, args: list[ir.Value], dtype: str) -> ir.Value:
        b, x = self.builder, args[0]
        one = splat_constant(x.type, 1.0)
        simple = {
            "sqrt": "llvm.sqrt",
            "floor": "llvm.floor",
            "ceil": "llvm.ceil",
            "round": "llvm.roundeven",
            "pow": "llvm.pow",
        }  # round: half to even, like numpy
        if name in simple:
            return self.call_overloaded(simple[name], *args)
        if name == "fmod":  # C's: the dividend's sign, exact (LLVM's frem)
            return b.frem(x, args[1])
        if name == "copysign":
            return self.call_overloaded("llvm.copysign", *args)
        if name == "nextafter":
            return self._per_lane_libm(
                name + ("f" if dt.element_of(dtype) == "float32" else ""), *args
            )
        if name == "rsqrt":
            return b.fdiv(one, self.call_overloaded("llvm.sqrt", x))
        if name in llvm_math.POLYNOMIAL_FUNCTIONS and dt.element_of(dtype) == "float32":
            helper = llvm_math.math_function(self.module, name, x.type, self.cpu_features)
            return b.call(helper, args)
        float32 = dt.element_of(dtype) == "float32"
        if name in ("log1p", "expm1", "atan2", "hypot", *LIBM_UNARY):
            return self._per_lane_libm(name + ("f" if float32 else ""), *args)
        if name in ("exp", "log", "log2", "tanh"):  # float64: libm per lane
            return self.call_overloaded(f"llvm.{name}", x)
        if name == "sigmoid":
            e = self.call_overloaded("llvm.exp", b.fneg(self.call_overloaded("llvm.fabs", x)))
            r = b.fdiv(one, b.fadd(one, e))
            return b.select(b.fcmp_ordered("<", x, splat_constant(x.type, 0.0)), b.fmul(e, r), r)
        if name == "erf":
            return self._per_lane_libm("erf", x)
        raise self.fail(
            f"unknown intrinsic {name!r} (known: exp expm1 log log1p log2 sqrt rsqrt tanh "
            f"sigmoid erf floor ceil round abs {' '.join(FLOAT_BINARY)} {' '.join(LIBM_UNARY)})"
        )

    def _per_lane_libm(self, symbol: str, *args: ir.Value) -> ir.Value:
        """libm's `symbol` on each lane (its arguments and result of the lanes' type)."""
        b, ty = self.builder, args[0].type
        elem = ty.element if isinstance(ty, ir.VectorType) else ty
        fn = intrinsic(self.module, symbol, elem, [elem] * len(args))
        if not isinstance(ty, ir.VectorType):
            return b.call(fn, list(args))
        out = ir.Constant(ty, ir.Undefined)
        for lane in range(ty.count):
            i = ir.Constant(I32, lane)
            out = b.insert_element(out, b.call(fn, [b.extract_element(a, i) for a in args]), i)
        return out
