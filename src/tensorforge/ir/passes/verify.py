"""Check the loop IR's invariants before it reaches a backend (docs/lowered-ir.md).

`verify(stmt)` (the last pass of the pipeline) and `verify_func(func, after=pass_name)` (which
also knows the parameters, and can run after every pass in debug mode) raise LoweringError,
naming the pass that produced the IR, when:

- a node a backend cannot handle survives lowering (TensorRead, Reduce, Realize, an access with
  several indices) -- only checked on the final IR (`final=True`);
- a variable is used outside the loop / let that defines it, or is not defined at all (with
  `params`, every free variable must be a parameter or a size in a parameter's shape; without,
  a variable that nothing in the IR binds is taken to be a parameter); likewise a buffer
  accessed outside its allocation;
- the lanes of a vector expression do not match (both operands of a binary node, a store's
  value / predicate and its index, a select's branches); integer operands of a binary node, or
  a loop's variable, min and extent, are of two types (int32 beside int64: every backend would
  have to guess which one the operation means);
- a load or store is provably out of its buffer: the flat index of an allocation against its
  extent, of a parameter against its size; n-d accesses (before flattening) per dimension
  against the shape or the realized region.

Bounds are proven with `ir.arith` from the enclosing loops' ranges (`for v in range(m, m + n)`
gives v in [m, m + n - 1]), let values, the lane of a vector index, and guards: the condition of
an enclosing `if`, a store or load predicate, the condition of a `select` around a load. An
access that cannot be proven in bounds is an error only when it is certainly out of bounds:
unguarded, its index affine in loops of constant range, the buffer of constant size, and the
index's exact range sticking out. Symbolic sizes that defeat the prover never raise.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tensorforge.errors import LoweringError
from tensorforge.ir.arith import Analyzer, Interval, simplify_expr
from tensorforge.ir.arith.linear import LinearForm, is_index_dtype
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp, VectorReduce
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    For,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Realize,
    Seq,
    Stmt,
    ThreadAllReduce,
)
from tensorforge.ir.visit import children, walk
from tensorforge.te import dtype as dt
from tensorforge.te.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    And,
    BinaryOp,
    Cast,
    CompareOp,
    Const,
    Expr,
    Let,
    Not,
    Reduce,
    Select,
    TensorRead,
    Var,
)
from tensorforge.te.visit import map_children

_NEGATED = {LT: GE, LE: GT, GT: LE, GE: LT, EQ: NE, NE: EQ}
_MAX_FACT_STEPS = 6  # guards subtracted, at most, to prove one bound


def verify(
    stmt: Stmt,
    params: Sequence[Buffer | Var] | None = None,
    after: str = "lowering",
    final: bool = True,
) -> Stmt:
    """`stmt` unchanged, or LoweringError naming `after` (the pass that produced it)."""
    _Verifier(stmt, params, after, final).stmt(stmt)
    return stmt


def verify_func(func: PrimFunc, after: str = "lowering", final: bool = True) -> PrimFunc:
    """Verify `func.body` knowing its parameters (pass `final=False` between passes)."""
    verify(func.body, func.params, after, final)
    return func


class _Verifier:
    def __init__(self, root: Stmt, params: Sequence[Buffer | Var] | None, after: str, final: bool):
        self.after, self.final = after, final
        self.strict = params is not None
        self.defined: dict[int, int] = {}  # id(var) -> how many enclosing scopes define it
        self.regions: dict[int, list[tuple[Expr, Expr]] | None] = {}  # id(buffer) -> in scope
        self.param_buffers: set[int] = set()
        self.ranges: dict[Var, Interval] = {}
        self.facts: list[Expr] = []  # each `f <= 0` holds here
        self.guards = 0  # enclosing conditions (usable as facts or not)
        self.dead = 0  # inside a loop that never runs
        self._analyzer: Analyzer | None = None
        if self.strict:
            for p in params:
                if isinstance(p, Var):
                    self.defined[id(p)] = 1
                else:
                    self.param_buffers.add(id(p))
                    for e in (*p.shape, *(p.strides or ())):
                        for n in walk(e):
                            if isinstance(n, Var):
                                self.defined[id(n)] = 1
            self.bound_somewhere: set[int] = set()
            self.allocated_somewhere: set[int] = set()
        else:
            self.bound_somewhere = {
                id(n.var) for n in walk(root) if isinstance(n, (For, LetStmt, Let))
            }
            self.allocated_somewhere = {
                id(n.buffer) for n in walk(root) if isinstance(n, (Allocate, Realize))
            }

    # -- errors ---------------------------------------------------------------------------------
    def fail(self, what: str) -> LoweringError:
        return LoweringError(f"verify (IR produced by {self.after}): {what}")

    # -- scopes -----------------------------------------------------------------------------------
    @contextmanager
    def define(self, var: Var, interval: Interval | None) -> Iterator[None]:
        """`var` is defined inside, ranging over `interval` (None: unknown)."""
        self.defined[id(var)] = self.defined.get(id(var), 0) + 1
        saved = self.ranges.pop(var, _MISSING)
        if interval is not None:
            self.ranges[var] = interval
        self._analyzer = None
        try:
            yield
        finally:
            self.defined[id(var)] -= 1
            self.ranges.pop(var, None)
            if saved is not _MISSING:
                self.ranges[var] = saved
            self._analyzer = None

    @contextmanager
    def with_facts(self, facts: list[Expr]) -> Iterator[None]:
        """Inside a condition: `facts` (each `f <= 0`) hold, and the code counts as guarded."""
        start = len(self.facts)
        self.facts.extend(facts)
        self.guards += 1
        try:
            yield
        finally:
            del self.facts[start:]
            self.guards -= 1

    def analyzer(self) -> Analyzer:
        if self._analyzer is None:
            self._analyzer = Analyzer(self.ranges)
        return self._analyzer

    # -- statements -------------------------------------------------------------------------------
    def stmt(self, s: Any) -> None:
        match s:
            case For(var=var, min=lo, extent=extent, body=body):
                self.expr(lo)
                self.expr(extent)
                if _ints_of_two_widths(var.dtype, lo.dtype) or _ints_of_two_widths(
                    var.dtype, extent.dtype
                ):
                    raise self.fail(
                        f"loop '{var.name}' ({var.dtype}) has min {lo} ({lo.dtype}) and extent "
                        f"{extent} ({extent.dtype}): not of its type"
                    )
                empty = isinstance(extent, Const) and extent.value <= 0
                interval = (
                    Interval.from_range(lo, extent)
                    if is_index_dtype(var.dtype) and not empty
                    else None
                )
                self.dead += empty
                with self.define(var, interval):
                    self.stmt(body)
                self.dead -= empty
            case LetStmt(var=var, value=value, body=body):
                self.expr(value)
                interval = Interval.point(value) if is_index_dtype(value.dtype) else None
                with self.define(var, interval):
                    self.stmt(body)
            case IfThenElse(condition=cond, then_case=then, else_case=other):
                self.expr(cond)
                with self.with_facts(_facts(cond)):
                    self.stmt(then)
                if other is not None:
                    with self.with_facts(_facts(_negate(cond))):
                        self.stmt(other)
            case Seq(stmts=stmts):
                for x in stmts:
                    self.stmt(x)
            case Allocate(buffer=buf, extent=extent, body=body):
                # NOTE: only `extent` sizes the storage; the buffer's shape is bookkeeping that
                # passes may leave stale (a peeled tail substituted away a loop var it mentions)
                self.expr(extent)
                self.scoped_buffer(buf, [(Const(0, extent.dtype), extent)], body)
            case Realize(buffer=buf, mins=mins, extents=extents, body=body):
                if self.final:
                    raise self.fail(
                        f"a Realize of '{buf.name}' survived lowering (flatten_storage turns it into an Allocate)"
                    )
                for e in (*mins, *extents):
                    self.expr(e)
                self.scoped_buffer(buf, list(zip(mins, extents)), body)
            case BufferStore(buffer=buf, indices=indices, value=value, predicate=pred):
                for e in (*indices, value, *([pred] if pred is not None else [])):
                    self.expr(e)
                lanes = _index_lanes(indices)
                if dt.lanes_of(value.dtype) != lanes:
                    raise self.fail(
                        f"store to '{buf.name}' writes a {value.dtype} value at a {lanes}-lane index"
                    )
                self.access("store to", buf, indices, pred)
            case ThreadAllReduce(values=values, results=results, condition=condition):
                for v in (*values, *([condition] if condition is not None else [])):
                    self.expr(v)
                for buf in results:
                    self.buffer_in_scope(buf)
            case Attr(value=value, body=body):
                if isinstance(value, Expr):
                    self.expr(value)
                self.stmt(body)
            case _:
                for child in children(s):
                    (self.stmt if isinstance(child, Stmt) else self.expr)(child)

    def scoped_buffer(self, buf: Buffer, region: list[tuple[Expr, Expr]], body: Stmt) -> None:
        saved = self.regions.get(id(buf), _MISSING)
        self.regions[id(buf)] = region
        try:
            self.stmt(body)
        finally:
            if saved is _MISSING:
                del self.regions[id(buf)]
            else:
                self.regions[id(buf)] = saved

    # -- expressions ------------------------------------------------------------------------------
    def expr(self, e: Any) -> None:
        match e:
            case Var():
                self.use(e)
            case Const():
                return
            case BufferLoad(buffer=buf, indices=indices, predicate=pred):
                for x in (*indices, *([pred] if pred is not None else [])):
                    self.expr(x)
                self.access("load from", buf, indices, pred)
            case Select(condition=cond, true_value=a, false_value=b):
                self.expr(cond)
                lanes = {dt.lanes_of(a.dtype), dt.lanes_of(b.dtype)}
                if len(lanes) > 1 or dt.lanes_of(cond.dtype) not in (1, *lanes):
                    raise self.fail(f"select with lanes {cond.dtype} ? {a.dtype} : {b.dtype}: {e}")
                # NOTE: the condition guards the loads of each arm, as te.if_then_else promises
                # (TVM's padding idiom); guard_select_loads turns it into their predicates.
                with self.with_facts(_facts(cond)):
                    self.expr(a)
                with self.with_facts(_facts(_negate(cond))):
                    self.expr(b)
            case Let(var=var, value=value, body=body):
                self.expr(value)
                interval = Interval.point(value) if is_index_dtype(value.dtype) else None
                with self.define(var, interval):
                    self.expr(body)
            case BinaryOp(a=a, b=b):
                if dt.lanes_of(a.dtype) != dt.lanes_of(b.dtype):
                    raise self.fail(
                        f"operands of {type(e).__name__} have {a.dtype} and {b.dtype} lanes: {e}"
                    )
                if _ints_of_two_widths(a.dtype, b.dtype):
                    raise self.fail(
                        f"operands of {type(e).__name__} are {a.dtype} and {b.dtype}: {e}"
                    )
                self.expr(a)
                self.expr(b)
            case Ramp(base=base, stride=stride, lanes=lanes):
                if dt.lanes_of(base.dtype) != 1 or dt.lanes_of(stride.dtype) != 1 or lanes < 1:
                    raise self.fail(f"ramp needs a scalar base and stride and lanes >= 1: {e}")
                self.expr(base)
                self.expr(stride)
            case Broadcast(value=value, lanes=lanes):
                if dt.lanes_of(value.dtype) != 1 or lanes < 1:
                    raise self.fail(f"broadcast of a vector (or of {lanes} lanes): {e}")
                self.expr(value)
            case VectorReduce(op=op, value=value):
                if op not in ("add", "max", "min"):
                    raise self.fail(f"vector reduce with unknown op {op!r}")
                self.expr(value)
            case TensorRead() | Reduce():
                raise self.fail(f"a {type(e).__name__} survived lowering: {e}")
            case _:
                for child in children(e):
                    self.expr(child)

    def use(self, var: Var) -> None:
        if self.defined.get(id(var)):
            return
        if self.strict:
            raise self.fail(
                f"variable '{var.name}' is used but is neither a parameter nor defined by an enclosing loop or let"
            )
        if id(var) in self.bound_somewhere:
            raise self.fail(
                f"variable '{var.name}' is used outside the loop or let that defines it"
            )

    def buffer_in_scope(self, buf: Buffer) -> None:
        if id(buf) in self.regions or id(buf) in self.param_buffers:
            return
        if self.strict or id(buf) in self.allocated_somewhere:
            raise self.fail(
                f"buffer '{buf.name}' is accessed but is neither a parameter nor allocated around the access"
            )

    # -- bounds -----------------------------------------------------------------------------------
    def access(self, what: str, buf: Buffer, indices: tuple[Expr, ...], pred: Expr | None) -> None:
        self.buffer_in_scope(buf)
        lanes = _index_lanes(indices)
        if pred is not None and dt.lanes_of(pred.dtype) != lanes:
            raise self.fail(
                f"{what} '{buf.name}': predicate {pred.dtype} does not match the {lanes}-lane index"
            )
        if self.final and len(indices) != 1:
            raise self.fail(
                f"access to '{buf.name}' was not flattened (it has {len(indices)} indices)"
            )
        region = self.region(buf, len(indices))
        if region is None or self.dead:
            return
        lane = Var("lane", "int32")
        extra_range = {lane: Interval.from_range(0, lanes)} if lanes > 1 else {}
        scalar = [_scalarize(i, lane) for i in indices]
        facts = list(self.facts)
        if pred is not None:
            facts += _facts(_scalarize(pred, lane))
        for d, (index, (lo, extent)) in enumerate(zip(scalar, region)):
            if index is None or not is_index_dtype(index.dtype):
                continue
            hi = simplify_expr(lo + extent - 1)
            analyzer = (
                self.analyzer() if not extra_range else Analyzer({**self.ranges, **extra_range})
            )
            if _prove_le0(analyzer, lo - index, facts) and _prove_le0(analyzer, index - hi, facts):
                continue
            if self.guards or pred is not None:
                continue  # an enclosing condition may keep it in bounds: cannot tell
            self.certainly_inside(
                what,
                buf,
                indices[d] if len(indices) > 1 else indices[0],
                index,
                lo,
                hi,
                analyzer,
                d if len(indices) > 1 else None,
            )

    def certainly_inside(self, what, buf, shown, index, lo, hi, analyzer, dim) -> None:
        """Raise if the unguarded `index` certainly leaves [lo, hi] on some iteration: when
        `index - hi` (or `lo - index`) is affine in loops of constant range, its bound is exact."""
        for excess, side in ((index - hi, "above"), (lo - index, "below")):
            form = analyzer.form(simplify_expr(excess))
            exact = all(
                isinstance(term, Var)
                and term in analyzer.ranges
                and isinstance(analyzer.ranges[term].min, Const)
                and isinstance(analyzer.ranges[term].max, Const)
                for term, _ in form.terms.values()
            )
            worst = analyzer.form_bounds(form)[1]
            if not exact or math.isinf(worst) or worst <= 0:
                continue
            where = "" if dim is None else f" in dimension {dim}"
            loops = ", ".join(f"{v.name} in [{r.min}, {r.max}]" for v, r in self.ranges.items())
            raise self.fail(
                f"{what} '{buf.name}' is out of bounds{where}: index {shown} reaches {int(worst)} "
                f"element(s) {side} the buffer's range [{lo}, {hi}]"
                + (f" (loops: {loops})" if loops else "")
            )

    def region(self, buf: Buffer, count: int) -> list[tuple[Expr, Expr]] | None:
        """(min, extent) of each index position of an access with `count` indices."""
        region = self.regions.get(id(buf))
        if region is not None:
            return region if len(region) == count else None
        if count == len(buf.shape):
            return [(Const(0, e.dtype), e) for e in buf.shape]
        if count == 1 and buf.shape:
            size = buf.strides[0] * buf.shape[0] if buf.strides else _product(buf.shape)
            return [(Const(0, size.dtype), size)]
        return None


_MISSING = object()


# -- helpers ---------------------------------------------------------------------------------------
def _ints_of_two_widths(a: str, b: str) -> bool:
    """Integer operands of one operation that differ in type (int32 beside int64)."""
    ea, eb = dt.element_of(a), dt.element_of(b)
    return ea != eb and dt.is_int(ea) and dt.is_int(eb)


def _index_lanes(indices: tuple[Expr, ...]) -> int:
    return max((dt.lanes_of(i.dtype) for i in indices), default=1)


def _product(shape: tuple[Expr, ...]) -> Expr:
    out = shape[0]
    for e in shape[1:]:
        out = out * e
    return out


def _scalarize(e: Expr | None, lane: Var) -> Expr | None:
    """Lane `lane` of a vector expression as a scalar one (None if it cannot be written so)."""
    if e is None or dt.lanes_of(e.dtype) == 1:
        return e
    match e:
        case Ramp(base=base, stride=stride):
            return base + stride * lane
        case Broadcast(value=value):
            return value
        case Var() | BufferLoad() | Let() | VectorReduce():
            return None  # a vector variable or a gathered value: no scalar form
        case Cast(dtype=d, value=v):
            inner = _scalarize(v, lane)
            return None if inner is None else Cast(dt.element_of(d), inner)
    parts = []
    for child in children(e):
        part = _scalarize(child, lane)
        if part is None:
            return None
        parts.append(part)
    it: Iterator[Expr] = iter(parts)
    try:
        return map_children(e, lambda _child: next(it))
    except Exception:  # noqa: BLE001 - a node that cannot be rebuilt with scalar children
        return None


def _negate(cond: Expr | None) -> Expr | None:
    match cond:
        case Not(a=a):
            return a
        case CompareOp(a=a, b=b) if is_index_dtype(a.dtype):
            return _NEGATED[type(cond)](a, b)
    return None


def _facts(cond: Expr | None) -> list[Expr]:
    """Expressions `f` with `f <= 0` whenever the integer condition `cond` holds."""
    match cond:
        case And(a=a, b=b):
            return _facts(a) + _facts(b)
        case Not(a=a):
            return _facts(_negate(a)) if _negate(a) is not None else []
        case CompareOp(a=a, b=b) if is_index_dtype(a.dtype) and dt.lanes_of(a.dtype) == 1:
            match cond:
                case LT():
                    return [a - b + 1]
                case LE():
                    return [a - b]
                case GT():
                    return [b - a + 1]
                case GE():
                    return [b - a]
                case EQ():
                    return [a - b, b - a]
    return []


def _prove_le0(analyzer: Analyzer, e: Expr, facts: list[Expr]) -> bool:
    """Is `e <= 0` wherever the loop ranges and `facts` (each `f <= 0`) hold?

    Greedily subtracts positive multiples of facts: `e = c*f + r` with `f <= 0` gives `e <= max(r)`.
    """
    form = analyzer.form(e)
    best = analyzer.form_bounds(form)[1]
    if best <= 0:
        return True
    fact_forms = [analyzer.form(f) for f in facts]
    for _ in range(min(len(fact_forms), _MAX_FACT_STEPS)):
        step = None
        for fact in fact_forms:
            for c in _multipliers(form, fact):
                trial = form.add(fact, -c)
                high = analyzer.form_bounds(trial)[1]
                if high < best:
                    best, step = high, trial
        if step is None:
            return False
        form = step
        if best <= 0:
            return True
    return False


def _multipliers(form: LinearForm, fact: LinearForm) -> set[int]:
    out = {1}
    for key, (_, k) in fact.terms.items():
        mine = form.terms.get(key)
        if mine is not None and k and mine[1] % k == 0 and mine[1] // k > 0:
            out.add(mine[1] // k)
    return out


__all__ = ["verify", "verify_func"]
