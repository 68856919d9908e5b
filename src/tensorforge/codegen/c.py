"""The C backend: a lowered PrimFunc -> one C translation unit (GNU C11) for the system compiler.

The entry takes one argument per PrimFunc param, in order: buffers as `T* restrict`, scalars by
value; its symbol is the PrimFunc's name (an asm label, so any name works, `main` included).
Vectorized code uses GCC/Clang vector extensions (c_expr.py); a PARALLEL loop becomes an OpenMP
parallel region that splits the iterations into one contiguous share per thread, its team size
read from the global NUM_THREADS_SYMBOL (set by the runtime before each call). Constant-size
allocations up to 64 KiB live on the stack, others come from aligned_alloc. The helper functions
expressions call (floor division, NaN-propagating min/max, selects, math, reductions) are defined
at the end of this file, once per operation and type: a vector helper runs its scalar helper on
lanes 0..N-1 only (padding lanes stay 0), so an integer division never divides by a padding lane.
"""

from __future__ import annotations

import re

from tensorforge.codegen.base import (
    ALLOC_ERROR_SYMBOL,
    NUM_THREADS_SYMBOL,
    KernelSource,
    generate_checked,
    kernel_params,
)
from tensorforge.codegen.c_expr import _LIBM, _SHORT, SCALAR, CExprPrinter
from tensorforge.errors import BuildError
from tensorforge.ir.expr import Broadcast, Buffer, Ramp
from tensorforge.ir.passes.unroll_loops import partial_unroll
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Prefetch,
    PrimFunc,
    Seq,
    Stmt,
    Sync,
    While,
)
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Var

_STACK_LIMIT = 64 * 1024  # constant-size buffers up to this many bytes live on the stack
_HEADERS = ("stdbool.h", "stdint.h", "stdlib.h", "string.h", "math.h")
_ALLOC_ERROR_SLOT = (
    f"struct {{ const char *buffer; int64_t count; int64_t element_bytes; }} {ALLOC_ERROR_SYMBOL};"
)


def _c_string(text: str) -> str:
    """`text` as a C string literal: UTF-8, every byte but ASCII letters, digits and _ as an
    octal escape (three digits: the next character cannot extend it)."""
    safe = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
    return '"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in text.encode()) + '"'


class CCodegen:
    """Lowered PrimFunc -> KernelSource(target="c", text=C source)."""

    def generate(self, func: PrimFunc, target) -> KernelSource:
        if not re.fullmatch(r"[A-Za-z_][\w.$]*", func.name):
            raise BuildError(
                f"c codegen: the function name {func.name!r} cannot be a symbol; use letters, "
                f"digits and underscores"
            )
        return generate_checked("c", func, target, lambda: _FunctionWriter(func, target).source())


class _FunctionWriter(CExprPrinter):
    """Writes the statements of one PrimFunc as C lines."""

    def __init__(self, func: PrimFunc, target):
        super().__init__(func.name)
        self.func, self.target = func, target
        self.lines: list[str] = []
        self.depth = 1
        self.in_parallel = False
        self.parallel_loops = 0
        self.heap_allocations = 0

    def source(self) -> KernelSource:
        func = self.func
        params = []
        for p in func.params:
            name = self.names.fresh(p.name)
            if isinstance(p, Buffer):
                self.buffers[p] = name
                params.append(f"{self.memory_type(p.dtype)}* restrict {name}")
            else:
                self.vars[p] = name
                params.append(f"{self.ctype(p.dtype)} {name}")
        self.stmt(func.body)
        signature = f"void tf_entry({', '.join(params) or 'void'})"
        headers = [*_HEADERS, *(["omp.h"] if self.uses_openmp else [])]
        text = "\n".join(
            [
                f"// tensorforge: C kernel for PrimFunc '{func.name}' ({self.target})",
                *(f"#include <{h}>" for h in headers),
                "",
                *self.typedefs.values(),
                *([f"int32_t {NUM_THREADS_SYMBOL} = 0;"] if self.parallel_loops else []),
                *([_ALLOC_ERROR_SLOT] if self.heap_allocations else []),
                "",
                *(f"{helper}\n" for helper in self.helpers.values()),
                f'{signature} __asm__("{func.name}");',
                f"{signature} {{",
                *self.lines,
                "}",
                "",
            ]
        )
        return KernelSource(
            target="c",
            entry=func.name,
            text=text,
            params=kernel_params(func),
            target_string=str(self.target),
            num_threads_symbol=NUM_THREADS_SYMBOL if self.parallel_loops else None,
        )

    def define_helper(self, op: str, dtype: str) -> str:
        return define_helper(self, op, dtype)

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def block(self, head: str, body: Stmt) -> None:
        """`head {` body `}`."""
        self.emit(f"{head} {{")
        self.depth += 1
        self.stmt(body)
        self.depth -= 1
        self.emit("}")

    def bind(self, var: Var) -> tuple[str, str | None]:
        """A fresh C name for `var` from here on; (name, the name it had) to restore."""
        name = self.names.fresh(var.name)
        old = self.vars.get(var)
        self.vars[var] = name
        return name, old

    def unbind(self, var: Var, old: str | None) -> None:
        if old is None:
            del self.vars[var]
        else:
            self.vars[var] = old

    # -- statements ---------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        match s:
            case Seq(stmts=stmts):
                for child in stmts:
                    self.stmt(child)
            case BufferStore():
                self.store(s)
            case For():
                self.loop(s)
            case While(condition=cond, body=body):
                if dt.lanes_of(cond.dtype) != 1:
                    raise self.fail(f"while condition {cond} is a vector")
                self.block(f"while ({self.expr(cond)})", body)
            case IfThenElse(condition=cond, then_case=then, else_case=other):
                if dt.lanes_of(cond.dtype) != 1:
                    raise self.fail(f"IfThenElse condition {cond} is a vector")
                self.block(f"if ({self.expr(cond)})", then)
                if other is not None:
                    self.block("else", other)
            case LetStmt(var=var, value=value, body=body):
                value_text = self.expr(value)
                self.emit("{")
                self.depth += 1
                name, old = self.bind(var)
                self.emit(f"const {self.ctype(var.dtype)} {name} = {value_text};")
                self.stmt(body)
                self.unbind(var, old)
                self.depth -= 1
                self.emit("}")
            case Allocate():
                self.allocate(s)
            case Attr(body=body):  # annotations carry nothing the CPU code needs
                self.stmt(body)
            case Evaluate(value=value):
                if not isinstance(value, Const):
                    self.emit(f"(void){self.expr(value)};")
            case Sync():
                raise self.fail("Sync (a GPU barrier) is not valid on a CPU target")
            case Prefetch(buffer=buffer, indices=(index,), write=write):
                # reads into L2, writes into L1 (as the llvm backend; see its _prefetch)
                rw, locality = (1, 3) if write else (0, 2)
                at = f"&{self.buffer(buffer)}[{self.expr(index)}]"
                self.emit(f"__builtin_prefetch({at}, {rw}, {locality});")
            case _:
                raise self.fail(f"cannot generate code for {type(s).__name__}; is the IR lowered?")

    def store(self, s: BufferStore) -> None:
        if len(s.indices) != 1:
            raise self.fail(
                f"store to '{s.buffer.name}' has {len(s.indices)} indices, expected one flat index"
            )
        buf, index, dtype = self.buffer(s.buffer), s.indices[0], s.buffer.dtype
        lanes = dt.lanes_of(index.dtype)
        value = self.expr(s.value)
        if lanes == 1:
            if dt.is_bool(dtype):
                value = f"(uint8_t)({value})"
            store = f"{buf}[{self.expr(index)}] = {value};"
            if s.predicate is not None:
                store = f"if ({self.expr(s.predicate)}) {store}"
            self.emit(store)
            return
        if dt.lanes_of(s.value.dtype) == 1:
            value = self.broadcast(value, s.value.dtype, lanes)
        vtype, ctype = self.ctype(dt.with_lanes(dtype, lanes)), self.memory_type(dtype)
        v, m, b = self.temp("v"), self.temp("m"), self.temp("i")
        decls = [f"{vtype} {v} = {value};"]
        if s.predicate is not None:
            decls.append(f"{self.ctype(s.predicate.dtype)} {m} = {self.expr(s.predicate)};")
            on = f"{m}[tf_l]" if dt.lanes_of(s.predicate.dtype) > 1 else m
        else:
            on = None
        lane = f"({v}[tf_l] != 0)" if dt.is_bool(dtype) else f"{v}[tf_l]"
        if isinstance(index, Ramp) and isinstance(index.stride, Const) and index.stride.value == 1:
            decls.append(f"const int64_t {b} = {self.expr(index.base)};")
            if on is None and not dt.is_bool(dtype):
                action = f"memcpy(&{buf}[{b}], &{v}, {lanes} * sizeof({ctype}));"
            else:
                guard = f"if ({on}) " if on else ""
                action = (
                    f"for (int tf_l = 0; tf_l < {lanes}; ++tf_l) {guard}{buf}[{b} + tf_l] = {lane};"
                )
        else:  # a scatter (a broadcast index: every lane to one address, the last one wins)
            if isinstance(index, Broadcast):
                decls.append(f"const int64_t {b} = {self.expr(index.value)};")
                at = b
            else:
                decl, at = self.lane_address(index)
                decls.append(decl.strip())
            guard = f"if ({on}) " if on else ""
            action = f"for (int tf_l = 0; tf_l < {lanes}; ++tf_l) {guard}{buf}[{at}] = {lane};"
        self.emit("{ " + " ".join([*decls, action]) + " }")

    def allocate(self, s: Allocate) -> None:
        buffer = s.buffer
        ctype = self.memory_type(buffer.dtype)
        nbytes = max(1, dt.bits_of(buffer.dtype) // 8)
        name = self.names.fresh(buffer.name)
        self.emit("{")
        self.depth += 1
        # NOTE: on the CPU every scope is plain memory; small constant-size buffers go on the
        # stack, where the compiler can keep them in registers; large or symbolic ones on the heap
        if isinstance(s.extent, Const) and int(s.extent.value) * nbytes <= _STACK_LIMIT:
            count = max(1, int(s.extent.value))
            self.emit(f"{ctype} {name}[{count}] __attribute__((aligned(64)));")
            heap = False
        else:
            # NOTE: a count past what int64 bytes hold asks for SIZE_MAX (the allocator fails)
            # instead of wrapping to a few bytes; a NULL skips the body and records the failure
            # in ALLOC_ERROR_SYMBOL for the runtime to raise (codegen/base.py)
            self.emit(f"const int64_t {name}_count = {self.expr(s.extent)};")
            limit = (2**63 - 128) // nbytes
            self.emit(
                f"const size_t {name}_bytes = {name}_count > {limit}LL ? SIZE_MAX : "
                f"{name}_count * {nbytes} < 64 ? 64 : ((size_t){name}_count * {nbytes} + 63) "
                f"& ~(size_t)63;"
            )
            self.emit(f"{ctype}* restrict {name} = ({ctype}*)aligned_alloc(64, {name}_bytes);")
            self.emit(f"if (__builtin_expect({name} == NULL, 0)) {{")
            slot = ALLOC_ERROR_SYMBOL
            self.emit(
                f"  {slot}.buffer = {_c_string(buffer.name)}; {slot}.count = {name}_count; "
                f"{slot}.element_bytes = {nbytes};"
            )
            self.emit("} else {")
            self.depth += 1
            self.heap_allocations += 1
            heap = True
        self.buffers[buffer] = name
        self.stmt(s.body)
        del self.buffers[buffer]
        if heap:
            self.emit(f"free({name});")
            self.depth -= 1
            self.emit("}")
        self.depth -= 1
        self.emit("}")

    # -- loops ----------------------------------------------------------------------------------
    def loop(self, loop: For) -> None:
        if loop.kind == LoopKind.THREAD_BINDING:
            raise self.fail(
                f"loop '{loop.var.name}' is bound to {loop.thread_tag or 'a GPU thread'}, "
                f"which a CPU target cannot run"
            )
        ctype = self.ctype(loop.var.dtype)
        begin, extent = self.expr(loop.min), self.expr(loop.extent)
        if loop.kind == LoopKind.PARALLEL and not self.in_parallel:  # nested parallel: serial
            self.parallel_loop(loop, ctype, begin, extent)
            return
        constant = isinstance(loop.min, Const) and isinstance(loop.extent, Const)
        if constant:  # for (i = 0; i < 37; ++i)
            lo = str(int(loop.min.value))
            hi = str(int(loop.min.value) + int(loop.extent.value))
        else:  # bounds evaluated once, before the loop
            lo, hi = self.temp("lo"), self.temp("hi")
            self.emit("{")
            self.depth += 1
            self.emit(
                f"const {ctype} {lo} = ({ctype})({begin}), {hi} = ({ctype})({lo} + {extent});"
            )
        count = partial_unroll(loop) if loop.kind == LoopKind.UNROLLED else 1
        if count > 1:  # an `unroll` loop unroll_loops left alone: a bounded count
            self.emit(f"#pragma GCC unroll {count}")
        name, old = self.bind(loop.var)
        self.block(f"for ({ctype} {name} = {lo}; {name} < {hi}; ++{name})", loop.body)
        self.unbind(loop.var, old)
        if not constant:
            self.depth -= 1
            self.emit("}")

    def parallel_loop(self, loop: For, ctype: str, begin: str, extent: str) -> None:
        """An OpenMP region: thread t of T runs [begin + t*n/T, begin + (t+1)*n/T)."""
        self.uses_openmp = True
        self.parallel_loops += 1
        lo, n, t, count = self.temp("lo"), self.temp("n"), self.temp("t"), self.temp("nt")
        self.emit("{")
        self.depth += 1
        self.emit(f"const {ctype} {lo} = ({ctype})({begin});")
        self.emit(f"const int64_t {n} = (int64_t)({extent});")
        self.emit(
            f"const int {count} = {NUM_THREADS_SYMBOL} > 0 ? {NUM_THREADS_SYMBOL} : "
            f"omp_get_max_threads();"
        )
        self.emit(f"#pragma omp parallel num_threads({count})")
        self.emit("{")
        self.depth += 1
        self.emit(f"const int64_t {t} = omp_get_thread_num(), {t}_all = omp_get_num_threads();")
        self.emit(
            f"const {ctype} {t}_lo = ({ctype})({lo} + {t} * {n} / {t}_all), "
            f"{t}_hi = ({ctype})({lo} + ({t} + 1) * {n} / {t}_all);"
        )
        self.in_parallel = True
        name, old = self.bind(loop.var)
        self.block(f"for ({ctype} {name} = {t}_lo; {name} < {t}_hi; ++{name})", loop.body)
        self.unbind(loop.var, old)
        self.in_parallel = False
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")


# -- helper functions ------------------------------------------------------------------------
_BINARY = (
    "floordiv",
    "floormod",
    "min",
    "max",
    "pow",
    "atan2",
    "hypot",
    "fmod",
    "copysign",
    "nextafter",
)


def define_helper(printer: CExprPrinter, op: str, dtype: str) -> str:
    """The name of helper `op` for values of `dtype`, defined in `printer.helpers` if new."""
    element, lanes = dt.element_of(dtype), dt.lanes_of(dtype)
    name = f"tf_{op}_{_SHORT[element]}" + (f"x{lanes}" if lanes > 1 else "")
    if name in printer.helpers:
        return name
    if op.startswith("reduce_"):
        body = _reduce(printer, op.removeprefix("reduce_"), element, lanes)
    elif lanes == 1:
        body = _scalar(printer, op, element)
    else:
        body = _vector(printer, op, element, lanes)
    printer.helpers[name] = body.replace("NAME", name)
    return name


def _float_fn(element: str, name: str, *args: str) -> str:
    """libm's `name` on float args of `element` (float16 through float32)."""
    single, double = _LIBM[name]
    if element == "float64":
        return f"{double}({', '.join(args)})"
    if element == "float16":
        return f"(_Float16){single}({', '.join(f'(float){a}' for a in args)})"
    return f"{single}({', '.join(args)})"


def _scalar(printer: CExprPrinter, op: str, element: str) -> str:
    t = SCALAR[element]
    if op == "bf16_to_f32":  # bfloat16 is the high half of a float32
        return (
            "static inline float NAME(uint16_t x) {\n  uint32_t b = (uint32_t)x << 16;\n"
            "  float f;\n  memcpy(&f, &b, 4);\n  return f;\n}"
        )
    if op == "f32_to_bf16":  # rounded to nearest even; a NaN stays a (quiet) NaN
        return (
            "static inline uint16_t NAME(float x) {\n  uint32_t b;\n  memcpy(&b, &x, 4);\n"
            "  return x != x ? (uint16_t)0x7FC0 : (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);\n}"
        )
    signature = f"static inline {t} NAME({t} a, {t} b)" if op in _BINARY else None
    unary = f"static inline {t} NAME({t} x)"
    is_float, signed = dt.is_float(element), element.startswith("int")
    if op in ("floordiv", "floormod") and is_float:
        if op == "floordiv":
            return f"{signature} {{ return ({t}){_float_fn(element, 'floor', '(a / b)')}; }}"
        fmod = "fmod" if element == "float64" else "fmodf"
        wide = "double" if element == "float64" else "float"
        return (
            f"{signature} {{\n  {wide} r = {fmod}(({wide})a, ({wide})b);\n"
            f"  return ({t})((r != 0 && ((r < 0) != (b < 0))) ? r + b : r);\n}}"
        )
    # an integer divisor of 0 divides by 1: the lanes a guarded vector tail leaves inactive
    # hold 0 (masked loads) and reach these per lane, where a division by 0 raises SIGFPE;
    # so does the minimum divided by -1 (it overflows), which wraps in torch: INT_MIN // -1 is
    # INT_MIN (0 - a in unsigned arithmetic), INT_MIN % -1 is 0
    nonzero = "  if (b == 0) b = 1;\n"
    if op == "floordiv":
        if not signed:
            return f"{signature} {{\n{nonzero}  return ({t})(a / b);\n}}"
        return (
            f"{signature} {{\n{nonzero}  if (b == -1) return ({t})(0 - (uint64_t)a);\n"
            f"  {t} q = ({t})(a / b), r = ({t})(a % b);\n"
            f"  return ({t})(q - ((r != 0) & ((r < 0) != (b < 0))));\n}}"
        )
    if op == "floormod":
        if not signed:
            return f"{signature} {{\n{nonzero}  return ({t})(a % b);\n}}"
        return (
            f"{signature} {{\n{nonzero}  if (b == -1) return 0;\n  {t} r = ({t})(a % b);\n"
            f"  return ({t})((r != 0 && ((r < 0) != (b < 0))) ? r + b : r);\n}}"
        )
    if op in ("min", "max"):
        cmp = "<" if op == "min" else ">"
        if element == "bool":
            return f"{signature} {{ return a {'&&' if op == 'min' else '||'} b; }}"
        nan = " || a != a" if is_float else ""  # a NaN operand gives NaN, as numpy does
        return f"{signature} {{ return (a {cmp} b{nan}) ? a : b; }}"
    if op in ("pow", "atan2", "hypot", "fmod", "copysign", "nextafter"):
        return f"{signature} {{ return {_float_fn(element, op, 'a', 'b')}; }}"
    if op == "abs":
        if is_float:
            fabs = "fabs" if element == "float64" else "fabsf"
            return f"{unary} {{ return ({t}){fabs}(x); }}"
        if not signed:
            return f"{unary} {{ return x; }}"
        unsigned = "uint32_t" if dt.bits_of(element) <= 32 else "uint64_t"
        return f"{unary} {{ return x < 0 ? ({t})(0u - ({unsigned})x) : x; }}"
    if op == "rsqrt":
        return f"{unary} {{ return ({t})(1 / {_float_fn(element, 'sqrt', 'x')}); }}"
    if op == "sigmoid":  # exp of -|x| only: never overflows
        wide = "double" if element == "float64" else "float"
        exp, fabs = ("exp", "fabs") if element == "float64" else ("expf", "fabsf")
        return (
            f"{unary} {{\n  {wide} e = {exp}(-{fabs}(({wide})x)), r = 1 / (1 + e);\n"
            f"  return ({t})(x < 0 ? e * r : r);\n}}"
        )
    if op in _LIBM:
        return f"{unary} {{ return ({t}){_float_fn(element, op, 'x')}; }}"
    raise printer.fail(f"no C helper for {op} of {element}")


def _vector(printer: CExprPrinter, op: str, element: str, lanes: int) -> str:
    vt = printer.ctype(dt.with_lanes(element, lanes))
    if op in ("bf16_to_f32", "f32_to_bf16"):  # as the scalar helpers, lane by lane in vectors
        bf, u32 = printer.vector_type("bfloat16", lanes), printer.vector_type("uint32", lanes)
        f32 = printer.vector_type("float32", lanes)
        if op == "bf16_to_f32":
            return (
                f"static inline {f32} NAME({bf} x) {{\n"
                f"  return ({f32})(__builtin_convertvector(x, {u32}) << 16);\n}}"
            )
        nan = printer.mask_type(32, lanes)
        return (
            f"static inline {bf} NAME({f32} x) {{\n  {u32} b = ({u32})x;\n"
            f"  {u32} r = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;\n"
            f"  {u32} nan = ({u32})({nan})(x != x);\n"
            f"  return __builtin_convertvector((r & ~nan) | (nan & 0x7FC0u), {bf});\n}}"
        )
    if op == "select":
        bits = 8 if element == "bool" else dt.bits_of(element)
        iw = printer.mask_type(bits, lanes)
        mask_type = printer.mask_type(8, lanes)
        wide = "m" if bits == 8 else f"__builtin_convertvector(m, {iw})"
        return (
            f"static inline {vt} NAME({mask_type} m, {vt} a, {vt} b) {{\n"
            f"  {iw} w = {wide};\n  return ({vt})((({iw})a & w) | (({iw})b & ~w));\n}}"
        )
    if op in ("min", "max") and (element == "bool" or not dt.is_float(element)):
        if element == "bool":  # masks: min is and, max is or
            return f"static inline {vt} NAME({vt} a, {vt} b) {{ return a {'&' if op == 'min' else '|'} b; }}"
        iw = printer.mask_type(dt.bits_of(element), lanes)
        cmp = "<" if op == "min" else ">"
        return (
            f"static inline {vt} NAME({vt} a, {vt} b) {{\n  {iw} w = ({iw})(a {cmp} b);\n"
            f"  return ({vt})((({iw})a & w) | (({iw})b & ~w));\n}}"
        )
    if op in ("min", "max"):  # floats: the larger, or a NaN operand
        iw = printer.mask_type(dt.bits_of(element), lanes)
        cmp = "<" if op == "min" else ">"
        return (
            f"static inline {vt} NAME({vt} a, {vt} b) {{\n"
            f"  {iw} w = ({iw})((a {cmp} b) | (a != a));\n"
            f"  return ({vt})((({iw})a & w) | (({iw})b & ~w));\n}}"
        )
    scalar = define_helper(printer, op, element)
    if op in _BINARY:
        return (
            f"static inline {vt} NAME({vt} a, {vt} b) {{\n  {vt} r = {{}};\n"
            f"  for (int l = 0; l < {lanes}; ++l) r[l] = {scalar}(a[l], b[l]);\n  return r;\n}}"
        )
    return (
        f"static inline {vt} NAME({vt} x) {{\n  {vt} r = {{}};\n"
        f"  for (int l = 0; l < {lanes}; ++l) r[l] = {scalar}(x[l]);\n  return r;\n}}"
    )


def _reduce(printer: CExprPrinter, op: str, element: str, lanes: int) -> str:
    vt = printer.ctype(dt.with_lanes(element, lanes))
    t = SCALAR[element]
    if op not in ("add", "max", "min"):
        raise printer.fail(f"VectorReduce op {op!r} is not one of add, max, min")
    if element == "bool":  # over a mask: add is parity, max any, min all
        bit = {"add": "^", "max": "|", "min": "&"}[op]
        return (
            f"static inline bool NAME({vt} v) {{\n  int8_t r = v[0];\n"
            f"  for (int l = 1; l < {lanes}; ++l) r = r {bit} v[l];\n  return r != 0;\n}}"
        )
    step = (
        printer.arith("+", element, "r", "v[l]")
        if op == "add"
        else f"{define_helper(printer, op, element)}(r, v[l])"
    )
    return (
        f"static inline {t} NAME({vt} v) {{\n  {t} r = v[0];\n"
        f"  for (int l = 1; l < {lanes}; ++l) r = {step};\n  return r;\n}}"
    )
