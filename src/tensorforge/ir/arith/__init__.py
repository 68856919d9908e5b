"""Integer arithmetic on the IR: intervals, canonical linear forms and the expression simplifier.

Ranges everywhere are `Mapping[Var, Interval]`, an Interval holding inclusive `min`/`max` Exprs
(`Interval.from_range(min, extent)` for a loop).
"""

from tensorforge.ir.arith.bounds import symbolic_bounds
from tensorforge.ir.arith.interval import Analyzer, Interval, const_bounds, prove
from tensorforge.ir.arith.linear import LinearForm, linearize, to_expr
from tensorforge.ir.arith.simplifier import ExprSimplifier, simplify_expr

__all__ = [
    "Analyzer",
    "ExprSimplifier",
    "Interval",
    "LinearForm",
    "const_bounds",
    "linearize",
    "prove",
    "simplify_expr",
    "symbolic_bounds",
    "to_expr",
]
