"""The C backend's helper functions: floor division, NaN-propagating min/max, selects, math
calls and reductions, one `static inline` definition per operation and type.

A vector helper runs its scalar helper on lanes 0..N-1 only (the padding lanes of a C vector
stay 0), so an integer division never divides by a padding lane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorforge.codegen.c_expr import _LIBM, _SHORT, SCALAR, pow2
from tensorforge.te import dtype as dt

if TYPE_CHECKING:
    from tensorforge.codegen.c_expr import CExprPrinter

_BINARY = ("floordiv", "floormod", "min", "max", "pow")


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
    if op == "floordiv":
        if not signed:
            return f"{signature} {{ return ({t})(a / b); }}"
        return (
            f"{signature} {{\n  {t} q = ({t})(a / b), r = ({t})(a % b);\n"
            f"  return ({t})(q - ((r != 0) & ((r < 0) != (b < 0))));\n}}"
        )
    if op == "floormod":
        if not signed:
            return f"{signature} {{ return ({t})(a % b); }}"
        return (
            f"{signature} {{\n  {t} r = ({t})(a % b);\n"
            f"  return ({t})((r != 0 && ((r < 0) != (b < 0))) ? r + b : r);\n}}"
        )
    if op in ("min", "max"):
        cmp = "<" if op == "min" else ">"
        if element == "bool":
            return f"{signature} {{ return a {'&&' if op == 'min' else '||'} b; }}"
        nan = " || a != a" if is_float else ""  # a NaN operand gives NaN, as numpy does
        return f"{signature} {{ return (a {cmp} b{nan}) ? a : b; }}"
    if op == "pow":
        return f"{signature} {{ return {_float_fn(element, 'pow', 'a', 'b')}; }}"
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
    assert pow2(lanes) >= lanes
    return (
        f"static inline {t} NAME({vt} v) {{\n  {t} r = v[0];\n"
        f"  for (int l = 1; l < {lanes}; ++l) r = {step};\n  return r;\n}}"
    )
