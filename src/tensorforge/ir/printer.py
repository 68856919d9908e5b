"""Print expressions and loop IR as readable, Python-like text."""

from __future__ import annotations

from typing import Any

from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp, VectorReduce
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    PrimFunc,
    Realize,
    Seq,
    Stmt,
    Sync,
    ThreadAllReduce,
)
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
            where = "" if isinstance(cond, E.Const) and cond.value else f", where={expr_to_str(cond)}"
            srcs = ", ".join(expr_to_str(s) for s in src)
            axes = ", ".join(a.name for a in axis)
            suffix = f"[{vi}]" if len(src) > 1 else ""
            return f"{c.name}({srcs}, axis=[{axes}]{where}){suffix}", 10
        case BufferLoad(buffer=b, indices=idx, predicate=p):
            mask = "" if p is None else f" if {expr_to_str(p)}"
            return f"{b.name}[{', '.join(expr_to_str(i) for i in idx)}{mask}]", 10
        case Ramp(base=base, stride=stride, lanes=lanes):
            return f"ramp({expr_to_str(base)}, {expr_to_str(stride)}, {lanes})", 10
        case Broadcast(value=v, lanes=lanes):
            return f"broadcast({expr_to_str(v)}, {lanes})", 10
        case VectorReduce(op=op, value=v):
            return f"reduce_{op}({expr_to_str(v)})", 10
    return repr(e), 10


def _shape(buffer: Buffer) -> str:
    return ", ".join(expr_to_str(s) for s in buffer.shape)


def stmt_to_str(s: Stmt, indent: int = 0) -> str:
    return "\n".join(_stmt_lines(s, indent))


def _loop_header(loop: For) -> str:
    lo, ext = loop.min, loop.extent
    if isinstance(lo, E.Const) and lo.value == 0:
        rng = f"range({expr_to_str(ext)})"
    else:
        rng = f"range({expr_to_str(lo)}, {expr_to_str(lo + ext)})"
    notes = []
    if loop.kind is LoopKind.THREAD_BINDING:
        notes.append(f"bind {loop.thread_tag}")
    elif loop.kind is not LoopKind.SERIAL:
        notes.append(loop.kind.value)
    notes += [f"pragma {k}" + ("" if v is None else f"={v}") for k, v in loop.pragmas]
    comment = f"  # {', '.join(notes)}" if notes else ""
    return f"for {loop.var.name} in {rng}:{comment}"


def _stmt_lines(s: Stmt, indent: int) -> list[str]:
    pad = "    " * indent
    match s:
        case For(body=body):
            return [pad + _loop_header(s)] + _stmt_lines(body, indent + 1)
        case BufferStore(buffer=b, indices=idx, value=v, predicate=p):
            mask = "" if p is None else f" if {expr_to_str(p)}"
            target = f"{b.name}[{', '.join(expr_to_str(i) for i in idx)}]"
            return [f"{pad}{target} = {expr_to_str(v)}{mask}"]
        case Realize(buffer=b, mins=mins, extents=exts, body=body):
            region = ", ".join(f"{expr_to_str(m)}:{expr_to_str(m + x)}" for m, x in zip(mins, exts))
            head = f"{pad}realize {b.name}[{region}]: {b.dtype} ({b.scope})"
            return [head] + _stmt_lines(body, indent)
        case Allocate(buffer=b, extent=ext, body=body):
            head = f"{pad}{b.name} = allocate({b.dtype}[{expr_to_str(ext)}], scope={b.scope!r})"
            return [head] + _stmt_lines(body, indent)
        case IfThenElse(condition=c, then_case=t, else_case=e):
            lines = [f"{pad}if {expr_to_str(c)}:"] + _stmt_lines(t, indent + 1)
            if e is not None:
                lines += [f"{pad}else:"] + _stmt_lines(e, indent + 1)
            return lines
        case Seq(stmts=stmts):
            if not stmts:
                return [f"{pad}pass"]
            return [line for st in stmts for line in _stmt_lines(st, indent)]
        case LetStmt(var=v, value=value, body=body):
            return [f"{pad}{v.name} = {expr_to_str(value)}"] + _stmt_lines(body, indent)
        case Evaluate(value=v):
            return [f"{pad}{expr_to_str(v)}"]
        case Sync(scope=scope):
            return [f"{pad}sync_threads()  # {scope}"]
        case ThreadAllReduce(combiner=c, values=vals, results=res, thread_tag=tag, extent=ext):
            targets = ", ".join(f"{b.name}[0]" for b in res)
            args = ", ".join(expr_to_str(v) for v in vals)
            return [f"{pad}{targets} = thread_allreduce_{c.name}({args}, over={tag}, threads={ext})"]
        case Attr(key=k, value=v, body=body):
            return [f"{pad}# attr {k} = {v}"] + _stmt_lines(body, indent)
    return [pad + repr(s)]


def func_to_str(func: PrimFunc) -> str:
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            params.append(f"{p.name}: {p.dtype}[{_shape(p)}]")
        else:
            params.append(f"{p.name}: {p.dtype}")
    head = f"def {func.name}({', '.join(params)}):"
    return "\n".join([head] + _stmt_lines(func.body, 1))
