"""Simplify one expression: fold constants, drop identities, put integer sums in canonical
linear form, and use variable ranges to resolve divisions, comparisons and min/max.

Floats are only folded when both operands are constants and never reassociated; `x * 0.0`
stays (it is NaN for x = inf). Vector nodes keep their shape: only their scalar parts change.

Index arithmetic never overflows (sizes and offsets fit their type), so `(i * 3) // 3 -> i`.
Integer tensor values wrap around as torch's do (INT_MAX + 1 is INT_MIN): a simplifier for
stored values (`data=True`) leaves integer arithmetic that reads memory as it is, and
simplifies the loads' own indices (and arithmetic of loop variables alone) as index arithmetic.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from tensorforge.ir.arith.const_fold import fold_binary, fold_cast
from tensorforge.ir.arith.div_mod import floordiv_form, floormod_form, merge_div_mod
from tensorforge.ir.arith.interval import Analyzer, Interval, _decide_compare
from tensorforge.ir.arith.lanes import lane_bound, lane_offsets
from tensorforge.ir.arith.linear import (
    LinearForm,
    fits,
    is_index_dtype,
    same_expr,
    to_expr,
    widens_index,
)
from tensorforge.ir.expr import Broadcast, BufferLoad, Ramp
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
    BinaryOp,
    Cast,
    CompareOp,
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
    TensorRead,
    Var,
)
from tensorforge.te.substitute import substitute
from tensorforge.te.visit import map_children, walk

_NEGATED = {LT: GE, LE: GT, GT: LE, GE: LT, EQ: NE, NE: EQ}
_READS = (BufferLoad, TensorRead)  # a value from memory (loop IR, a compute's body)
_SUM_NODES = (Add, Sub, Mul)


def simplify_expr(
    e: Expr, ranges: Mapping[Var, Interval] | None = None, data: bool = False
) -> Expr:
    """`e` simplified, knowing each Var in `ranges` lies in its inclusive Interval (`data`: a
    stored value, whose integer arithmetic of loaded values wraps around).

    >>> i, j = Var("i"), Var("j")
    >>> simplify_expr((i * 4 + j) - i * 4)
    j
    >>> simplify_expr((i * 4 + j) // 4, {j: Interval.from_range(0, 4)})
    i
    """
    return ExprSimplifier(ranges, data).visit(e)


class ExprSimplifier:
    """Simplifies expressions under one set of ranges, remembering results by node."""

    def __init__(self, ranges: Mapping[Var, Interval] | None = None, data: bool = False):
        self.analyzer = Analyzer(ranges)
        self._memo: dict[int, tuple[Expr, Expr]] = {}
        self.data = data  # stored values: integer arithmetic of loaded values wraps around
        self._index: ExprSimplifier | None = None  # (data: for the loads' indices)
        self._reads: dict[int, tuple[Expr, bool]] = {}

    def index(self) -> ExprSimplifier:
        """The index-arithmetic simplifier beside a data one (same ranges and analyzer)."""
        if self._index is None:
            self._index = ExprSimplifier()
            self._index.analyzer = self.analyzer
        return self._index

    def wraps(self, e: Expr) -> bool:
        """Whether integer arithmetic `e` may wrap around: a stored value's that reads memory."""
        if not self.data:
            return False
        hit = self._reads.get(id(e))
        if hit is None:
            hit = (e, any(isinstance(x, _READS) for x in walk(e)))
            self._reads[id(e)] = hit
        return hit[1]

    def visit(self, e: Expr) -> Expr:
        if isinstance(e, (Var, Const)):
            return e
        if self.data and isinstance(e, _READS):
            return self.index().visit(e)  # a load's indices are index arithmetic
        hit = self._memo.get(id(e))
        if hit is not None:
            return hit[1]
        if type(e) in _SUM_NODES and is_index_dtype(e.dtype) and not self.wraps(e):
            node = self._canonical_sum(e)
        else:
            node = map_children(e, self.visit)
            for _ in range(8):  # a rule may open the way for another (not a < b -> a >= b -> True)
                new = _simplify_node(node, self)
                if new is None or new is node:
                    break
                node = new
        self._memo[id(e)] = (e, node)
        self._memo[id(node)] = (node, node)
        return node

    def _canonical_sum(self, e: Expr) -> Expr:
        """(i*4 + j) - i*4 -> j; (io*8 + ii)*4 -> io*32 + ii*4; (x//8)*8 + x%8 -> x.

        A whole tree of Add/Sub/Mul-by-constant becomes one form, built once: only the terms
        under it are visited on their own, so a sum of n terms costs O(n), not O(n^2).
        """
        form = merge_div_mod(self._sum_form(e), self)
        if not fits(form, e.dtype):  # (i + 2**30) + 2**30 in int32: keep it, never wrap it
            return map_children(e, self.visit)
        if any(dt.bits_of(t.dtype) > dt.bits_of(e.dtype) for t, _ in form.terms.values()):
            # an int64 term in an int32 sum (ill-typed IR: 0 + i64): never narrow it to int32
            # silently; the IR verifier names the pass that made it
            return map_children(e, self.visit)
        result = self.build(form, e.dtype)
        if same_expr(result, e):
            self.analyzer._forms[id(e)] = (e, form)
            return e
        return result

    def _sum_form(self, e: Expr) -> LinearForm:
        match e:
            case Const(value=v) if not isinstance(v, bool):
                return LinearForm(const=int(v))
            case Add(a, b):
                return self._sum_form(a).add(self._sum_form(b))
            case Sub(a, b):
                return self._sum_form(a).add(self._sum_form(b), -1)
            case Mul(a, b):
                fa, fb = self._sum_form(a), self._sum_form(b)
                if fa.is_const or fb.is_const:
                    return fb.scaled(fa.const) if fa.is_const else fa.scaled(fb.const)
                a2, b2 = self.visit(a), self.visit(b)  # a product of two sums stays a term
                return LinearForm.of_term(e if a2 is a and b2 is b else Mul(a2, b2))
            case Cast(dtype=wide, value=Cast(value=x) as v) if (
                widens_index(v.dtype, wide) and x.dtype == wide and self._fits(x, v.dtype)
            ):
                return self._sum_form(x)  # int64(int32(f % 64)) -> f % 64 where it fits int32
            case Cast(dtype=wide, value=v) if widens_index(v.dtype, wide):
                return self._sum_form(v)  # int64(i*8 + j) -> int64(i)*8 + int64(j): exact (nsw)
        return self.form(self.visit(e))  # a term: simplify it on its own (it may turn linear)

    def form(self, e: Expr) -> LinearForm:
        return self.analyzer.form(e)

    def _fits(self, e: Expr, dtype: str) -> bool:
        lo, hi = self.analyzer.bounds(e)
        low, high = dt.int_range(dtype)
        return low <= lo and hi <= high

    def build(self, form: LinearForm, dtype: str) -> Expr:
        """The canonical expression of `form`, remembered so a parent sum reuses the form."""
        e = to_expr(form, dtype)
        self.analyzer._forms[id(e)] = (e, form)
        return e


def _zero(dtype: str) -> Const:
    return Const(0, dtype)


def _simplify_node(node: Expr, s: ExprSimplifier) -> Expr | None:
    """One rewrite of `node`, whose children are already simplified; None keeps it."""
    match node:
        case BufferLoad(predicate=Const(value=True) | Broadcast(value=Const(value=True))):
            return dataclasses.replace(node, predicate=None)  # A[i if True] -> A[i]
        case BufferLoad(predicate=p) if p is not None and _inside_buffer(node, s):
            return dataclasses.replace(node, predicate=None)  # A[i if c] -> A[i]: i lies in A
        case BinaryOp(Broadcast(Const() as a, lanes=n), Broadcast(Const() as b, lanes=m)) if n == m:
            folded = fold_binary(type(node)(a, b))  # broadcast(2) + broadcast(3) -> broadcast(5)
            return None if folded is None else Broadcast(folded, n)
        case BinaryOp(Broadcast(a, lanes=n), Broadcast(b, lanes=m)) if n == m:
            # broadcast(1.0) / broadcast(s) -> broadcast(1.0 / s): one scalar operation, the same
            # value in every lane (floats too), not one per lane per vector step
            return Broadcast(s.visit(type(node)(a, b)), n)
        case BufferLoad(indices=(Broadcast(index, lanes=n),), predicate=None):
            # A[broadcast(i)] -> broadcast(A[i]): a scalar load, not a gather of one address
            return Broadcast(dataclasses.replace(node, indices=(index,)), n)
        case _ if dt.lanes_of(node.dtype) != 1 and dt.is_bool(node.dtype):
            return _vector_mask(node, s)  # masks: ramp bounds every lane meets, uniform logic
        case _ if dt.lanes_of(node.dtype) != 1:
            return _vector_index(node, s)  # vectors: only index arithmetic of ramps/broadcasts
        case BinaryOp(Const(), Const()):
            return fold_binary(node)  # 2 + 3 -> 5, 7 // -2 -> -4, 1.5 < 2.0 -> True
        case Cast(dtype=d, value=v) if d == v.dtype:
            return v  # int32(x) -> x when x is int32
        case Cast(dtype=d, value=Const() as c):
            return fold_cast(d, c)  # int32(2.7) -> 2
        case Not(Const(value=v)):
            return Const(not v, "bool")
        case Not(Not(x)):
            return x  # not not x -> x
        case Not(CompareOp(a, b) as c) if dt.is_int(a.dtype):
            return _NEGATED[type(c)](a, b)  # not a < b -> a >= b (ints only: NaN breaks it)
        case And(Const(value=v), x) | And(x, Const(value=v)):
            return x if v else Const(False, "bool")  # True and x -> x; False and x -> False
        case Or(Const(value=v), x) | Or(x, Const(value=v)):
            return Const(True, "bool") if v else x  # True or x -> True; False or x -> x
        case And(x, y) | Or(x, y) if same_expr(x, y):
            return x  # x and x -> x
        case Select(Const(value=v), a, b):
            return a if v else b  # select(True, a, b) -> a
        case Select(_, a, b) if same_expr(a, b):
            return a  # select(c, a, a) -> a
        case Let(var=v, value=Const() | Var() as value, body=body):
            return s.visit(substitute(body, {v: value}))  # let v = 3 in v + 1 -> 4
        case Add() | Sub() | Mul() | FloorDiv() | FloorMod() | Min() | Max() | CompareOp() if (
            s.wraps(node)
        ):
            pass  # (the rules below assume no overflow; the identities after hold anyway)
        case Add() | Sub() | Mul() if is_index_dtype(node.dtype):
            return s._canonical_sum(node)  # a sum some other rule just built
        case FloorDiv(x, Const(value=c)) if is_index_dtype(node.dtype) and c > 0:
            return _rebuilt(node, floordiv_form(s.form(x), c, node.dtype, s), s)
        case FloorMod(x, Const(value=c)) if is_index_dtype(node.dtype) and c > 0:
            return _rebuilt(node, floormod_form(s.form(x), c, node.dtype, s), s)
        case Min() | Max() if is_index_dtype(node.dtype):
            return _min_max(node, s)
        case CompareOp(a, b) if is_index_dtype(a.dtype):
            return _compare(node, s)
    return _identity(node)


def _vector_index(node: Expr, s: ExprSimplifier) -> Expr | None:
    """Index arithmetic on ramps and broadcasts, as one ramp or broadcast of scalar arithmetic:
    broadcast(a) + ramp(b, 1, n) -> ramp(a + b, 1, n); ramp(16t, 1, 16) // 64 ->
    broadcast(16t // 64) (no two lanes straddle a multiple of 64). A vectorized index through
    a split and a fuse (`(k // 64) * 4096 + k % 64` of a ramp) then reads contiguous lanes
    again instead of gathering them."""
    if not is_index_dtype(dt.element_of(node.dtype)):
        return None
    match node:
        case Cast(dtype=d, value=Ramp(base, stride, n) as r) if widens_index(
            dt.element_of(r.dtype), dt.element_of(d)
        ):
            # int64x16(ramp(b, 1, 16)) -> ramp(int64(b), 1, 16): exact, as a scalar widening
            # of index arithmetic is (no overflow); a row at a symbolic offset then loads
            # contiguous lanes instead of gathering them
            wide = dt.element_of(d)
            return Ramp(s.visit(Cast(wide, base)), s.visit(Cast(wide, stride)), n)
        case Cast(dtype=d, value=Broadcast(x, n) as b) if widens_index(
            dt.element_of(b.dtype), dt.element_of(d)
        ):
            return Broadcast(s.visit(Cast(dt.element_of(d), x)), n)
        case FloorDiv(Ramp() as r, Broadcast(Const() as c)) if _ramp_in_one_block(r, c.value, s):
            return Broadcast(s.visit(FloorDiv(r.base, c)), r.lanes)
        case FloorMod(Ramp() as r, Broadcast(Const() as c)) if _ramp_in_one_block(r, c.value, s):
            return Ramp(s.visit(FloorMod(r.base, c)), r.stride, r.lanes)
        case (
            Add(Broadcast(a), Broadcast(b))
            | Sub(Broadcast(a), Broadcast(b))
            | Mul(Broadcast(a), Broadcast(b))
        ):
            return Broadcast(s.visit(type(node)(a, b)), dt.lanes_of(node.dtype))
        case Add(Broadcast(a), Ramp(base, stride, n)) | Add(Ramp(base, stride, n), Broadcast(a)):
            return Ramp(s.visit(Add(base, a)), stride, n)
        case Sub(Ramp(base, stride, n), Broadcast(a)):
            return Ramp(s.visit(Sub(base, a)), stride, n)
        case Add(Ramp(b1, Const() as s1, n), Ramp(b2, Const() as s2)):
            return Ramp(s.visit(Add(b1, b2)), fold_binary(Add(s1, s2)), n)
        case Mul(Ramp(base, Const() as stride, n), Broadcast(Const() as c)):
            return Ramp(s.visit(Mul(base, c)), fold_binary(Mul(stride, c)), n)
        case Max(Ramp() as r, Broadcast()) | Min(Ramp() as r, Broadcast()) if _every_lane(node, s):
            # max(ramp(2j, 2, 8), broadcast(0)) -> ramp(2j, 2, 8): no lane clamps;
            # min(ramp(16j, 2, 8), broadcast(111)) -> the ramp, for j <= 6
            return r
    return None


def _vector_mask(node: Expr, s: ExprSimplifier) -> Expr | None:
    """Masks of window positions (a pool's padding test, vectorized): a bound every lane of a
    ramp meets, and logic of uniform masks, as a broadcast: `ramp(16j, 2, 8) >= broadcast(0)`
    -> broadcast(True); `broadcast(a) and broadcast(b)` -> broadcast(a and b)."""
    n = dt.lanes_of(node.dtype)
    match node:
        case And(Broadcast(a), Broadcast(b)) | Or(Broadcast(a), Broadcast(b)):
            return Broadcast(s.visit(type(node)(a, b)), n)
        case And(Broadcast(Const(value=v)), x) | And(x, Broadcast(Const(value=v))):
            return x if v else Broadcast(Const(False, "bool"), n)  # all on and x -> x
        case Or(Broadcast(Const(value=v)), x) | Or(x, Broadcast(Const(value=v))):
            return Broadcast(Const(True, "bool"), n) if v else x
        case CompareOp(Ramp(), Broadcast()) if _every_lane(node, s):
            return Broadcast(Const(True, "bool"), n)  # its first (last) lane meets it: all do
    return None


def _every_lane(node: Expr, s: ExprSimplifier) -> bool:
    """Does the ramp clamp or test `node` provably hold in every lane (lanes.lane_bound)?"""
    match lane_bound(node):
        case GE(a, b):
            return _at_least(s, a, b)
        case GT(a, b):
            return _at_least(s, a, Add(b, Const(1, b.dtype)))
        case LE(a, b):
            return _at_least(s, b, a)
        case LT(a, b):
            return _at_least(s, b, Add(a, Const(1, a.dtype)))
    return False


def _at_least(s: ExprSimplifier, a: Expr, b: Expr) -> bool:
    """Is a >= b provable?"""
    lo, _ = s.analyzer.form_bounds(s.form(a).add(s.form(b), -1))
    return lo >= 0


def _inside_buffer(load: BufferLoad, s: ExprSimplifier) -> bool:
    """Does every lane of the vector load `load` provably lie inside its dense buffer?

    A load's predicate keeps masked-off lanes from touching memory (a pad's select arm, a
    vectorized tail); their values are never used. Where every lane's address is inside the
    buffer anyway (the graph layer clamps a pad's index into the input), the mask only costs:
    a pad's edge row read as a masked gather instead of loads (llvm_windows.py).
    NOTE: vector loads whose lanes sit at constant offsets, under a lane-dependent mask only
    (a uniform one is a branch around the load, which skips it; llama's rotate_half read its
    halves by two unmasked gathers without it, 162 -> 192 us). A scalar load keeps its
    predicate: vectorized later, an unmasked clamped index (`B[min(p*32 + x, 95)]`) would be
    a gather lane by lane where the masked one is one vgather (a matmul's packing of B).
    """
    buffer = load.buffer
    if len(load.indices) != 1 or buffer.strides is not None or dt.lanes_of(load.dtype) == 1:
        return False
    if isinstance(load.predicate, Broadcast):
        return False  # one condition for every lane: a branch that skips the load, kept
    parts = lane_offsets(load.indices[0])
    if parts is None or not is_index_dtype(parts[0].dtype):
        return False
    base, offsets = parts
    lo, hi = s.analyzer.bounds(base)
    if all(isinstance(d, Const) for d in buffer.shape):
        return lo + min(offsets) >= 0 and hi + max(offsets) < math.prod(
            d.value for d in buffer.shape
        )
    # a buffer of a run-time size: the last lane below its element count, symbolically (a
    # matrix product's row min(i, n - 1) of an [n, k] matrix, read under a column mask)
    size = LinearForm(const=1)
    for d in buffer.shape:
        dim = s.form(d)
        if not (size.is_const or dim.is_const):
            return False  # a product of two sizes: no linear form
        size = dim.scaled(size.const) if size.is_const else size.scaled(dim.const)
    last = s.form(base).plus_const(max(offsets)).add(size, -1)
    return lo + min(offsets) >= 0 and s.analyzer.form_bounds(last)[1] < 0


def _ramp_in_one_block(r: Ramp, divisor: int, s: ExprSimplifier) -> bool:
    """Do the lanes of the unit-stride ramp `r` all lie in one block of `divisor`? They do
    where its base is provably a multiple of some g dividing `divisor` with lanes <= g: the
    base's remainder is then a multiple of g, at most divisor - g."""
    if not (isinstance(r.stride, Const) and r.stride.value == 1) or divisor <= 0:
        return False
    form = s.form(r.base)
    g = math.gcd(divisor, form.const, *form.coefficients())
    return r.lanes <= g


def _identity(node: Expr) -> Expr | None:
    """Identities that hold for every scalar dtype (float ones only where exact up to -0.0)."""
    is_int = dt.is_int(node.dtype)
    match node:
        case Add(x, Const(value=0)) | Add(Const(value=0), x) | Sub(x, Const(value=0)):
            return x  # x + 0 -> x
        case Mul(x, Const(value=1)) | Mul(Const(value=1), x) | Div(x, Const(value=1)):
            return x  # x * 1 -> x
        case Mul(x, Const(value=0)) | Mul(Const(value=0), x) if is_int:
            return _zero(node.dtype)  # x * 0 -> 0 (not for floats: inf * 0 is NaN)
        case Sub(x, y) if is_int and same_expr(x, y):
            return _zero(node.dtype)  # x - x -> 0
        case FloorDiv(x, Const(value=1)) if is_int:
            return x  # x // 1 -> x
        case FloorMod(x, Const(value=1)) if is_int:
            return _zero(node.dtype)  # x % 1 -> 0
        case Min(x, y) | Max(x, y) if same_expr(x, y):
            return x  # min(x, x) -> x
        case EQ(x, y) | LE(x, y) | GE(x, y) if dt.is_int(x.dtype) and same_expr(x, y):
            return Const(True, "bool")  # x <= x -> True
        case NE(x, y) | LT(x, y) | GT(x, y) if dt.is_int(x.dtype) and same_expr(x, y):
            return Const(False, "bool")  # x < x -> False
    return None


def _rebuilt(node: Expr, form: LinearForm, s: ExprSimplifier) -> Expr | None:
    """The canonical expression of `form`, or None if that is `node` itself."""
    if not fits(form, node.dtype):
        return None
    result = s.build(form, node.dtype)
    return None if same_expr(result, node) else result


def _min_max(node: Min | Max, s: ExprSimplifier) -> Expr | None:
    lo, hi = s.analyzer.form_bounds(s.form(node.a).add(s.form(node.b), -1))
    a_le_b, a_ge_b = hi <= 0, lo >= 0
    if isinstance(node, Min):
        if a_le_b or a_ge_b:
            return node.a if a_le_b else node.b  # min(i, i + 4) -> i
    elif a_le_b or a_ge_b:
        return node.a if a_ge_b else node.b  # max(i, 0) -> i for i >= 0
    match node:
        case Min(Const() as c, x) | Max(Const() as c, x):
            return type(node)(x, c)  # min(4, n) -> min(n, 4): constants on the right
        case Min(Min(x, Const(value=c1)), Const(value=c2)):
            return Min(x, Const(min(c1, c2), node.dtype))  # min(min(x, 4), 2) -> min(x, 2)
        case Max(Max(x, Const(value=c1)), Const(value=c2)):
            return Max(x, Const(max(c1, c2), node.dtype))
    return None


def _compare(node: CompareOp, s: ExprSimplifier) -> Expr | None:
    fa, fb = s.form(node.a), s.form(node.b)
    diff = fa.add(fb, -1)
    lo, hi = s.analyzer.form_bounds(diff)
    if _decide_compare(type(node), lo, hi, True):
        return Const(True, "bool")  # io*32 + ii < 1000 with io < 31, ii < 32 -> True
    if _decide_compare(type(node), lo, hi, False):
        return Const(False, "bool")
    if len(diff.terms) < len(fa.terms) + len(fb.terms):  # terms cancel: i*4 + j < i*4 + 8 -> j < 8
        dtype = node.a.dtype
        left = LinearForm({k: tc for k, tc in diff.terms.items() if tc[1] > 0})
        right = LinearForm({k: (t, -c) for k, (t, c) in diff.terms.items() if c < 0}, -diff.const)
        return type(node)(s.build(left, dtype), s.build(right, dtype))
    return None
