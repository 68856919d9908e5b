"""Lowered-IR expressions -> C expressions (GNU C: vector extensions, statement expressions).

A vector of N lanes is a GCC/Clang `vector_size` vector of P lanes, P the power of two >= N (the
extension allows no other sizes); lanes N..P-1 are padding that no load, store, reduction or
division ever reads. A vector of bools is a mask: int8 lanes holding -1 (true) or 0. Every value
is cast back to its dtype after each operation, so C's integer promotions never show: int8 and
uint16 arithmetic wraps as numpy's does. Float Min/Max propagate NaN (as the llvm backend's
llvm.maximum does) and `round` is half to even. Helpers (per-lane loops, selects) are emitted
once per type as `static inline` functions; the optimizer inlines and vectorizes them.
"""

from __future__ import annotations

import math
import re

from tensorforge.errors import BuildError
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp, VectorReduce
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
from tensorforge.te.intrin import BITWISE, LIBM_UNARY

SCALAR = {
    "bool": "bool",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "float16": "_Float16",
    "bfloat16": "uint16_t",  # its bits: the pipeline computes bfloat16 in float32
    "float32": "float",
    "float64": "double",
}
_SHORT = {
    "bool": "b",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
}
_CMP = {LT: "<", LE: "<=", GT: ">", GE: ">=", EQ: "==", NE: "!="}
_ARITH = {Add: "+", Sub: "-", Mul: "*"}
# libm per function and float type (float16 computes in float32)
_LIBM = {
    "exp": ("expf", "exp"),
    "expm1": ("expm1f", "expm1"),
    "log": ("logf", "log"),
    "log1p": ("log1pf", "log1p"),
    "log2": ("log2f", "log2"),
    "sqrt": ("sqrtf", "sqrt"),
    "tanh": ("tanhf", "tanh"),
    "erf": ("erff", "erf"),
    "floor": ("floorf", "floor"),
    "ceil": ("ceilf", "ceil"),
    "round": ("rintf", "rint"),  # in the default rounding mode: half to even, like numpy
    "pow": ("powf", "pow"),
    "atan2": ("atan2f", "atan2"),
    "hypot": ("hypotf", "hypot"),
    "fmod": ("fmodf", "fmod"),
    "copysign": ("copysignf", "copysign"),
    "nextafter": ("nextafterf", "nextafter"),
    **{name: (f"{name}f", name) for name in LIBM_UNARY},
}
BINARY_CALLS = ("pow", "atan2", "hypot", "fmod", "copysign", "nextafter", *BITWISE)
KNOWN_CALLS = (*_LIBM, *BITWISE, "rsqrt", "sigmoid", "abs", "omp_get_thread_num")
_BITWISE_OPERATORS = {
    "bitwise_and": "&",
    "bitwise_or": "|",
    "bitwise_xor": "^",
    "shift_left": "<<",
    "shift_right": ">>",
}

# C keywords and the library names the generated code uses: never the name of a variable
RESERVED = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while bool true false main memcpy aligned_alloc free errno
    assert isnan isinf signbit NAN INFINITY NULL omp_get_thread_num omp_get_num_threads
    omp_get_max_threads""".split()
    + [f for pair in _LIBM.values() for f in pair]
    + list(SCALAR.values())
)


def pow2(lanes: int) -> int:
    """The lane count of the C vector holding `lanes` lanes."""
    return 1 << (lanes - 1).bit_length()


class Names:
    """C identifiers for IR names: unique, never a keyword, a library name or a macro."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def fresh(self, name: str) -> str:
        base = re.sub(r"\W", "_", name) or "v"
        if base[0].isdigit():
            base = "v" + base
        macro_like = re.fullmatch(r"[A-Z][A-Z0-9_]+", base) and (len(base) > 2 or "_" in base)
        if base in RESERVED or base.startswith(("_", "tf_")) or macro_like:
            base += "_"  # keep clear of keywords, our helpers and macro-like names (M_PI, INT_MAX)
        candidate, n = base, 1
        while candidate in self.taken:
            candidate = f"{base}_{n}"
            n += 1
        self.taken.add(candidate)
        return candidate


class CExprPrinter:
    """Prints expressions; collects the vector typedefs and helper functions they need.

    `vars` maps each bound Var to its C name and `buffers` each Buffer to a C pointer (or array)
    name; `func_name` names the PrimFunc in error messages.
    """

    def __init__(self, func_name: str):
        self.func_name = func_name
        self.names = Names()
        self.vars: dict[Var, str] = {}
        self.buffers: dict[Buffer, str] = {}
        self.typedefs: dict[str, str] = {}  # name -> typedef line
        self.helpers: dict[str, str] = {}  # name -> definition
        self.uses_openmp = False
        self._temp = 0

    def fail(self, message: str) -> BuildError:
        return BuildError(f"c codegen of '{self.func_name}': {message}")

    def temp(self, hint: str = "t") -> str:
        self._temp += 1
        return f"tf_{hint}{self._temp}"

    # -- types ----------------------------------------------------------------------------------
    def ctype(self, dtype: str) -> str:
        """The C type of a value of `dtype` (a vector of bools is an int8 mask)."""
        lanes, element = dt.lanes_of(dtype), dt.element_of(dtype)
        if lanes == 1:
            return SCALAR[element]
        return self.vector_type("int8" if element == "bool" else element, lanes)

    def vector_type(self, element: str, lanes: int) -> str:
        p = pow2(lanes)
        name = f"tf_{_SHORT[element]}x{p}"
        if name not in self.typedefs:
            size = p * (dt.bits_of(element) // 8)
            self.typedefs[name] = (
                f"typedef {SCALAR[element]} {name} __attribute__((vector_size({size})));"
            )
        return name

    def mask_type(self, element_bits: int, lanes: int) -> str:
        """The signed integer vector a comparison of `element_bits`-wide lanes gives."""
        return self.vector_type(f"int{element_bits}", lanes)

    def memory_type(self, dtype: str) -> str:
        """The C element type of a buffer of `dtype` (bool is a byte holding 0 or 1)."""
        return "uint8_t" if dt.is_bool(dtype) else SCALAR[dt.element_of(dtype)]

    # -- dispatch -------------------------------------------------------------------------------
    def expr(self, e: Expr) -> str:
        match e:
            case Var():
                if e not in self.vars:
                    raise self.fail(f"variable '{e.name}' is used but not defined")
                return self.vars[e]
            case Const(value=value):
                return self.const(value, e.dtype)
            case Add(a, x) | Sub(a, x) | Mul(a, x):
                return self.arith(_ARITH[type(e)], e.dtype, self.expr(a), self.expr(x))
            case Div(a, x):
                if not dt.is_float(e.dtype):
                    raise self.fail(f"Div of integers ({e}) should be FloorDiv after lowering")
                return self.arith("/", e.dtype, self.expr(a), self.expr(x))
            case FloorDiv(a, x) | FloorMod(a, x):
                name = "floordiv" if isinstance(e, FloorDiv) else "floormod"
                return self.call_helper(name, e.dtype, self.expr(a), self.expr(x))
            case Min(a, x) | Max(a, x):
                name = "min" if isinstance(e, Min) else "max"
                return self.call_helper(name, e.dtype, self.expr(a), self.expr(x))
            case LT(a, x) | LE(a, x) | GT(a, x) | GE(a, x) | EQ(a, x) | NE(a, x):
                return self.compare(_CMP[type(e)], a.dtype, self.expr(a), self.expr(x))
            case And(a, x) | Or(a, x):
                op = "&" if isinstance(e, And) else "|"
                if dt.lanes_of(e.dtype) == 1:
                    op *= 2  # && or ||
                return f"({self.expr(a)} {op} {self.expr(x)})"
            case Not(a):
                return f"(!{self.expr(a)})" if dt.lanes_of(e.dtype) == 1 else f"(~{self.expr(a)})"
            case Select(cond, then, other):
                return self.select(cond, then, other, e.dtype)
            case Cast(dtype=dtype, value=value):
                return self.cast(self.expr(value), value.dtype, dtype)
            case Call():
                return self.call(e)
            case Let(var=var, value=value, body=body):
                name = self.names.fresh(var.name)
                value_text = self.expr(value)
                old = self.vars.get(var)
                self.vars[var] = name
                try:
                    body_text = self.expr(body)
                finally:
                    if old is None:
                        del self.vars[var]
                    else:
                        self.vars[var] = old
                return f"({{ {self.ctype(var.dtype)} {name} = {value_text}; {body_text}; }})"
            case BufferLoad():
                return self.load(e)
            case Ramp(base=base, stride=stride, lanes=lanes):
                return self.ramp(base, stride, lanes)
            case Broadcast(value=value, lanes=lanes):
                return self.broadcast(self.expr(value), value.dtype, lanes)
            case VectorReduce(op=op, value=value):
                return self.call_helper(f"reduce_{op}", value.dtype, self.expr(value))
        raise self.fail(f"cannot generate code for {type(e).__name__} ({e}); is the IR lowered?")

    # -- constants, arithmetic, comparisons -----------------------------------------------------
    def const(self, value: object, dtype: str) -> str:
        element, lanes = dt.element_of(dtype), dt.lanes_of(dtype)
        if lanes > 1:
            return self.broadcast(self.const(value, element), element, lanes)
        if element == "bool":
            return "true" if value else "false"
        ctype = SCALAR[element]
        if dt.is_float(element):
            v = float(value)
            if math.isnan(v):
                text = "NAN"
            elif math.isinf(v):
                text = "INFINITY" if v > 0 else "-INFINITY"
            elif element == "float32":
                return f"{v.hex()}f" if v >= 0 else f"({v.hex()}f)"  # hex floats are exact
            else:
                text = v.hex()
            return f"(({ctype}){text})"
        v = int(value)
        if element == "int32" and v >= 0:
            return str(v)  # an int literal is an int32_t
        if element == "int64" and v == -(2**63):
            return "((int64_t)(-9223372036854775807LL - 1))"
        suffix = "ULL" if dt.is_unsigned(element) else "LL"
        return f"(({ctype}){v}{suffix})" if v >= 0 else f"(({ctype})({v}LL))"

    def arith(self, op: str, dtype: str, a: str, b: str) -> str:
        """`a op b` in `dtype`: narrow integers computed in 32 bits and wrapped back."""
        element = dt.element_of(dtype)
        if dt.lanes_of(dtype) > 1:
            if element == "bool":  # masks: + and - are xor, * is and (i1 arithmetic)
                op = {"+": "^", "-": "^", "*": "&"}.get(op, op)
            return f"({a} {op} {b})"
        ctype = SCALAR[element]
        if element == "bool":
            return f"(({a} {'&' if op == '*' else '^'} {b}) != 0)"
        if dt.is_int(element) and dt.bits_of(element) < 32:
            wide = "uint32_t" if dt.is_unsigned(element) else "int32_t"
            return f"(({ctype})(({wide}){a} {op} ({wide}){b}))"
        if element == "float16":  # rounded after each operation, as the llvm backend's half
            return f"(({ctype})({a} {op} {b}))"
        return f"({a} {op} {b})"  # no promotion: both sides are `ctype` already

    def compare(self, op: str, dtype: str, a: str, b: str) -> str:
        if dt.lanes_of(dtype) == 1:
            return f"({a} {op} {b})"
        lanes = dt.lanes_of(dtype)
        if dt.is_bool(dtype):  # masks hold -1 for true: compare 0/1 as bools compare
            a, b = f"(-{a})", f"(-{b})"
        return self.to_mask(
            f"({a} {op} {b})", dt.bits_of(dtype) if not dt.is_bool(dtype) else 8, lanes
        )

    def to_mask(self, comparison: str, element_bits: int, lanes: int) -> str:
        """A vector comparison's result (lanes as wide as its operands') as an int8 mask."""
        if element_bits == 8:
            return comparison
        return f"__builtin_convertvector({comparison}, {self.vector_type('int8', lanes)})"

    def select(self, cond: Expr, then: Expr, other: Expr, dtype: str) -> str:
        c, t, f = self.expr(cond), self.expr(then), self.expr(other)
        lanes = dt.lanes_of(dtype)
        if lanes == 1:
            return f"({c} ? {t} : {f})"
        if dt.lanes_of(cond.dtype) == 1:  # one condition for every lane
            return f"({c} ? {t} : {f})"
        return self.call_helper("select", dtype, c, t, f)

    def broadcast(self, value: str, dtype: str, lanes: int) -> str:
        """Every lane `value` (a scalar of `dtype`)."""
        vtype = self.ctype(dt.with_lanes(dtype, lanes))
        if dt.is_bool(dtype):
            return f"(({vtype}){{}} - (int8_t)({value}))"  # true -> -1
        return f"(({vtype}){{}} + ({SCALAR[dt.element_of(dtype)]})({value}))"

    def ramp(self, base: Expr, stride: Expr, lanes: int) -> str:
        dtype = base.dtype
        vtype = self.ctype(dt.with_lanes(dtype, lanes))
        start = self.broadcast(self.expr(base), dtype, lanes)
        p = pow2(lanes)
        if isinstance(stride, Const):
            offsets = ", ".join(str(int(stride.value) * i) for i in range(p))
            return f"({start} + ({vtype}){{{offsets}}})"
        iota = ", ".join(str(i) for i in range(p))
        step = self.broadcast(self.expr(stride), dtype, lanes)
        return f"({start} + {step} * ({vtype}){{{iota}}})"

    # -- casts ----------------------------------------------------------------------------------
    def cast(self, value: str, src: str, dst: str) -> str:
        lanes_src, lanes_dst = dt.lanes_of(src), dt.lanes_of(dst)
        if lanes_src == 1 and lanes_dst > 1:
            element = dt.element_of(dst)
            return self.broadcast(self.cast(value, src, element), element, lanes_dst)
        if lanes_src != lanes_dst:
            raise self.fail(f"cast from {src} to {dst} changes the number of lanes")
        s, d = dt.element_of(src), dt.element_of(dst)
        if s == d:
            return value
        if "bfloat16" in (s, d):  # through float32, with bit operations (c.py's helpers)
            wide = dt.with_lanes("float32", lanes_dst)
            if s == "bfloat16":
                return self.cast(self.call_helper("bf16_to_f32", src, value), wide, dst)
            return self.call_helper("f32_to_bf16", wide, self.cast(value, src, wide))
        if lanes_dst == 1:
            if d == "bool":
                return f"({value} != 0)"
            return f"(({SCALAR[d]})({value}))"
        vtype = self.ctype(dst)
        if d == "bool":
            zero = f"({self.ctype(src)}){{}}"
            return self.to_mask(f"({value} != {zero})", dt.bits_of(s), lanes_dst)
        if s == "bool":
            value = f"(-{value})"  # -1 -> 1
        return f"__builtin_convertvector({value}, {vtype})"

    # -- calls ----------------------------------------------------------------------------------
    def call(self, e: Call) -> str:
        name = e.name
        if name == "omp_get_thread_num":  # the worker's index inside a PARALLEL loop (0 outside)
            self.uses_openmp = True
            return f"(({SCALAR[dt.element_of(e.dtype)]})omp_get_thread_num())"
        if name not in KNOWN_CALLS:
            raise self.fail(f"unknown intrinsic {name!r} (known: {' '.join(sorted(KNOWN_CALLS))})")
        want = 2 if name in BINARY_CALLS else 1
        if len(e.args) != want:
            raise self.fail(f"intrinsic {name!r} takes {want} argument(s), got {len(e.args)}")
        dtype = e.args[0].dtype
        if name in BITWISE:
            return self.bitwise(name, e.dtype, *(self.expr(a) for a in e.args))
        if name != "abs" and not dt.is_float(dtype):
            raise self.fail(f"intrinsic {name!r} needs a float argument, got {dtype}")
        return self.call_helper(name, dtype, *(self.expr(a) for a in e.args))

    def bitwise(self, name: str, dtype: str, a: str, b: str) -> str:
        """a & b, a << b, ...: of vectors lanewise; a scalar's result cast back to its type (C
        computes small ones in int), a left shift in the unsigned type (signed overflow)."""
        op = _BITWISE_OPERATORS[name]
        if dt.lanes_of(dtype) > 1:
            return f"({a} {op} {b})"
        t = SCALAR[dt.element_of(dtype)]
        if name == "shift_left":
            return f"(({t})((uint64_t)(int64_t)({a}) << ({b})))"
        return f"(({t})({a} {op} {b}))"

    # -- memory ---------------------------------------------------------------------------------
    def buffer(self, buffer: Buffer) -> str:
        if buffer not in self.buffers:
            raise self.fail(
                f"buffer '{buffer.name}' is accessed but is neither a parameter nor allocated"
            )
        return self.buffers[buffer]

    def load(self, e: BufferLoad) -> str:
        if len(e.indices) != 1:
            raise self.fail(
                f"load of '{e.buffer.name}' has {len(e.indices)} indices, expected one flat index"
            )
        buf, index, dtype = self.buffer(e.buffer), e.indices[0], e.buffer.dtype
        lanes = dt.lanes_of(index.dtype)
        mask = None if e.predicate is None else self.expr(e.predicate)
        if lanes == 1:
            value = f"{buf}[{self.expr(index)}]"
            if dt.is_bool(dtype):
                value = f"({value} != 0)"
            if mask is not None:  # masked off: 0, and memory is not touched
                value = f"({mask} ? {value} : {self.const(0, dtype)})"
            return value
        vtype, ctype = self.ctype(dt.with_lanes(dtype, lanes)), self.memory_type(dtype)
        lane_mask = "" if mask is None else self._lane_condition(e.predicate, "m", lanes)
        r, m, b = self.temp("r"), self.temp("m"), self.temp("i")
        mask_decl = "" if mask is None else f"{self.ctype(e.predicate.dtype)} {m} = {mask}; "
        if dt.is_bool(dtype):
            raw = self.vector_type("uint8", lanes)
            element = f"({buf}[{{at}}] != 0 ? -1 : 0)"
        else:
            raw, element = vtype, f"{buf}[{{at}}]"
        if isinstance(index, Broadcast):  # one element for every lane
            at = self.expr(index.value)
            one = element.format(at=at)
            if mask is None:
                return self.broadcast(
                    f"{buf}[{at}]" if not dt.is_bool(dtype) else f"({buf}[{at}] != 0)",
                    dtype,
                    lanes,
                )
            lanes_on = lane_mask.format(m=m, lane="tf_l")
            return (
                f"({{ {mask_decl}{vtype} {r} = {{}}; "
                f"for (int tf_l = 0; tf_l < {lanes}; ++tf_l) if ({lanes_on}) {r}[tf_l] = {one}; {r}; }})"
            )
        if isinstance(index, Ramp) and isinstance(index.stride, Const) and index.stride.value == 1:
            start = f"int64_t {b} = {self.expr(index.base)}; "
            if mask is None:
                size = f"{lanes} * sizeof({ctype})"
                if dt.is_bool(dtype):
                    return (
                        f"({{ {start}{raw} {r} = {{}}; memcpy(&{r}, &{buf}[{b}], {size}); "
                        f"{self.to_mask(f'({r} != ({raw}){{}})', 8, lanes)}; }})"
                    )
                return f"({{ {start}{vtype} {r} = {{}}; memcpy(&{r}, &{buf}[{b}], {size}); {r}; }})"
            lanes_on = lane_mask.format(m=m, lane="tf_l")
            one = element.format(at=f"{b} + tf_l")
            return (
                f"({{ {start}{mask_decl}{vtype} {r} = {{}}; "
                f"for (int tf_l = 0; tf_l < {lanes}; ++tf_l) if ({lanes_on}) {r}[tf_l] = {one}; {r}; }})"
            )
        # a gather: one element per lane
        decl, at = self.lane_address(index)
        one = element.format(at=at)
        guard = "" if mask is None else f"if ({lane_mask.format(m=m, lane='tf_l')}) "
        return (
            f"({{ {decl}{mask_decl}{vtype} {r} = {{}}; "
            f"for (int tf_l = 0; tf_l < {lanes}; ++tf_l) {guard}{r}[tf_l] = {one}; {r}; }})"
        )

    def lane_address(self, index: Expr) -> tuple[str, str]:
        """(declarations, lane `tf_l`'s element index) of a vector index: a strided Ramp as
        base + tf_l * stride (scalars), any other as a vector of indices read per lane."""
        ix = self.temp("ix")
        if isinstance(index, Ramp):
            base, stride = self.expr(index.base), self.expr(index.stride)
            decl = f"const int64_t {ix} = {base}, {ix}_step = {stride}; "
            return decl, f"{ix} + tf_l * {ix}_step"
        return f"const {self.ctype(index.dtype)} {ix} = {self.expr(index)}; ", f"{ix}[tf_l]"

    def _lane_condition(self, predicate: Expr, name: str, lanes: int) -> str:
        """A format string: is lane `{lane}` of mask `{m}` on (a scalar predicate: all or none)."""
        if dt.lanes_of(predicate.dtype) == 1:
            return "{m}"
        return "{m}[{lane}]"

    # -- helpers --------------------------------------------------------------------------------
    def call_helper(self, op: str, dtype: str, *args: str) -> str:
        """`tf_<op>_<type>(args)`, the helper defined on first use (`define_helper`)."""
        return f"{self.define_helper(op, dtype)}({', '.join(args)})"

    def define_helper(self, op: str, dtype: str) -> str:
        """The name of helper `op` for `dtype`, defined in `helpers` if new (c.py writes them)."""
        raise NotImplementedError
