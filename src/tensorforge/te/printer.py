"""Print expressions as readable, Python-like text (statements: ir/printer.py)."""

from __future__ import annotations

from typing import Any

from tensorforge.te import expr as E

_BINARY = {
    E.Add: ("+", 4),
    E.Sub: ("-", 4),
    E.Mul: ("*", 5),
    E.Div: ("/", 5),
    E.FloorDiv: ("//", 5),
    E.FloorMod: ("%", 5),
    E.LT: ("<", 3),
    E.LE: ("<=", 3),
    E.GT: (">", 3),
    E.GE: (">=", 3),
    E.EQ: ("==", 3),
    E.NE: ("!=", 3),
    E.And: ("and", 2),
    E.Or: ("or", 1),
}


def expr_to_str(e: Any, parent_prec: int = 0) -> str:
    text, prec = _expr(e)
    return f"({text})" if prec < parent_prec else text


def _expr(e: Any) -> tuple[str, int]:
    """(text, precedence) of an expression; atoms have precedence 10."""
    match e:
        case E.Var(name=name):
            return name, 10
        case E.Const(value=v, dtype=d):
            if d == "bool":
                return str(bool(v)), 10
            if d in ("int32",) or d == "float32" and isinstance(v, float):
                return (repr(v) if d == "float32" else str(v)), 10
            return f"{d}({v!r})", 10
        case E.Not(a=a):
            return f"not {expr_to_str(a, 6)}", 6
        case E.BinaryOp(a=a, b=b) if type(e) in _BINARY:
            op, prec = _BINARY[type(e)]
            right_prec = prec + 1  # left-associative: a - (b - c) keeps its parentheses
            return f"{expr_to_str(a, prec)} {op} {expr_to_str(b, right_prec)}", prec
        case E.Min(a=a, b=b):
            return f"min({expr_to_str(a)}, {expr_to_str(b)})", 10
        case E.Max(a=a, b=b):
            return f"max({expr_to_str(a)}, {expr_to_str(b)})", 10
        case E.Select(condition=c, true_value=t, false_value=f):
            return f"select({expr_to_str(c)}, {expr_to_str(t)}, {expr_to_str(f)})", 10
        case E.Cast(dtype=d, value=v):
            return f"{d}({expr_to_str(v)})", 10
        case E.Call(name=name, args=args):
            return f"{name}({', '.join(expr_to_str(a) for a in args)})", 10
        case E.Let(var=v, value=value, body=body):
            return f"(let {v.name} = {expr_to_str(value)} in {expr_to_str(body)})", 10
        case E.TensorRead(tensor=t, indices=idx):
            return f"{t.name}[{', '.join(expr_to_str(i) for i in idx)}]", 10
        case E.Reduce(combiner=c, source=src, axis=axis, condition=cond, value_index=vi):
            where = (
                "" if isinstance(cond, E.Const) and cond.value else f", where={expr_to_str(cond)}"
            )
            srcs = ", ".join(expr_to_str(s) for s in src)
            axes = ", ".join(a.name for a in axis)
            suffix = f"[{vi}]" if len(src) > 1 else ""
            return f"{c.name}({srcs}, axis=[{axes}]{where}){suffix}", 10
    if hasattr(e, "print_parts"):  # nodes of later layers (IR loads, vectors) print themselves
        return e.print_parts(), 10
    return repr(e), 10
