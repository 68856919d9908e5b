"""Wide vector accesses in CUDA C: contiguous, provably aligned 32-bit vector loads and stores
become `float4` / `float2` (`int4`, `uint2`, ...) accesses, and 16-bit floats move 2, 4 or 8
lanes as one raw word. The statement writer hoists those loads into temporaries
(`plan_vector_loads`) and the expression printer reads their `.x .y .z .w` fields (`lane_of`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tensorforge.codegen.cuda_types import (
    _RAW_WORDS,
    HALF_TYPES,
    LANE_FIELDS,
    VECTOR_CTYPES,
    _elem_bytes,
    strip_parens,
    vector_ctype,
)
from tensorforge.ir.expr import Buffer, BufferLoad, Ramp, VectorReduce
from tensorforge.te import dtype as dt
from tensorforge.te import expr as E

_LARGE = 1 << 30  # "divisible by anything we ask about" (the constant 0)


@dataclass(frozen=True)
class VectorAccess:
    """A contiguous vector access done as `lanes // chunk` aligned accesses of `chunk` lanes."""

    buffer: Buffer
    base: E.Expr
    lanes: int
    chunk: int  # 2 or 4


class VectorAccesses:
    """The wide-access half of the CUDA expression printer (ExprPrinter), which supplies
    `names`, `divisors` (id(var) -> a known divisor of its value), `vector_params` (buffer C name
    -> the byte alignment it needs) and `_print`."""

    def divisor(self, e: E.Expr) -> int:
        """A positive number that provably divides the integer value of `e` (1 if nothing known)."""
        match e:
            case E.Const(value=v):
                return abs(int(v)) if int(v) != 0 else _LARGE
            case E.Var():
                return self.divisors.get(id(e), 1)
            case E.Add(a=a, b=b) | E.Sub(a=a, b=b):
                return math.gcd(self.divisor(a), self.divisor(b))
            case E.Mul(a=a, b=b):
                return min(self.divisor(a) * self.divisor(b), _LARGE)
            case E.FloorMod(a=a, b=E.Const(value=c)) if int(c) != 0:
                return math.gcd(self.divisor(a), abs(int(c)))
            case E.Cast(value=v) if dt.is_int(e.dtype) and dt.is_int(v.dtype):
                return self.divisor(v)
        return 1

    def vector_access(
        self, buffer: Buffer, index: E.Expr, predicate: E.Expr | None
    ) -> VectorAccess | None:
        """How a vector load/store of `buffer[index]` is done with wide accesses, or None (per lane).

        NOTE: alignment is proved, not assumed: the Ramp base must be a provable multiple of the
        chunk (params are checked for 16-byte alignment at call time; shared/local arrays are
        declared __align__(16)). Local arrays stay per lane so they can live in registers.
        """
        if predicate is not None or not isinstance(index, Ramp) or buffer.scope == "local":
            return None
        if not (isinstance(index.stride, E.Const) and int(index.stride.value) == 1):
            return None
        half = dt.is_half(buffer.dtype)
        if dt.element_of(buffer.dtype) not in VECTOR_CTYPES and not half:
            return None
        divisor = self.divisor(index.base)
        for chunk in (8, 4, 2) if half else (4, 2):
            if index.lanes % chunk == 0 and divisor % chunk == 0:
                return VectorAccess(buffer, index.base, index.lanes, chunk)
        return None

    def plan_vector_loads(self, e: E.Expr) -> dict[Any, VectorAccess]:
        """Vector loads in `e` (by structural key) evaluated unconditionally that can be wide."""
        found: dict[Any, VectorAccess] = {}

        def visit(x: E.Expr) -> None:
            match x:
                case BufferLoad(buffer=b, indices=(index,), predicate=p) if (
                    dt.lanes_of(x.dtype) > 1
                ):
                    access = self.vector_access(b, index, p)
                    if access is not None:
                        found.setdefault(E.structural_key(x), access)
                    return  # the index itself is scalar or a gather: nothing inside to hoist
                case E.Select() | E.Let() | E.And() | E.Or():
                    return  # conditionally evaluated: keep per-lane
                case E.BinaryOp(a=a, b=b):
                    visit(a)
                    visit(b)
                case E.Not(a=a) | E.Cast(value=a) | VectorReduce(value=a):
                    visit(a)
                case E.Call(args=args):
                    for arg in args:
                        visit(arg)

        visit(e)
        return found

    def load_vector(self, access: VectorAccess) -> tuple[list[str], list[str]]:
        """(declaration lines, temp names) of the wide loads of `access`.

        16-bit floats load `chunk` lanes as one raw word into an array of packed pairs
        (`half2 t[4]` for 8 lanes: one 16-byte load), read back lane by lane as `t[k].x`."""
        buf = self.names.buffer(access.buffer)
        dtype = access.buffer.dtype
        nbytes = _elem_bytes(dtype) * access.chunk
        self.vector_params[buf] = max(self.vector_params.get(buf, 0), nbytes)
        lines, temps = [], []
        for k in range(access.lanes // access.chunk):
            temp = self.names.fresh(f"{buf}_v")
            offset = self._offset(access.base, k * access.chunk)
            if dt.is_half(dtype):
                pair, raw = HALF_TYPES[dt.element_of(dtype)][2], _RAW_WORDS[access.chunk]
                lines.append(f"{pair} {temp}[{access.chunk // 2}];")
                lines.append(
                    f"*reinterpret_cast<{raw}*>({temp}) = "
                    f"*reinterpret_cast<const {raw}*>(&{buf}[{offset}]);"
                )
            else:
                vtype = vector_ctype(dtype, access.chunk)
                lines.append(
                    f"const {vtype} {temp} = *reinterpret_cast<const {vtype}*>(&{buf}[{offset}]);"
                )
            temps.append(temp)
        return lines, temps

    def store_vector(self, access: VectorAccess, lanes: list[str]) -> list[str]:
        buf = self.names.buffer(access.buffer)
        dtype = access.buffer.dtype
        nbytes = _elem_bytes(dtype) * access.chunk
        self.vector_params[buf] = max(self.vector_params.get(buf, 0), nbytes)
        lines = []
        for k in range(access.lanes // access.chunk):
            offset = self._offset(access.base, k * access.chunk)
            chunk = lanes[k * access.chunk : (k + 1) * access.chunk]
            if dt.is_half(dtype):
                _, _, pair, make, _ = HALF_TYPES[dt.element_of(dtype)]
                raw = _RAW_WORDS[access.chunk]
                pairs = ", ".join(f"{make}({a}, {b})" for a, b in zip(chunk[::2], chunk[1::2]))
                temp = self.names.fresh(f"{buf}_pack")
                lines.append(f"const {pair} {temp}[{access.chunk // 2}] = {{{pairs}}};")
                lines.append(
                    f"*reinterpret_cast<{raw}*>(&{buf}[{offset}]) = "
                    f"*reinterpret_cast<const {raw}*>({temp});"
                )
            else:
                vtype = vector_ctype(dtype, access.chunk)
                parts = ", ".join(chunk)
                lines.append(
                    f"*reinterpret_cast<{vtype}*>(&{buf}[{offset}]) = make_{vtype}({parts});"
                )
        return lines

    def lane_of(self, temp: str, dtype: str, lane: int) -> str:
        """Lane `lane` (within its chunk) of a wide-load temporary."""
        if dt.is_half(dtype):
            return f"{temp}[{lane // 2}].{LANE_FIELDS[lane % 2]}"
        return f"{temp}.{LANE_FIELDS[lane]}"

    def _offset(self, base: E.Expr, k: int) -> str:
        text = strip_parens(self._print(base, None))
        return text if k == 0 else f"{text} + {k}"
