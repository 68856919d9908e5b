"""The arithmetic llvm_math.py's and llvm_trig.py's polynomials are written in: `MathBuilder`
(one IR builder over a float32 scalar or vector type), and the declarations of LLVM's
intrinsics they call (`intrinsic`, `overloaded`, `mangle`)."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from tensorforge.codegen.llvm_types import concat, lanes_of, splat_constant

F32 = ir.FloatType()
I32 = ir.IntType(32)


def mangle(ty: ir.Type) -> str:
    """The type suffix LLVM's intrinsic names use: <8 x float> -> v8f32, i32 -> i32, ptr -> p0."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{mangle(ty.element)}"
    if isinstance(ty, ir.PointerType):
        return "p0"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return ty.intrinsic_name


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """Declare (once) the LLVM function `name` with the given signature."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, args), name=name)


def overloaded(module: ir.Module, base: str, ty: ir.Type, nargs: int = 1) -> ir.Function:
    """An elementwise intrinsic such as llvm.sqrt.v8f32: `nargs` arguments of `ty`, returns `ty`."""
    return intrinsic(module, f"{base}.{mangle(ty)}", ty, [ty] * nargs)


class MathBuilder:
    """Shorthand for writing math polynomials on scalars and vectors alike: constants,
    contracted arithmetic, FMA, Horner, bit casts, reciprocals, lane tests and a cold branch."""

    def __init__(
        self,
        module: ir.Module,
        builder: ir.IRBuilder,
        ty: ir.Type,
        cpu_features: frozenset[str] = frozenset(),
    ):
        self.module, self.b, self.ty = module, builder, ty
        lanes = ty.count if isinstance(ty, ir.VectorType) else 0
        self.ity = ir.VectorType(I32, lanes) if lanes else I32
        self.bty = ir.VectorType(ir.IntType(1), lanes) if lanes else ir.IntType(1)
        self.lanes = lanes
        self.cpu_features = cpu_features

    def f(self, value: float) -> ir.Constant:
        return splat_constant(self.ty, value)

    def i(self, value: int) -> ir.Constant:
        return splat_constant(self.ity, value)

    def add(self, a, b):
        return self.b.fadd(a, b, flags=("contract",))

    def sub(self, a, b):
        return self.b.fsub(a, b, flags=("contract",))

    def mul(self, a, b):
        return self.b.fmul(a, b, flags=("contract",))

    def fma(self, a, b, c):
        """a*b + c, fused where the target has FMA (llvm.fmuladd)."""
        return self.b.call(overloaded(self.module, "llvm.fmuladd", self.ty, 3), [a, b, c])

    def poly(self, x, coeffs: tuple[float, ...]):
        """Horner: coeffs[0]*x^(n-1) + ... + coeffs[-1]."""
        acc = self.f(coeffs[0])
        for c in coeffs[1:]:
            acc = self.fma(acc, x, self.f(c))
        return acc

    def call(self, base: str, *args):
        return self.b.call(overloaded(self.module, base, self.ty, len(args)), list(args))

    def cmp(self, op: str, a, b):
        return self.b.fcmp_ordered(op, a, b)

    def select(self, cond, a, b):
        return self.b.select(cond, a, b)

    def as_int(self, x):
        return self.b.bitcast(x, self.ity)

    def as_float(self, x):
        return self.b.bitcast(x, self.ty)

    def reciprocal(self, d):
        """1 / d for finite nonzero d, within 1 ulp. A vector divide is the slowest arithmetic
        there is (16 lanes: about 16 cycles on AVX-512 Intel cores, against 0.5 for an FMA), so
        where the CPU has a reciprocal estimate it is refined by Newton steps instead: each
        r += r * (1 - d * r) doubles the correct bits (sigmoid on AVX-512: 1.7x faster)."""
        estimate = self._reciprocal_estimate(d)
        if estimate is None:
            return self.b.fdiv(self.f(1.0), d)
        r, steps = estimate
        return self._newton(r, d, steps)

    def divide(self, n, d):
        """n / d for finite nonzero d, within an ulp. Where the CPU has a reciprocal estimate:
        q = n * r, then one correction q += r * (n - d * q) with the exact residual of an FMA
        (rcp14's 14 bits become ~28; rcpps' 12 get one Newton step on r first)."""
        estimate = self._reciprocal_estimate(d)
        if estimate is None:
            return self.b.fdiv(n, d)
        r, steps = estimate
        r = self._newton(r, d, steps - 1)
        q = self.mul(n, r)
        return self.fma(r, self.fma(self.b.fneg(d), q, n), q)

    def _newton(self, r, d, steps: int):
        """`steps` Newton steps r += r * (1 - d * r) on an estimate r of 1 / d."""
        for _ in range(steps):
            r = self.fma(r, self.fma(self.b.fneg(d), r, self.f(1.0)), r)
        return r

    def _reciprocal_estimate(self, d):
        """(estimate, Newton steps) from the widest x86 instruction that fits, else None."""
        for feature, width, name, steps in _RECIPROCAL_ESTIMATES:
            if feature not in self.cpu_features or self.lanes < width or self.lanes % width:
                continue
            vty = ir.VectorType(F32, width)
            if width == 16:  # rcp14 takes a pass-through and a lane mask
                fn = intrinsic(self.module, name, vty, [vty, vty, ir.IntType(16)])
                tail = [ir.Constant(vty, None), ir.Constant(ir.IntType(16), -1)]
            else:
                fn = intrinsic(self.module, name, vty, [vty])
                tail = []
            pieces = [
                self.b.call(fn, [lanes_of(self.b, d, start, width), *tail])
                for start in range(0, self.lanes, width)
            ]
            return concat(self.b, pieces), steps
        return None

    def has_scalef(self) -> bool:
        """Whether `scale_by_pow2` can be used: AVX-512 and whole 16-lane pieces."""
        return "avx512f" in self.cpu_features and self.lanes >= 16 and self.lanes % 16 == 0

    def scale_by_pow2(self, p, n):
        """p * 2**n for integral float n by AVX-512's scalef: overflow gives inf, and a denormal
        result is rounded once (needs `has_scalef`)."""
        vty = ir.VectorType(F32, 16)
        fn = intrinsic(
            self.module,
            "llvm.x86.avx512.mask.scalef.ps.512",
            vty,
            [vty, vty, vty, ir.IntType(16), I32],
        )
        tail = [ir.Constant(vty, None), ir.Constant(ir.IntType(16), -1), ir.Constant(I32, 4)]
        pieces = [
            self.b.call(fn, [lanes_of(self.b, p, k, 16), lanes_of(self.b, n, k, 16), *tail])
            for k in range(0, self.lanes, 16)
        ]
        return concat(self.b, pieces)

    def every_lane(self, cond):
        """An i1: whether `cond` holds in every lane (a vector's lanes reduced by and)."""
        if not self.lanes:
            return cond
        fn = intrinsic(
            self.module, f"llvm.vector.reduce.and.{mangle(self.bty)}", ir.IntType(1), [self.bty]
        )
        return self.b.call(fn, [cond])

    def per_lane_libm(self, symbol: str, x):
        """The C library's float32 `symbol` on each lane of x."""
        fn = intrinsic(self.module, symbol, F32, [F32])
        if not self.lanes:
            return self.b.call(fn, [x])
        out = ir.Constant(self.ty, ir.Undefined)
        for lane in range(self.lanes):
            i = ir.Constant(I32, lane)
            out = self.b.insert_element(out, self.b.call(fn, [self.b.extract_element(x, i)]), i)
        return out

    def unlikely_branch(self, fast_ok, fast, slow: Callable, name: str = "math"):
        """`fast` where `fast_ok` (an i1) holds, else `slow()` computed in a block of its own
        (a branch typical data never takes; blocks `name`.slow and `name`.done): the phi of
        the two."""
        fast_block = self.b.block
        fn = fast_block.function
        slow_block = fn.append_basic_block(f"{name}.slow")
        done_block = fn.append_basic_block(f"{name}.done")
        self.b.cbranch(fast_ok, done_block, slow_block).set_weights([1000, 1])
        self.b.position_at_end(slow_block)
        exact = slow()
        slow_end = self.b.block
        self.b.branch(done_block)
        self.b.position_at_end(done_block)
        result = self.b.phi(self.ty)
        result.add_incoming(fast, fast_block)
        result.add_incoming(exact, slow_end)
        return result

    def pow2(self, n):
        """2**n as a float for integer n in [-126, 127]: the exponent field built directly."""
        return self.as_float(self.b.shl(self.b.add(n, self.i(127)), self.i(23)))


# x86 reciprocal estimates: (CPU feature, lanes, intrinsic, Newton steps to float32 accuracy).
# rcp14 is good to 14 bits, rcpps to 12: one step, resp. two, reach the 24 of a float32.
_RECIPROCAL_ESTIMATES = (
    ("avx512f", 16, "llvm.x86.avx512.rcp14.ps.512", 1),
    ("avx", 8, "llvm.x86.avx.rcp.ps.256", 2),
    ("sse", 4, "llvm.x86.sse.rcp.ps", 2),
)

# -- exp ------------------------------------------------------------------------------------------
