"""gcd and lcm of integers as an ir_builder kernel: Euclid's loop per element, as long as that
element needs (a while loop: its steps vary from 1 to ~1.44 x the bits; an unrolled te
expression of the worst case would divide 93 times per int64 element where random ones need a
handful). CPU: the elements in contiguous shares per thread; CUDA: a thread per element.

torch's loop exactly: |a| and |b| (|INT_MIN| wraps to itself), C's remainder (the dividend's
sign), so gcd(0, 0) = 0 and the INT_MIN cases give eager's (negative) values; lcm is
|a / g * b| (of int8 and int16 taken in int32, as C promotes them), wrapping as eager's, and 0
where g is.
"""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.extern_kernels import each, extern_kernel, numel
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Unsupported
from tensorforge.te import dtype as dt

aten = torch.ops.aten

INTERLEAVED = 4  # elements whose loops a CPU task runs side by side


def _c_remainder(x, y):
    """C's x % y (the sign of x) from te's floor remainder (the sign of y)."""
    r = x % y
    zero = te.const(0, x.dtype)
    return te.if_then_else(te.all(r != zero, (r < zero) != (x < zero)), r - y, r)


@lowers(aten.gcd.default, aten.lcm.default)
def gcd_lcm(ctx, node, a, b):
    dtype = ctx.dtype_of(node)
    if not dt.is_int(dtype) or dtype == "bool":
        raise Unsupported(f"{node.target} of {dtype}")
    shape = ctx.shape_of(node)
    if not shape or not all(isinstance(s, int) for s in shape):
        raise Unsupported(f"{node.target} of a 0-d value or of run-time sizes")
    operands = []
    for v in (a, b):  # each as the result's shape and dtype, in memory
        v = ctx.lazy(v)
        if tuple(v.shape) != tuple(shape) or v.dtype != dtype:
            v = ctx.pointwise(lambda e: e, [v], shape=shape, dtype=dtype, compute=dtype)
        operands.append(ctx.buffer(v))
    cuda = ctx.target.kind == "cuda"
    lcm = node.target is aten.lcm.default
    zero = te.const(0, dtype)

    unsigned = dtype if dt.is_unsigned(dtype) else f"u{dtype}"

    def euclid(ib, first, second, kind: str):
        """gcd(first, second) of `kind` (pair[1] once pair[0] is 0)."""
        pair = ib.allocate(kind, 2, name="pair", scope="local")
        pair[0], pair[1] = first, second
        with ib.while_loop(pair[0] != te.const(0, kind)):
            divisor = ib.let("divisor", pair[0])
            remainder = pair[1] % divisor if kind == unsigned else _c_remainder(pair[1], divisor)
            pair[0] = remainder
            pair[1] = divisor
        return pair

    def finish(x, y, i, g):
        if lcm:  # (C promotes a narrow type to int: the product's |.| before it wraps)
            wide = "int32" if dt.bits_of(dtype) < 32 else dtype
            safe = te.if_then_else(g == zero, te.const(1, dtype), g).astype(wide)
            product = te.abs(x[i].astype(wide) // safe * y[i].astype(wide))
            return te.if_then_else(g == zero, zero, product.astype(dtype))
        return g

    def element(ib, x, y, out, i):
        """One element: unsigned where |a| and |b| are non-negative (no floor correction of the
        remainder on the loop's critical path); the minimum's |.| wraps to a negative number,
        whose steps follow C's signed remainders."""
        a, b = ib.let("a", te.abs(x[i])), ib.let("b", te.abs(y[i]))
        g = ib.allocate(dtype, 1, name="g", scope="local")
        with ib.if_scope(te.all(a >= zero, b >= zero)):
            g[0] = euclid(ib, a.astype(unsigned), b.astype(unsigned), unsigned)[1].astype(dtype)
        with ib.else_scope():
            g[0] = euclid(ib, a, b, dtype)[1]
        out[i] = finish(x, y, i, g[0])

    def group(ib, x, y, out, base):
        """INTERLEAVED elements in one loop, each step a remainder of each (one already done
        divides by 1, codegen's guard of a 0 divisor, and keeps its gcd): the divisions'
        latencies overlap where one element's chain waits on each."""
        a = [ib.let(f"a{k}", te.abs(x[base + k])) for k in range(INTERLEAVED)]
        b = [ib.let(f"b{k}", te.abs(y[base + k])) for k in range(INTERLEAVED)]
        with ib.if_scope(te.all(*(v >= zero for v in a + b))):
            pairs = ib.allocate(unsigned, 2 * INTERLEAVED, name="pairs", scope="local")
            for k in range(INTERLEAVED):
                pairs[2 * k], pairs[2 * k + 1] = a[k].astype(unsigned), b[k].astype(unsigned)
            u0 = te.const(0, unsigned)
            with ib.while_loop(te.any(*(pairs[2 * k] != u0 for k in range(INTERLEAVED)))):
                for k in range(INTERLEAVED):
                    divisor = ib.let(f"d{k}", pairs[2 * k])
                    keep = ib.let(f"k{k}", pairs[2 * k + 1])
                    pairs[2 * k] = keep % divisor
                    pairs[2 * k + 1] = te.if_then_else(divisor != u0, divisor, keep)
            for k in range(INTERLEAVED):
                out[base + k] = finish(x, y, base + k, pairs[2 * k + 1].astype(dtype))
        with ib.else_scope():
            for k in range(INTERLEAVED):
                element(ib, x, y, out, base + k)

    def program(ib, ins, out):
        x, y = ins
        n = numel(shape)
        if cuda:
            with each(ib, n, True, "i") as i:
                element(ib, x, y, out, i)
            return
        with each(ib, n // INTERLEAVED, False, "j") as j:
            group(ib, x, y, out, j * INTERLEAVED)
        with ib.for_range(n - n % INTERLEAVED, n, name="i") as i:
            element(ib, x, y, out, i)

    return extern_kernel(ctx, node, operands, tuple(shape), dtype, program)
