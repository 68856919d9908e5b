"""Symbolic sizes: torch's SymInts (sympy expressions over s0, s1, ...) as te.var expressions.

A graph compiled with `dynamic=True` or `torch._dynamo.mark_dynamic` sees sizes such as `s0` or
`8*s0`. Each symbol becomes one `te.size_var` (a kernel scalar argument), so a new batch size runs
the same kernels; the runtime binds each symbol from the inputs of every call. A size_var keeps
the least value Dynamo's shape environment gives the symbol (2: sizes 0 and 1 are specialized,
and the guards send them to a compile of their own), so the analyzer can prove a row of `s1`
elements holds at least one vector step, or that `i // s1 < s0` for `i` under `s0*s1`.
"""

from __future__ import annotations

import sympy

from tensorforge import te


class Symbols:
    """The te.var of each sympy symbol, and how to evaluate size expressions at run time."""

    def __init__(self) -> None:
        self.vars: dict[sympy.Symbol, te.Var] = {}
        self.least: dict[sympy.Symbol, int] = {}  # a symbol's guarded lower bound
        self.examples: dict[sympy.Symbol, int] = {}  # its value in Dynamo's example inputs

    def size(self, value):
        """An int, or a te expression for a SymInt (or a sympy expression)."""
        if isinstance(value, int):
            return value
        expr = _sympy_of(value)
        if expr.is_Integer:
            return int(expr)
        self._note_ranges(value, expr)
        return self._to_te(expr)

    def _note_ranges(self, value, expr) -> None:
        """The lower bound the shape environment holds for each symbol of `expr`, where it has
        a finite one (a symbol without is a plain te.var: nothing is assumed of it), and the
        symbol's value in the example inputs (its hint)."""
        shape_env = getattr(getattr(value, "node", None), "shape_env", None)
        ranges = getattr(shape_env, "var_to_range", {})
        # (the older torch releases name the same map var_to_val)
        examples = getattr(shape_env, "backed_var_to_val", None)
        examples = examples if examples is not None else getattr(shape_env, "var_to_val", {})
        for symbol in expr.free_symbols:
            low = getattr(ranges.get(symbol), "lower", None)  # an Integer, or -int_oo
            if isinstance(low, (int, sympy.Integer)) and symbol not in self.vars:
                self.least.setdefault(symbol, int(low))
            example = examples.get(symbol)
            if isinstance(example, (int, sympy.Integer)):
                self.examples.setdefault(symbol, int(example))

    def size_hints(self) -> dict[te.Var, int]:
        """Each symbol's te.var and its value in the example inputs: what a schedule sized for
        typical calls (the first guess's vector widths) assumes, never what its code relies on."""
        return {v: self.examples[s] for s, v in self.vars.items() if s in self.examples}

    def shape(self, sizes) -> tuple:
        return tuple(self.size(s) for s in sizes)

    def var_names(self) -> list[str]:
        return sorted(v.name for v in self.vars.values())

    def _to_te(self, expr):
        if expr.is_Integer:
            return int(expr)
        if expr.is_Float or expr.is_Rational:  # (a SymFloat's constants: computed in float64)
            return te.const(float(expr), "float64")
        if expr.is_Symbol:
            if expr not in self.vars:
                least = self.least.get(expr)
                self.vars[expr] = (
                    te.var(str(expr)) if least is None else te.size_var(str(expr), min_value=least)
                )
            return self.vars[expr]
        name = type(expr).__name__
        if name in ("CeilToInt", "FloorToInt") and type(expr.args[0]).__name__ == "IntTrueDiv":
            # math.ceil(a / b) of sizes (a >= 0, b > 0): an integer division, no float
            a, b = (self._to_te(x) for x in expr.args[0].args)
            return (a + b - 1) // b if name == "CeilToInt" else a // b
        args = [self._to_te(a) for a in expr.args]
        if isinstance(expr, sympy.Add):
            return _fold(args, lambda a, b: a + b)
        if isinstance(expr, sympy.Mul):
            return _fold(args, lambda a, b: a * b)
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
            return _fold([args[0]] * int(expr.exp), lambda a, b: a * b)  # s0**2 (a square)
        if name in ("FloorDiv", "floor_div"):
            return args[0] // args[1]
        if name in ("Mod", "PythonMod"):
            return args[0] % args[1]
        if name in ("CeilDiv",):
            return (args[0] + args[1] - 1) // args[1]
        if name == "ToFloat":  # a SymFloat of a size (SDPA's scale, 1 / sqrt(E))
            return _as_float64(args[0])
        if name in ("FloatTrueDiv", "IntTrueDiv"):
            return _as_float64(args[0]) / _as_float64(args[1])
        if name == "FloatPow":
            return te.power(_as_float64(args[0]), _as_float64(args[1]))
        if name == "Max":
            return _fold(args, te.max)
        if name == "Min":
            return _fold(args, te.min)
        raise NotImplementedError(f"size expression {expr} ({name})")


def _as_float64(value):
    if isinstance(value, (int, float)):
        return te.const(float(value), "float64")
    return value if value.dtype == "float64" else value.astype("float64")


def _fold(args, combine):
    result = args[0]
    for a in args[1:]:
        result = combine(result, a)
    return result


def _sympy_of(value):
    node = getattr(value, "node", None)
    if node is not None and hasattr(node, "expr"):
        return sympy.sympify(node.expr)
    return sympy.sympify(value)


def is_symbolic(value) -> bool:
    """Is this a SymInt whose value is not a known constant?"""
    if isinstance(value, int):
        return False
    return hasattr(value, "node") and not _sympy_of(value).is_Integer


def evaluate(expr, bindings: dict[str, int]) -> int:
    """The value of a size (int, SymInt or te expression) once the symbols are bound."""
    if isinstance(expr, int):
        return expr
    if hasattr(expr, "node"):
        expr = _sympy_of(expr)
    if isinstance(expr, sympy.Basic):
        return int(expr.xreplace({s: bindings[str(s)] for s in expr.free_symbols}))
    return _eval_te(expr, bindings)


def _eval_te(e, bindings: dict[str, int]) -> int:
    from tensorforge.te import expr as x

    if isinstance(e, int):
        return e
    if isinstance(e, x.Const):
        return int(e.value)
    if isinstance(e, x.Var):
        return bindings[e.name]
    ops = {
        x.Add: lambda a, b: a + b,
        x.Sub: lambda a, b: a - b,
        x.Mul: lambda a, b: a * b,
        x.FloorDiv: lambda a, b: a // b,
        x.FloorMod: lambda a, b: a % b,
        x.Min: min,
        x.Max: max,
    }
    for cls, fn in ops.items():
        if type(e) is cls:
            return fn(_eval_te(e.a, bindings), _eval_te(e.b, bindings))
    raise NotImplementedError(f"cannot evaluate size {e}")


def is_size_expr(value) -> bool:
    """A size computed from symbols (a te expression), as opposed to a literal."""
    return isinstance(value, te.Expr)
