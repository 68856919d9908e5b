"""Print expressions and loop IR as readable, Python-like text."""

from __future__ import annotations

from tensorforge.ir.expr import Buffer
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    KernelLaunch,
    LetStmt,
    LoopKind,
    Prefetch,
    PrimFunc,
    Realize,
    Seq,
    Stmt,
    Sync,
    ThreadAllReduce,
)
from tensorforge.te import expr as E
from tensorforge.te.printer import expr_to_str


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
        case Prefetch(buffer=b, indices=idx, write=write):
            name = "prefetch_write" if write else "prefetch"
            return [f"{pad}{name}({b.name}[{', '.join(expr_to_str(i) for i in idx)}])"]
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
            where = "" if s.condition is None else f", where={expr_to_str(s.condition)}"
            return [
                f"{pad}{targets} = thread_allreduce_{c.name}({args}, over={tag}, threads={ext}{where})"
            ]
        case Attr(key=k, value=v, body=body):
            return [f"{pad}# attr {k} = {v}"] + _stmt_lines(body, indent)
        case KernelLaunch(name=name, body=body):
            return [f"{pad}kernel {name}:"] + _stmt_lines(body, indent + 1)
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
