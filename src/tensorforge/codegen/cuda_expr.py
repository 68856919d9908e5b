"""CUDA C text for loop-IR expressions: names, scalars and lanes of vectors.

Vector expressions are printed lane by lane (`lane=i`): the CUDA compiler keeps the lanes in
registers; only contiguous, provably aligned vector loads and stores become wide accesses
(cuda_vector.py). C types and literals are in cuda_types.py.
"""

from __future__ import annotations

import re
from typing import Any

from tensorforge.codegen import cuda_intrin
from tensorforge.codegen.cuda_types import HALF_TYPES, ctype, literal, strip_parens
from tensorforge.codegen.cuda_vector import VectorAccesses
from tensorforge.errors import BuildError
from tensorforge.ir import gpu_intrin
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp, VectorReduce
from tensorforge.ir.extern import AddressOf, WholeBuffer
from tensorforge.ir.visit import walk
from tensorforge.te import dtype as dt
from tensorforge.te import expr as E
from tensorforge.te.extern_call import ExternCall
from tensorforge.te.intrin import LIBM_UNARY

_RESERVED = {
    # C++ keywords and CUDA built-ins a buffer or variable name could collide with
    *[
        "auto",
        "bool",
        "break",
        "case",
        "char",
        "const",
        "continue",
        "default",
        "do",
        "double",
        "else",
        "enum",
        "extern",
        "float",
        "for",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "register",
        "restrict",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "struct",
        "switch",
        "typedef",
        "union",
        "unsigned",
        "void",
        "volatile",
        "while",
        "class",
        "delete",
        "new",
        "operator",
        "private",
        "protected",
        "public",
        "this",
        "template",
        "typename",
        "virtual",
        "namespace",
        "using",
        "true",
        "false",
        "half",
        "nullptr",
        "asm",
        "friend",
        "mutable",
        "threadIdx",
        "blockIdx",
        "blockDim",
        "gridDim",
        "warpSize",
        "main",
        "min",
        "max",
        "abs",
        "exp",
        "expm1",
        "log",
        "log1p",
        "atan2",
        "hypot",
        "fmod",
        "copysign",
        "nextafter",
        "sqrt",
        "floor",
        "ceil",
        "round",
        "pow",
        "tanh",
        "erf",
        *LIBM_UNARY,
    ]
}

_BINARY = {
    E.Add: "+",
    E.Sub: "-",
    E.Mul: "*",
    E.LT: "<",
    E.LE: "<=",
    E.GT: ">",
    E.GE: ">=",
    E.EQ: "==",
    E.NE: "!=",
    E.And: "&&",
    E.Or: "||",
}

# math intrinsic -> CUDA function, by element type (sigmoid is spelled out in `_call`)
_FLOAT32_CALLS = {
    "exp": "expf",
    "exp2": "exp2f",
    "expm1": "expm1f",
    "log": "logf",
    "log1p": "log1pf",
    "log2": "log2f",
    "log10": "log10f",
    "sqrt": "sqrtf",
    "rsqrt": "rsqrtf",
    "tanh": "tanhf",
    "erf": "erff",
    "floor": "floorf",
    "ceil": "ceilf",
    "round": "rintf",  # half to even, as numpy.round
    "trunc": "truncf",
    "abs": "fabsf",
    "pow": "powf",
    "atan2": "atan2f",
    "hypot": "hypotf",
    "fmod": "fmodf",
    "copysign": "copysignf",
    "nextafter": "nextafterf",
    **{name: f"{name}f" for name in LIBM_UNARY},
}
_FLOAT64_CALLS = {name: f[:-1] for name, f in _FLOAT32_CALLS.items()}

BITWISE_OPERATORS = {
    "bitwise_and": "&",
    "bitwise_or": "|",
    "bitwise_xor": "^",
    "shift_left": "<<",
    "shift_right": ">>",
}

_SMALL_INTS = {"bool", "signed char", "short", "unsigned char", "unsigned short"}


class Names:
    """C identifiers for variables and buffers: sanitized, unique in the kernel, scoped bindings."""

    def __init__(self) -> None:
        self.used: set[str] = set(_RESERVED)
        self.vars: dict[int, list[str | list[str]]] = {}
        self.buffers: dict[int, str] = {}
        self.buffers_by_name: dict[str, str] = {}

    def fresh(self, hint: str) -> str:
        name = re.sub(r"[^0-9A-Za-z_]", "_", hint) or "v"
        if name[0].isdigit():
            name = "v_" + name
        if name.startswith("__"):
            name = "v" + name
        candidate, n = name, 1
        while candidate in self.used:
            candidate, n = f"{name}_{n}", n + 1
        self.used.add(candidate)
        return candidate

    # -- variables -----------------------------------------------------------------------------
    def bind(self, var: E.Var, name: str | list[str] | None = None) -> str | list[str]:
        """Bind `var` to a fresh C name (or to `name`); a vector var gets one name per lane."""
        if name is None:
            lanes = dt.lanes_of(var.dtype)
            base = self.fresh(var.name)
            name = base if lanes == 1 else [self.fresh(f"{base}_l{i}") for i in range(lanes)]
        self.vars.setdefault(id(var), []).append(name)
        return name

    def unbind(self, var: E.Var) -> None:
        self.vars[id(var)].pop()

    def var(self, var: E.Var) -> str | list[str]:
        stack = self.vars.get(id(var))
        if not stack:
            raise BuildError(
                f"CUDA codegen: variable '{var.name}' is used but never defined in the kernel "
                f"(not a parameter, loop variable or let)"
            )
        return stack[-1]

    # -- buffers -------------------------------------------------------------------------------
    def bind_buffer(self, buffer: Buffer, name: str | None = None) -> str:
        name = name or self.fresh(buffer.name)
        self.buffers[id(buffer)] = name
        self.buffers_by_name.setdefault(buffer.name, name)
        return name

    def buffer(self, buffer: Buffer) -> str:
        name = self.buffers.get(id(buffer)) or self.buffers_by_name.get(buffer.name)
        if name is None:
            raise BuildError(
                f"CUDA codegen: buffer '{buffer.name}' is accessed but is neither a parameter "
                f"nor allocated in the kernel"
            )
        return name


class ExprPrinter(VectorAccesses):
    """Prints expressions as CUDA C; `lane=None` for a scalar, `lane=i` for lane i of a vector."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.hoisted: dict[Any, list[str]] = {}  # structural key of a vector load -> chunk temps
        self.divisors: dict[int, int] = {}  # id(var) -> a known divisor of its value
        self.nonnegative_vars: set[int] = set()  # id(var) of integer vars known to be >= 0
        self.helpers: set[str] = set()  # "floordiv", "minmax_nan", "half", "bf16"
        self.fill_barrier: str | None = None  # the pipeline fill being written: its mbarrier
        self.tensor_maps: dict[str, str] = {}  # buffer param name -> its tensor map's C name
        self.vector_params: dict[str, int] = {}  # buffer C name -> byte alignment it needs
        self.device_sources: list[str] = []  # code of the device functions calls name

    # -- public --------------------------------------------------------------------------------
    def __call__(self, e: E.Expr, lane: int | None = None) -> str:
        """`e` as C text without redundant outer parentheses (for statements and indices)."""
        return strip_parens(self._print(e, lane))

    # -- printing ------------------------------------------------------------------------------
    def _print(self, e: E.Expr, lane: int | None) -> str:
        if lane is not None and dt.lanes_of(e.dtype) == 1:
            lane = None  # a scalar inside a vector expression (e.g. a Ramp base)
        if lane is None and dt.lanes_of(e.dtype) > 1:
            raise BuildError(f"CUDA codegen: vector expression {e} used where a scalar is needed")
        if dt.is_half(e.dtype):
            self.helpers.add(HALF_TYPES[dt.element_of(e.dtype)][4])
        p = self._print
        match e:
            case E.Var():
                name = self.names.var(e)
                if isinstance(name, list):
                    if lane is None:
                        raise BuildError(f"CUDA codegen: vector variable {e.name} used as a scalar")
                    return name[lane]
                return name
            case E.Const(value=v, dtype=d):
                return literal(v, d)
            case Ramp(base=base, stride=stride):
                assert lane is not None
                if lane == 0:
                    return p(base, None)
                if isinstance(stride, E.Const):  # ramp(b, 2, 4) lane 3 -> b + 6
                    return f"({p(base, None)} + {literal(lane * int(stride.value), base.dtype)})"
                return f"({p(base, None)} + {literal(lane, base.dtype)} * {p(stride, None)})"
            case Broadcast(value=v):
                return p(v, None)
            case BufferLoad(buffer=buffer, indices=(index,), predicate=pred):
                return self._load(e, buffer, index, pred, lane)
            case VectorReduce(op=op, value=v):
                lanes = [p(v, i) for i in range(dt.lanes_of(v.dtype))]
                return self._fold(op, lanes, e.dtype)
            case E.Div(a=a, b=b):
                if not dt.is_float(e.dtype):
                    raise BuildError(
                        f"CUDA codegen: Div on {e.dtype} ({e}); use FloorDiv for integers"
                    )
                return f"({p(a, lane)} / {p(b, lane)})"
            case E.FloorDiv(a=a, b=b) | E.FloorMod(a=a, b=b):
                if dt.is_int(e.dtype) and _positive(b) and self.nonnegative(a):
                    # C's truncation is Python's floor here: no sign correction (a gather's
                    # index arithmetic is mostly such divisions)
                    return (
                        f"({p(a, lane)} {'/' if isinstance(e, E.FloorDiv) else '%'} {p(b, lane)})"
                    )
                return self._floor_op(isinstance(e, E.FloorDiv), p(a, lane), p(b, lane), e.dtype)
            case E.Min(a=a, b=b) | E.Max(a=a, b=b):
                return self._min_max(isinstance(e, E.Min), p(a, lane), p(b, lane), e.dtype)
            case E.Add(a=a, b=b) | E.Sub(a=a, b=b) | E.Mul(a=a, b=b) if _wraps(e):
                # signed overflow is undefined in C++ (nvcc folded an int32 (a * 3) / 3 to a):
                # tensor values wrap around, as torch's do, in unsigned arithmetic
                wide = "unsigned long long" if dt.element_of(e.dtype) == "int64" else "unsigned int"
                op = _BINARY[type(e)]
                value = f"({wide})({p(a, lane)}) {op} ({wide})({p(b, lane)})"
                return f"(({ctype(dt.element_of(e.dtype))})({value}))"
            case E.BinaryOp(a=a, b=b) if type(e) in _BINARY:
                return f"({p(a, lane)} {_BINARY[type(e)]} {p(b, lane)})"
            case E.Not(a=a):
                return f"(!{p(a, lane)})"
            case E.Select(condition=c, true_value=t, false_value=f):
                return f"({p(c, lane)} ? {p(t, lane)} : {p(f, lane)})"
            case E.Cast(dtype=d, value=v):
                src, dst = dt.element_of(v.dtype), dt.element_of(d)
                if dt.is_half(src) and src != dst:  # through float: no direct conversions
                    self.helpers.add(HALF_TYPES[src][4])
                    text = f"{HALF_TYPES[src][0]}({p(v, lane)})"
                    return text if dst == "float32" else f"(({ctype(d)})({text}))"
                if dt.is_half(dst) and src != dst:
                    text = p(v, lane) if src == "float32" else f"(float)({p(v, lane)})"
                    return f"{HALF_TYPES[dst][1]}({text})"
                return f"(({ctype(d)})({p(v, lane)}))"
            case E.Call(name=name, args=args) if name in gpu_intrin.GPU_INTRINSICS:
                return self._gpu_call(name, [p(a, lane) for a in args], e.dtype)
            case E.Call(name=name, args=args):
                return self._call(name, [p(a, lane) for a in args], e.dtype)
            case ExternCall():
                return cuda_intrin.print_call(self, e, lane)
            case AddressOf() | WholeBuffer():
                return cuda_intrin.print_address(self, e)
            case E.Let(var=var, value=value, body=body):
                # an immediately invoked lambda evaluates `value` once, in order, as an expression
                text_value = p(value, lane)
                name = self.names.bind(var, self.names.fresh(var.name))
                try:
                    text_body = p(body, lane)
                finally:
                    self.names.unbind(var)
                t = ctype(body.dtype)
                return f"([&]() -> {t} {{ const {ctype(value.dtype)} {name} = {text_value}; return {text_body}; }}())"
        raise BuildError(
            f"CUDA codegen: cannot generate code for expression {e!r} ({type(e).__name__})"
        )

    def _load(
        self, e: BufferLoad, buffer: Buffer, index: E.Expr, pred: E.Expr | None, lane: int | None
    ) -> str:
        name = self.names.buffer(buffer)
        if buffer.scope == "warp":
            raise BuildError(
                f"CUDA codegen: warp-scope fragment '{buffer.name}' is read element by element; "
                f"only tensor intrinsics (tensorize) can read a fragment"
            )
        if lane is not None:
            temps = self.hoisted.get(E.structural_key(e))
            if temps is not None:
                chunk = dt.lanes_of(e.dtype) // len(temps)
                return self.lane_of(temps[lane // chunk], e.dtype, lane % chunk)
        text = f"{name}[{strip_parens(self._print(index, lane))}]"
        if pred is not None:
            zero = literal(0, buffer.dtype)
            return f"({self._print(pred, lane)} ? {text} : {zero})"
        return text

    def _fold(self, op: str, lanes: list[str], dtype: str) -> str:
        if op == "add":
            return "(" + " + ".join(lanes) + ")"
        if op not in ("max", "min"):
            raise BuildError(f"CUDA codegen: unknown VectorReduce op {op!r}")
        out = lanes[0]
        for x in lanes[1:]:
            out = self._min_max(op == "min", out, x, dtype)
        return out

    def nonnegative(self, e: E.Expr) -> bool:
        """Whether the integer expression `e` provably has no negative value (lane)."""
        match e:
            case E.Const(value=v):
                return v >= 0
            case E.Var():
                return id(e) in self.nonnegative_vars
            case E.Add(a=a, b=b) | E.Mul(a=a, b=b) | E.Min(a=a, b=b):
                return self.nonnegative(a) and self.nonnegative(b)
            case E.Max(a=a, b=b):
                return self.nonnegative(a) or self.nonnegative(b)
            case E.FloorDiv(a=a, b=b):
                return _positive(b) and self.nonnegative(a)
            case E.FloorMod(b=b):
                return _positive(b)  # Python's modulo takes the divisor's sign
            case E.Cast(value=v) if dt.is_int(e.dtype) and dt.is_int(v.dtype):
                wider = dt.bits_of(e.dtype) > dt.bits_of(v.dtype)
                same = dt.bits_of(e.dtype) == dt.bits_of(v.dtype) and not dt.is_unsigned(v.dtype)
                return (wider or same) and self.nonnegative(v)
            case E.Select(true_value=t, false_value=f):
                return self.nonnegative(t) and self.nonnegative(f)
            case Ramp(base=base, stride=stride):
                return self.nonnegative(base) and self.nonnegative(stride)
            case Broadcast(value=v):
                return self.nonnegative(v)
        return False

    def _floor_op(self, is_div: bool, a: str, b: str, dtype: str) -> str:
        if dt.is_float(dtype):
            f = "floor" if dtype == "float64" else "floorf"
            half = HALF_TYPES.get(dt.element_of(dtype))
            if half:
                a, b = f"{half[0]}({a})", f"{half[0]}({b})"
            if is_div:
                out = f"{f}({a} / {b})"
            else:  # C's fmod moved to the divisor's sign, as torch's remainder (exact)
                self.helpers.add("floordiv")
                out = f"tf_float_floormod({a}, {b})"
            return f"{half[1]}({out})" if half else out
        if dt.is_unsigned(dtype) or dt.is_bool(dtype):
            return f"({a} {'/' if is_div else '%'} {b})"
        self.helpers.add("floordiv")
        return f"tf_floor{'div' if is_div else 'mod'}<{ctype(dtype)}>({a}, {b})"

    def _min_max(self, is_min: bool, a: str, b: str, dtype: str) -> str:
        """Float Min / Max propagate NaN, as the LLVM and C backends' do and torch's maximum,
        amax and clamp do (CUDA's fmaxf and __hmax return the other operand)."""
        base = dt.element_of(dtype)
        word = "min" if is_min else "max"
        if base in ("float32", "float64"):
            self.helpers.add("minmax_nan")
            return f"tf_{word}_nan({a}, {b})"
        if base in HALF_TYPES:
            return f"__h{word}_nan({a}, {b})"
        if base in ("int32", "int64", "uint32", "uint64"):
            return f"{word}({a}, {b})"
        return f"(({ctype(dtype)}){word}((int)({a}), (int)({b})))"

    def _gpu_call(self, name: str, args: list[str], dtype: str) -> str:
        """Thread indices and warp shuffles (ir/gpu_intrin.py); shuffles of types narrower than
        32 bits go through int."""
        if name == gpu_intrin.THREAD_INDEX:
            return f"((int)threadIdx.{'xyz'[int(args[0])]})"
        mask, value, lane, width = args
        fn = "__shfl_down_sync" if name == gpu_intrin.WARP_SHUFFLE_DOWN else "__shfl_sync"
        t = ctype(dtype)
        if t in _SMALL_INTS:
            return f"(({t}){fn}({mask}, (int)({value}), {lane}, {width}))"
        return f"{fn}({mask}, {value}, {lane}, {width})"

    def _call(self, name: str, args: list[str], dtype: str) -> str:
        base = dt.element_of(dtype)
        if name in BITWISE_OPERATORS:  # in the type's unsigned twin: C++ computes small ones in
            # int, and a left shift of a negative value was undefined before C++20
            t = ctype(dtype)
            u = f"unsigned {t}" if not t.startswith("unsigned") and " " not in t else t
            u = {"signed char": "unsigned char", "long long": "unsigned long long"}.get(t, u)
            if name == "shift_right" and not dt.is_unsigned(base):
                return f"(({t})({args[0]} >> {args[1]}))"  # arithmetic on signed types
            return f"(({t})(({u})({args[0]}) {BITWISE_OPERATORS[name]} ({u})({args[1]})))"
        if base in HALF_TYPES:  # compute in float32
            to_float, from_float = HALF_TYPES[base][:2]
            inner = self._call(name, [f"{to_float}({a})" for a in args], "float32")
            return f"{from_float}({inner})"
        if dt.is_float(base):
            if name == "sigmoid":
                if base == "float32":
                    return f"(1.f / (1.f + __expf(-({args[0]}))))"
                return f"(1.0 / (1.0 + exp(-({args[0]}))))"
            table = _FLOAT32_CALLS if base == "float32" else _FLOAT64_CALLS
            if name in table:
                return f"{table[name]}({', '.join(args)})"
        elif name == "abs":
            if dt.is_unsigned(base) or base == "bool":
                return args[0]
            return f"{'llabs' if base == 'int64' else 'abs'}({args[0]})"
        raise BuildError(f"CUDA codegen: no CUDA function for intrinsic {name}() on {dtype}")


def _wraps(e: E.Expr) -> bool:
    """Integer arithmetic of loaded values (tensor data, which wraps around), not of loop
    variables and sizes alone (index arithmetic, which never overflows). int8 / int16 (and
    unsigned) too: C++ computes them in int, so int16 x * 4 > x compared unwrapped values
    (the GPU fuzz sweep, seed 9053: 16 of 85 elements differed from eager)."""
    if dt.element_of(e.dtype) not in ("int8", "int16", "uint8", "uint16", "int32", "int64"):
        return False
    return any(isinstance(x, BufferLoad) for x in walk(e))


def _positive(e: E.Expr) -> bool:
    """A constant divisor above zero (a vector of one, broadcast, too)."""
    if isinstance(e, Broadcast):
        e = e.value
    return isinstance(e, E.Const) and e.value > 0
