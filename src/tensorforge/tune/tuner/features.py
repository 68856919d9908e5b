"""Features of a candidate for the cost model: from its lowered loop IR, plus its knob values.

The IR features describe the statement that does most of the work (the "main" store: the one
with the largest trip count, counting unrolled copies and vector lanes):

- its innermost loops (innermost first): extent, kind (serial / parallel / vectorized /
  unrolled / thread), the trip count from that loop inward, whether it is a reduction loop;
- each buffer it touches (the stored one first, then loads in order): element size, vector
  lanes and contiguity, its stride along each of those loops, the bytes it touches within the
  k innermost loops and the reuse there (iterations per distinct element);
- the whole function: loop and store counts, total work, guards, parallel extent, vector width,
  local and global allocations, the working set of the main statement at each loop level.

Every vector has the same length for a given task, so the model compares like with like. Knob
values are prepended (a fallback when lowering fails: the IR part is then all NaN, which
xgboost treats as missing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

N_LOOPS = 6  # innermost loops of the main statement described
N_ACCESSES = 4  # buffers of the main statement described
_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
_LOOP_FEATURES = 2 + len(_KINDS) + 1  # extent, trip-inward, kinds, reduction
_ACCESS_FEATURES = (
    5 + 3 * N_LOOPS
)  # present, store, bytes, lanes, contiguous; strides, bytes, reuse
_GLOBAL_FEATURES = 13 + N_LOOPS
N_IR_FEATURES = N_LOOPS * _LOOP_FEATURES + N_ACCESSES * _ACCESS_FEATURES + _GLOBAL_FEATURES


def _log(x: float) -> float:
    return math.log2(1.0 + abs(x))


# -- knob features --------------------------------------------------------------------------------


def knob_features(config: Any) -> np.ndarray:
    """Each knob's choice as numbers: log2 split sizes, permutations, annotation codes, values."""
    out: list[float] = []
    for name, space in config.space.space_map.items():
        entity = config[name]
        kind = space.kind
        if kind == "split":
            out.extend(math.log2(max(1, s)) for s in entity.size)
        elif kind == "reorder":
            out.extend(float(p) for p in entity.perm)
        elif kind == "annotate":
            codes = {"none": 0.0, "unroll": 1.0, "vec": 2.0}
            out.extend(codes.get(a, 3.0) for a in entity.anns)
        else:
            value = entity.val
            if isinstance(value, (bool, int, float)):
                out.append(float(value))
            else:
                out.append(float(space.entities.index(entity)))
    return np.asarray(out, dtype=np.float64)


# -- evaluating index expressions -----------------------------------------------------------------


def _evaluate(expr: Any, env: dict, lets: dict, depth: int = 0) -> float:
    """The value of an index expression with loop variables from `env` (others 0)."""
    from tensorforge.ir import expr as ir
    from tensorforge.te import expr as te

    if depth > 200:
        return 0.0
    t = type(expr)
    if t is te.Const:
        return expr.value if not isinstance(expr.value, bool) else int(expr.value)
    if isinstance(expr, te.Var):  # a SizeVar too
        if expr in env:
            return env[expr]
        if expr in lets:
            return _evaluate(lets[expr], env, lets, depth + 1)
        return 0
    ev = lambda e: _evaluate(e, env, lets, depth + 1)
    if isinstance(expr, te.BinaryOp):
        a, b = ev(expr.a), ev(expr.b)
        if t is te.Add:
            return a + b
        if t is te.Sub:
            return a - b
        if t is te.Mul:
            return a * b
        if t is te.FloorDiv:
            return a // b if b else 0
        if t is te.FloorMod:
            return a % b if b else 0
        if t is te.Div:
            return a / b if b else 0
        if t is te.Min:
            return min(a, b)
        if t is te.Max:
            return max(a, b)
        if t is te.LT:
            return int(a < b)
        if t is te.LE:
            return int(a <= b)
        if t is te.GT:
            return int(a > b)
        if t is te.GE:
            return int(a >= b)
        if t is te.EQ:
            return int(a == b)
        if t is te.NE:
            return int(a != b)
        if t is te.And:
            return int(bool(a) and bool(b))
        if t is te.Or:
            return int(bool(a) or bool(b))
        return 0
    if t is te.Cast:
        return ev(expr.value)
    if t is te.Select:
        return ev(expr.true_value) if ev(expr.condition) else ev(expr.false_value)
    if t is te.Not:
        return int(not ev(expr.a))
    if t is te.Let:
        return _evaluate(expr.body, env, {**lets, expr.var: expr.value}, depth + 1)
    if t is ir.Ramp:
        return ev(expr.base)
    if t is ir.Broadcast:
        return ev(expr.value)
    return 0  # loads, calls: unknown, treat as 0


# -- walking the lowered function -----------------------------------------------------------------


@dataclass
class _Store:
    node: Any
    loops: tuple  # enclosing For nodes, outermost first
    lets: dict
    trip: float
    lanes: int


@dataclass
class _Stats:
    loops: int = 0
    stores: list = field(default_factory=list)
    ifs: int = 0
    guards: int = 0  # Selects and predicated accesses
    parallel: int = 0
    outer_parallel_extent: float = 0.0
    local_bytes: float = 0.0
    global_bytes: float = 0.0
    allocs: int = 0


def _lanes(dtype: str) -> int:
    from tensorforge.te import dtype as dt

    return dt.lanes_of(dtype)


def _bytes(dtype: str) -> int:
    from tensorforge.te import dtype as dt

    return max(1, dt.bits_of(dt.element_of(dtype)) // 8)


def _extent(loop: Any, env: dict, lets: dict) -> float:
    return max(1.0, float(_evaluate(loop.extent, env, lets)))


def _collect(stmt: Any, loops: tuple, lets: dict, env: dict, stats: _Stats) -> None:
    from tensorforge.ir import stmt as st
    from tensorforge.ir.expr import BufferLoad
    from tensorforge.ir.visit import children, walk
    from tensorforge.te.expr import Select

    t = type(stmt)
    if t is st.For:
        stats.loops += 1
        if stmt.kind.value == "parallel":
            stats.parallel += 1
            if stats.outer_parallel_extent == 0.0:
                stats.outer_parallel_extent = _extent(stmt, env, lets)
        inner_env = {**env, stmt.var: _evaluate(stmt.min, env, lets)}
        _collect(stmt.body, loops + (stmt,), lets, inner_env, stats)
    elif t is st.LetStmt:
        _collect(stmt.body, loops, {**lets, stmt.var: stmt.value}, env, stats)
    elif t is st.Seq:
        for s in stmt.stmts:
            _collect(s, loops, lets, env, stats)
    elif t is st.IfThenElse:
        stats.ifs += 1
        _collect(stmt.then_case, loops, lets, env, stats)
        if stmt.else_case is not None:
            _collect(stmt.else_case, loops, lets, env, stats)
    elif t is st.Allocate:
        stats.allocs += 1
        size = float(_evaluate(stmt.extent, env, lets)) * _bytes(stmt.buffer.dtype)
        if stmt.buffer.scope == "global":
            stats.global_bytes += size
        else:
            stats.local_bytes += size
        _collect(stmt.body, loops, lets, env, stats)
    elif t is st.BufferStore:
        trip = 1.0
        for loop in loops:
            trip *= _extent(loop, env, lets)
        lanes = max([_lanes(i.dtype) for i in stmt.indices] + [_lanes(stmt.value.dtype)])
        stats.stores.append(_Store(stmt, loops, lets, trip, lanes))
        for node in walk(stmt.value):
            if isinstance(node, Select) or (
                isinstance(node, BufferLoad) and node.predicate is not None
            ):
                stats.guards += 1
        if stmt.predicate is not None:
            stats.guards += 1
    else:  # Attr, Evaluate, Sync, ThreadAllReduce, ...: look inside statements only
        for child in children(stmt):
            if getattr(child, "_is_stmt", False):
                _collect(child, loops, lets, env, stats)


def _flat_index(access: Any, env: dict, lets: dict) -> float:
    indices = access.indices
    if len(indices) == 1:
        return _evaluate(indices[0], env, lets)
    shape = [_evaluate(e, env, lets) for e in access.buffer.shape]
    flat = 0.0
    for k, index in enumerate(indices):
        flat = flat * (shape[k] if k < len(shape) else 1) + _evaluate(index, env, lets)
    return flat


def _access_features(
    access: Any, is_store: bool, loops: list, env: dict, lets: dict
) -> list[float]:
    """Features of one buffer access against the innermost loops (innermost first)."""
    from tensorforge.ir.expr import Ramp

    index = access.indices[-1] if access.indices else None
    lanes = max([_lanes(i.dtype) for i in access.indices] + [1])
    contiguous = 0.0
    if isinstance(index, Ramp):
        contiguous = 1.0 if _evaluate(index.stride, env, lets) == 1 else 0.0
    elem = _bytes(access.buffer.dtype)
    base = _flat_index(access, env, lets)
    strides = []
    for loop in loops:
        moved = {**env, loop.var: env.get(loop.var, 0) + 1}
        strides.append(_flat_index(access, moved, lets) - base)
    footprints, reuses = [], []
    elements, iterations = float(lanes), float(lanes)
    for loop, stride in zip(loops, strides):
        extent = _extent(loop, env, lets)
        iterations *= extent
        if stride != 0:
            elements *= extent
        footprints.append(_log(elements * elem))
        reuses.append(math.log2(max(1.0, iterations / elements)))
    pad = N_LOOPS - len(loops)
    strides_f = [_log(s) for s in strides] + [0.0] * pad
    footprints += [footprints[-1] if footprints else _log(lanes * elem)] * pad
    reuses += [reuses[-1] if reuses else 0.0] * pad
    return (
        [1.0, float(is_store), float(elem), math.log2(lanes), contiguous]
        + strides_f
        + footprints
        + reuses
    )


def ir_features(func: Any) -> np.ndarray:
    """The fixed-length IR feature vector of a lowered PrimFunc (see the module docstring)."""
    from tensorforge.ir.expr import BufferLoad
    from tensorforge.ir.visit import walk

    stats = _Stats()
    _collect(func.body, (), {}, {}, stats)
    out = np.zeros(N_IR_FEATURES, dtype=np.float64)
    if not stats.stores:
        return out

    # Unrolled copies of a statement share its buffer and enclosing loop: count them together.
    groups: dict[tuple, list[_Store]] = {}
    for store in stats.stores:
        key = (id(store.node.buffer), id(store.loops[-1]) if store.loops else None)
        groups.setdefault(key, []).append(store)
    main_group = max(groups.values(), key=lambda g: g[0].trip * len(g) * g[0].lanes)
    main = main_group[0]
    loops = list(main.loops[::-1][:N_LOOPS])  # innermost first
    env = {}
    for loop in main.loops:
        env[loop.var] = _evaluate(loop.min, env, main.lets)

    # accesses: the store, then each loaded buffer once, in order of appearance
    accesses = [(main.node, True)]
    seen = {id(main.node.buffer)}
    for node in walk(main.node.value):
        if isinstance(node, BufferLoad) and id(node.buffer) not in seen:
            seen.add(id(node.buffer))
            accesses.append((node, False))
    access_rows = [_access_features(a, s, loops, env, main.lets) for a, s in accesses[:N_ACCESSES]]

    # loops
    row: list[float] = []
    inward = float(main.lanes)
    store_strides = access_rows[0][5 : 5 + N_LOOPS]
    for k, loop in enumerate(loops):
        extent = _extent(loop, env, main.lets)
        inward *= extent
        kinds = [1.0 if loop.kind.value == kind else 0.0 for kind in _KINDS]
        reduction = 1.0 if store_strides[k] == 0.0 else 0.0
        row += [_log(extent), _log(inward)] + kinds + [reduction]
    row += [0.0] * (_LOOP_FEATURES * (N_LOOPS - len(loops)))
    for access in access_rows:
        row += access
    row += [0.0] * (_ACCESS_FEATURES * (N_ACCESSES - len(access_rows)))

    # the whole function
    work = sum(s.trip * s.lanes for s in stats.stores)
    max_lanes = max(s.lanes for s in stats.stores)
    working_set = []
    for level in range(N_LOOPS):
        total = sum(2 ** a[5 + 2 * N_LOOPS + level] - 1 for a in access_rows)
        working_set.append(_log(total))
    row += [
        _log(stats.loops),
        _log(len(stats.stores)),
        _log(work),
        _log(main.trip * len(main_group) * main.lanes),
        float(len(main_group)),
        float(len(main.loops)),
        float(stats.ifs),
        float(stats.guards),
        float(stats.parallel),
        _log(stats.outer_parallel_extent),
        math.log2(max_lanes),
        _log(stats.local_bytes),
        _log(stats.global_bytes),
    ] + working_set
    out[:] = row
    return out


def candidate_ir_features(task: Any, config: Any) -> np.ndarray:
    """Instantiate `config`, lower it and return its IR features (run in a worker process)."""
    import tensorforge as tf
    from tensorforge.target import Target

    s, args = task.instantiate(config)
    with Target(task.target):
        func = tf.lower(s, args, name="main")
    return ir_features(func)
