"""tensorize: replace the loop nest under an axis by a tensor intrinsic's calls.

`s[T].tensorize(axis, intrin)` marks the leaf; when loops.py reaches it, `emit` checks that the
nest computes what the intrinsic's op computes (the loops inside `axis` map one to one onto
the intrinsic's axes, with equal extents; each read indexes its tensor as the intrinsic's read
does, offset by the outer loops) and emits the intrinsic's calls with its buffers bound to the
regions the nest covers: pointers to each region's first element, symbolic strides set to the
real buffer's. Where reduction loops enclose `axis`, the output is initialized before them by
the intrinsic's `reset` (`emit(..., reset=True)`, called from the init nest: a tensor-core
accumulator fragment can only be zeroed by its intrinsic) and its `update` runs inside;
otherwise its `body` (which initializes) does.
"""

from __future__ import annotations

from typing import Any

from tensorforge.errors import ScheduleError
from tensorforge.ir.arith import Interval, simplify_expr
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.extern import AddressOf
from tensorforge.ir.passes.flatten_storage import dense_strides
from tensorforge.ir.stmt import Evaluate, IfThenElse, Stmt, seq
from tensorforge.schedule.iter_math import iter_extents
from tensorforge.te.expr import And, Const, Expr, Reduce, TensorRead, Var, const, structural_equal
from tensorforge.te.extern_call import AccessPtr, BufferArg
from tensorforge.te.substitute import substitute
from tensorforge.te.tensor import IterVar, Tensor
from tensorforge.te.tensor_intrin import TensorIntrin
from tensorforge.te.visit import children, rewrite, walk

PRAGMA = "tensorize"


def tensorize(stage: Any, axis: IterVar, intrin: TensorIntrin) -> None:
    """Record that the nest under leaf `axis` of `stage` becomes `intrin`'s calls."""
    stage._check_leaf("tensorize", axis)
    if not isinstance(intrin, TensorIntrin):
        raise ScheduleError(
            f"tensorize: expected a te.decl_tensor_intrin(...) result for '{axis.name}' of stage "
            f"'{stage.name}', got {intrin!r}"
        )
    stage.attr(axis).pragmas.append((PRAGMA, intrin))


def intrin_at(stage: Any, iv: IterVar) -> TensorIntrin | None:
    attr = stage.iter_attrs.get(iv)
    for name, value in attr.pragmas if attr else ():
        if name == PRAGMA:
            return value
    return None


def _uses(e: Expr, var_ids: set[int]) -> bool:
    return any(isinstance(n, Var) and id(n) in var_ids for n in walk(e))


class _Mismatch(Exception):
    pass


def emit(nest: Any, level: int, env: Any, intrin: TensorIntrin, reset: bool = False) -> Stmt:
    """The intrinsic's calls in place of the nest of `nest.leaves[level:]` (with `reset`: its
    reset calls, which initialize the output tile before the enclosing reduction loops)."""
    stage, op = nest.stage, nest.stage.op
    where = f"tensorize: the nest under '{nest.leaves[level].name}' of stage '{stage.name}'"
    inner = nest.leaves[level:]
    inner_ids = {id(iv.var) for iv in inner}
    extents = iter_extents(stage, nest.info.root_extents, env.overrides)
    roots, values = nest.root_values(env)
    zero = {iv.var: const(0, iv.var.dtype) for iv in inner}
    mapping: dict[Var, Expr] = {}  # stage root var -> base + intrinsic var
    used: list[IterVar] = []
    for kind, stage_axes, intrin_axes in (
        ("spatial", list(op.axis), list(intrin.op.axis)),
        ("reduction", list(op.reduce_axis), list(intrin.op.reduce_axis)),
    ):
        moving = [r for r in stage_axes if _uses(roots[r], inner_ids)]
        if len(moving) != len(intrin_axes):
            raise ScheduleError(
                f"{where} has {len(moving)} {kind} axes ({', '.join(r.name for r in moving) or 'none'}) "
                f"but intrinsic '{intrin.name}' has {len(intrin_axes)} "
                f"({', '.join(a.name for a in intrin_axes) or 'none'})"
            )
        if kind == "spatial" and moving != stage_axes[len(stage_axes) - len(moving) :]:
            raise ScheduleError(
                f"{where}: the tensorized spatial axes ({', '.join(r.name for r in moving)}) must "
                f"be the last axes of '{stage.name}'"
            )
        for r in stage_axes:
            base = simplify_expr(substitute(roots[r], zero))
            mapping[r.var] = base
        for r, ia in zip(moving, intrin_axes):
            base = mapping[r.var]
            part = simplify_expr(roots[r] - base)
            leaf = next((iv for iv in inner if part is iv.var), None)
            if leaf is None:
                raise ScheduleError(
                    f"{where}: axis '{r.name}' moves as {part} inside it; each intrinsic axis must "
                    f"be one loop (split '{r.name}' so that one inner loop covers the tile)"
                )
            extent = simplify_expr(extents[leaf])
            if not (isinstance(extent, Const) and extent.value == ia.dom.extent.value):
                raise ScheduleError(
                    f"{where}: loop '{leaf.name}' has extent {extent}, but intrinsic "
                    f"'{intrin.name}' axis '{ia.name}' has {ia.dom.extent.value}"
                )
            used.append(leaf)
            mapping[r.var] = simplify_expr(base + ia.var)
    extra = [iv for iv in inner if iv not in used]
    if extra:
        raise ScheduleError(
            f"{where}: loops {', '.join(iv.name for iv in extra)} are not axes of intrinsic "
            f"'{intrin.name}'"
        )
    ranges = nest.b.ranges  # the tensorized loops' ranges prove full tiles' guards away
    added = [iv.var for iv in inner if iv.var not in ranges]
    for iv in inner:
        ranges.setdefault(iv.var, Interval(const(0, iv.var.dtype), simplify_expr(extents[iv] - 1)))
    try:
        preds = nest.predicates(env, values, spatial_only=reset)
    finally:
        for var in added:
            ranges.pop(var, None)
    if any(_uses(p, inner_ids) for p in preds):
        raise ScheduleError(
            f"{where} covers a partial tile (a split that does not divide its axis); intrinsic "
            f"'{intrin.name}' needs full tiles"
        )
    intr_axes = (*intrin.op.axis, *intrin.op.reduce_axis)
    intr_ids = {id(ia.var) for ia in intr_axes}
    # the intrinsic's loops run over [0, extent): a packed read such as B[j // 16, k, j % 16]
    # with j = 16 * jo + j' simplifies to B[jo, k, j'] only knowing that j' < 16
    intr_ranges = {
        ia.var: Interval(const(0, ia.var.dtype), const(ia.dom.extent.value - 1, ia.var.dtype))
        for ia in intr_axes
    }
    bindings: dict[Tensor, tuple[Tensor, tuple[Expr, ...]]] = {}
    stage_body = [substitute(b, mapping) for b in nest.info.body]
    try:
        for got, want in zip(stage_body, intrin.op.body):
            _match(got, want, bindings, intr_ranges)
    except _Mismatch as err:
        raise ScheduleError(f"{where} does not match intrinsic '{intrin.name}': {err}") from None
    for i in range(op.num_outputs):
        out_index = tuple(mapping[r.var] for r in op.axis)
        bindings[intrin.op.output(i)] = (op.output(i), _bases(out_index, intr_ids))
    if reset or env.init_done:
        if intrin.update is None:
            raise ScheduleError(
                f"{where}: reduction loops enclose it, so intrinsic '{intrin.name}' must return "
                f"(body, reset, update) to accumulate; it returned only a body"
            )
        calls = intrin.reset if reset else intrin.update
    else:
        calls = intrin.body
    own = {op.output(i): [nest.info.mins[iv] for iv in op.axis] for i in range(op.num_outputs)}
    stmts = [Evaluate(_bind(c, intrin, bindings, nest.b.buffer_of, where, own)) for c in calls]
    body = seq(*stmts)
    if preds:
        cond = preds[0]
        for p in preds[1:]:
            cond = And(cond, p)
        body = IfThenElse(cond, body)
    return body


def _bases(indices: tuple[Expr, ...], intr_ids: set[int]) -> tuple[Expr, ...]:
    zero = {}
    for e in indices:
        for n in walk(e):
            if isinstance(n, Var) and id(n) in intr_ids:
                zero[n] = const(0, n.dtype)
    return tuple(simplify_expr(substitute(e, zero)) for e in indices)


def _match(got: Any, want: Any, bindings: dict, intr_ranges: dict[Var, Interval]) -> None:
    """Structural comparison of the nest's expression with the intrinsic's."""
    intr_ids = {id(v) for v in intr_ranges}
    if isinstance(want, TensorRead):
        if not isinstance(got, TensorRead):
            raise _Mismatch(f"the intrinsic reads {want}, the nest computes {got}")
        m, n = len(want.indices), len(got.indices)
        if m > n:
            raise _Mismatch(f"'{want.tensor.name}' has {m} dimensions, '{got.tensor.name}' {n}")
        indices = tuple(simplify_expr(e, intr_ranges) for e in got.indices)
        for d, e in enumerate(indices[: n - m]):
            if any(isinstance(x, Var) and id(x) in intr_ids for x in walk(e)):
                raise _Mismatch(
                    f"index {d} of '{got.tensor.name}' ({e}) moves inside the tensorized loops, "
                    f"but the intrinsic's '{want.tensor.name}' has no such dimension"
                )
        bases = _bases(indices, intr_ids)
        for d, (g, w) in enumerate(zip(indices[n - m :], want.indices)):
            base = bases[n - m + d]
            offset = simplify_expr(g - base, intr_ranges)
            if not structural_equal(offset, simplify_expr(w, intr_ranges)):
                raise _Mismatch(
                    f"index {n - m + d} of '{got.tensor.name}' moves as {offset} inside the "
                    f"tensorized loops (it is {simplify_expr(g)}), but the intrinsic indexes "
                    f"'{want.tensor.name}' with {w} there"
                )
        earlier = bindings.get(want.tensor)
        if earlier is not None and (
            earlier[0] != got.tensor or not all(map(structural_equal, earlier[1], bases))
        ):
            raise _Mismatch(f"'{want.tensor.name}' stands for two different regions")
        bindings[want.tensor] = (got.tensor, bases)
        return
    if type(got) is not type(want):
        raise _Mismatch(f"the intrinsic computes {want}, the nest {got}")
    if isinstance(want, Reduce):
        if got.combiner.name != want.combiner.name or len(got.source) != len(want.source):
            raise _Mismatch(
                f"the nest reduces with {got.combiner.name}, the intrinsic with "
                f"{want.combiner.name}"
            )
        for g, w in zip(got.source, want.source):
            _match(g, w, bindings, intr_ranges)
        return
    if isinstance(want, Var):
        if got is not want:
            raise _Mismatch(f"the nest uses {got} where the intrinsic uses {want}")
        return
    if isinstance(want, Const):
        if got.value != want.value or got.dtype != want.dtype:
            raise _Mismatch(f"the nest has the constant {got} where the intrinsic has {want}")
        return
    if getattr(got, "dtype", None) != getattr(want, "dtype", None) or getattr(
        got, "name", None
    ) != getattr(want, "name", None):
        raise _Mismatch(f"the intrinsic computes {want}, the nest {got}")
    got_children, want_children = children(got), children(want)
    if len(got_children) != len(want_children):
        raise _Mismatch(f"the intrinsic computes {want}, the nest {got}")
    for g, w in zip(got_children, want_children):
        _match(g, w, bindings, intr_ranges)


def _bind(
    call: Expr, intrin: TensorIntrin, bindings: dict, buffer_of: Any, where: str, mins: dict
) -> Expr:
    """The call with each intrinsic buffer bound to the region of its tensor (an `elem_offset`
    var to the region's first element in the buffer: in the realized region for `mins`' tensors,
    the stage's own outputs, whose buffers start at those indices)."""
    regions: dict[int, tuple[Buffer, tuple[Expr, ...]]] = {}
    strides: dict[Var, Expr] = {}
    for t, eb in zip(intrin.tensors, intrin.buffers):
        if t not in bindings:
            raise ScheduleError(f"{where}: the nest never reads intrinsic tensor '{t.name}'")
        tensor, bases = bindings[t]
        buf = buffer_of(tensor)
        regions[id(eb)] = (buf, bases)
        actual = (buf.strides or dense_strides(buf.shape))[len(buf.shape) - len(eb.shape) :]
        declared = eb.strides or dense_strides(eb.shape)
        for d, (want, have) in enumerate(zip(declared, actual)):
            have = simplify_expr(have)
            if isinstance(want, Var):
                strides[want] = have
            elif not structural_equal(simplify_expr(want), have):
                raise ScheduleError(
                    f"{where}: intrinsic buffer '{eb.name}' has stride {want} along dimension "
                    f"{d}, but '{tensor.name}' has {have} there; declare the buffer with "
                    f"tf.tir.decl_buffer(..., strides=[te.var('s0'), 1]) and pass it in binds"
                )

        if isinstance(eb.elem_offset, Var):  # the region's first element, counted in `buf`
            if buf.scope != "global" and tensor not in mins:
                raise ScheduleError(
                    f"{where}: intrinsic buffer '{eb.name}' takes the element offset of "
                    f"'{tensor.name}', an intermediate another stage computes; only the "
                    f"tensorized stage's own output (or a global buffer) has a known offset"
                )
            lows = mins.get(tensor) or [Const(0, "int32")] * len(bases)
            full = buf.strides or dense_strides(buf.shape)
            strides[eb.elem_offset] = simplify_expr(
                sum(((b - lo) * st for b, lo, st in zip(bases, lows, full)), Const(0, "int32"))
            )

    def rule(n: Any) -> Any:
        if isinstance(n, AccessPtr):
            buf, bases = regions[id(n.buffer)]
            last = simplify_expr(bases[-1] + n.offset)
            return AddressOf(BufferLoad(buf, (*bases[:-1], last)), n.access)
        if isinstance(n, BufferArg):
            raise ScheduleError(
                f"{where}: intrinsic '{intrin.name}' passes the whole buffer '{n.buffer.name}'; "
                f"pass its address (buffer.access_ptr('r'))"
            )
        return None

    return substitute(rewrite(call, rule), strides)
