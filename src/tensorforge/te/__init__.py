"""tensorforge.te: declare what to compute (API.md §1)."""

from tensorforge.te.expr import (
    Add,
    Call,
    Cast,
    CommReducer,
    Const,
    Div,
    Expr,
    FloorDiv,
    FloorMod,
    Mul,
    Reduce,
    Select,
    SizeVar,
    Sub,
    TensorRead,
    Var,
    const,
)
from tensorforge.te.extern_call import ExternOp, extern
from tensorforge.te.intrin import (
    abs,
    acos,
    acosh,
    all,
    any,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    ceil,
    copysign,
    cos,
    cosh,
    erf,
    erfc,
    exp,
    exp2,
    expm1,
    floor,
    fmod,
    hypot,
    if_then_else,
    log,
    log1p,
    log2,
    log10,
    nextafter,
    power,
    round,
    rsqrt,
    shift_left,
    shift_right,
    sigmoid,
    sin,
    sinh,
    sqrt,
    tan,
    tanh,
)
from tensorforge.te.reduction import comm_reducer, max, min, sum
from tensorforge.te.scan_op import ScanOp, scan
from tensorforge.te.tensor import (
    ComputeOp,
    IterVar,
    Operation,
    PlaceholderOp,
    Range,
    Tensor,
    compute,
    placeholder,
    reduce_axis,
    thread_axis,
    var,
)
from tensorforge.te.tensor_intrin import TensorIntrin, decl_tensor_intrin
from tensorforge.te.tvm_compat import (
    floordiv,
    floormod,
    indexdiv,
    indexmod,
    max_value,
    min_value,
    size_var,
)


def create_schedule(ops):
    """A Schedule for the outputs `ops` (an Operation, a Tensor or a list) and all they read."""
    # NOTE: the one upward reference from te; kept lazy so te itself imports no other layer.
    from tensorforge.schedule.schedule import create_schedule as _create

    return _create(ops)


def __getattr__(name: str):
    from tensorforge.tvm_names import TE, missing

    raise missing("tensorforge.te", name, TE, globals())
