"""Sketch rules: how each stage of a te DAG is scheduled, from its computation alone.

`generate(s, target, decisions)` walks the stages consumers-first and applies one rule per stage,
recording every primitive call (trace.Recorder). The rules, after Ansor's:

- an injective (element-wise, broadcast) stage that is not an output is inlined into its
  consumers; where it is costly (it calls exp, erf...) and read by several stages, or feeds a tiled
  reduction, inlining is a decision and the alternative is a compute location;
- a reduction with data reuse (an input read without some spatial axis: matmul, conv) gets
  multi-level tiling: `SSRSRS` on CPU, `SSSRRSRS` on GPU. Its single element-wise consumer, if
  any, is tiled with the outer levels and the reduction computed inside it (consumer fusion);
  otherwise a `cache_write` stage plays that part (a decision on CPU, always on GPU);
  the CPU rule is in sketch_tiling.py, the GPU one in sketch_gpu.py;
- a reduction without reuse (row max, row sum) is reduced in vector partials (`rfactor`) or
  plainly (a decision; on GPU across threads), at a compute location inside its consumer;
- the remaining root stages (outputs, kept intermediates) get fused parallel outer loops and a
  vectorized inner loop (CPU), or blocks and threads (GPU);
- annotation: tile sizes, the parallel extent, vectorization, unrolling, thread binding, all
  decisions (decisions.py), so that every schedule drawn is legal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensorforge.te import dtype as dt
from tensorforge.te.expr import Call, TensorRead
from tensorforge.te.tensor import ComputeOp, IterKind, PlaceholderOp
from tensorforge.te.visit import walk
from tensorforge.tune.auto.decisions import Decisions
from tensorforge.tune.auto.extents import extent_of, hinted_extent, is_static, same_extent
from tensorforge.tune.auto.trace import Recorder

UNROLL_STEPS = (0, 16, 64, 512)  # auto_unroll_max_step choices (Ansor's CPU set)
WINDOW_UNROLL = 16  # window positions unrolled (a 3 x 3 window whole, a 7-wide row)


# -- analysis of the computation ------------------------------------------------------------------


def is_injective(op: Any) -> bool:
    return isinstance(op, ComputeOp) and not op.is_reduction and op.num_outputs == 1


def _reads(op: Any) -> list[TensorRead]:
    return [n for b in op.body for n in walk(b) if isinstance(n, TensorRead)]


def has_reuse(op: Any) -> bool:
    """A reduction some of whose inputs are read without one of its spatial axes (each element
    of them then serves several outputs: tiling pays). Axes of extent 1 give no reuse: a row
    statistic of shape [1, 128] read from a [128, 768] input was tiled across rows (a gather
    per vector of 16 rows: a GPT-2 layer norm ran 3.4x slower than as vector partials)."""
    if not (isinstance(op, ComputeOp) and op.is_reduction):
        return False
    spatial = {iv.var for iv in op.axis if getattr(iv.dom.extent, "value", None) != 1}
    for read in _reads(op):
        used = {n for index in read.indices for n in walk(index) if n in spatial}
        if spatial - used:
            return True
    return False


def reduces_columns(op: Any, lanes: int) -> bool:
    """A reduction whose inputs are contiguous along its last spatial axis and not along any
    reduction axis (`sum(x[k, j], k)`), the last axis whole vectors: reduce vectors of outputs."""
    if not (isinstance(op, ComputeOp) and op.is_reduction and op.num_outputs == 1 and op.axis):
        return False
    last = getattr(op.axis[-1].dom.extent, "value", None)
    if not isinstance(last, int) or last < lanes or last % lanes:
        return False
    return _last_indices_walk(op, reduction=False)


def slides_windows(op: Any) -> bool:
    """A reduction over small windows that slide along its last spatial axis (max / avg pool:
    `max(x[.., y * 2 + ry, j * 2 + rx], ry, rx)`): every read's last index walks both the last
    spatial axis and a reduction axis. Vectors of outputs then take one load a window
    position; partials along the window's few positions would not fill a vector."""
    if not (isinstance(op, ComputeOp) and op.is_reduction and op.num_outputs == 1 and op.axis):
        return False
    if not isinstance(getattr(op.axis[-1].dom.extent, "value", None), int):
        return False
    return _last_indices_walk(op, reduction=True, skip_own_position=True)


def _last_indices_walk(op: Any, reduction: bool, skip_own_position: bool = False) -> bool:
    """Whether `op` reads something and every read's last index walks its last spatial axis,
    and a reduction axis too (`reduction`) or none (not). `skip_own_position`: reads at the
    output's own indices do not count (a max pool's index pass reads the window's maximum
    there: one vector load a vector of outputs, as the window's reads)."""
    j = op.axis[-1].var
    reduce = {iv.var for iv in op.reduce_axis}
    own = [iv.var for iv in op.axis]
    reads = [
        r
        for r in _reads(op)
        if r.indices
        and not (
            skip_own_position
            and len(r.indices) == len(own)
            and all(a is b for a, b in zip(r.indices, own))
        )
    ]
    for read in reads:
        inner = list(walk(read.indices[-1]))
        if not any(n is j for n in inner) or any(n in reduce for n in inner) != reduction:
            return False
    return bool(reads)


def is_identity_copy(op: Any) -> bool:
    """An injective stage that, on its own domain, is one input read at its own indices (a
    convolution's padding of 0: `padded = data` once the bounds tests fold): inlining it costs
    nothing, computing it copies the input (1x1 conv 64 -> 256 at 56²: 4% of the kernel)."""
    from tensorforge.ir.arith import Interval
    from tensorforge.ir.arith.simplifier import simplify_expr

    if not is_injective(op) or len(op.body) != 1:
        return False
    extents = [getattr(iv.dom.extent, "value", None) for iv in op.axis]
    if not all(isinstance(e, int) for e in extents):
        return False
    ranges = {iv.var: Interval.from_range(0, e) for iv, e in zip(op.axis, extents)}
    body = simplify_expr(op.body[0], ranges)
    if not isinstance(body, TensorRead) or len(body.indices) != len(op.axis):
        return False
    shape = [getattr(e, "value", None) for e in body.tensor.shape]
    own = all(index is iv.var for index, iv in zip(body.indices, op.axis))
    return own and shape == extents


def has_lane_math(op: Any) -> bool:
    """Calls a math function on values that vary along the last axis (exp(x[i, j]), not the
    rsqrt of a row statistic): each vector then runs a long dependent chain."""
    if not isinstance(op, ComputeOp) or not op.axis:
        return False
    last = op.axis[-1].var
    return any(
        isinstance(n, Call) and any(m is last for m in walk(n)) for b in op.body for n in walk(b)
    )


def is_costly(op: Any) -> bool:
    """Calls a math function (exp, erf, ...): recomputing it in every reader is not free."""
    return any(isinstance(n, Call) for b in op.body for n in walk(b))


def reads_elementwise(consumer: Any, producer: Any) -> bool:
    """Does `consumer` read `producer` only at its own indices (same shape, no broadcast)?"""
    own = tuple(iv.var for iv in consumer.axis)
    reads = [r for r in _reads(consumer) if r.tensor.op is producer]
    return bool(reads) and all(
        len(r.indices) == len(own) and all(a is b for a, b in zip(r.indices, own)) for r in reads
    )


def _row_loops(stage: Any, options: list[tuple[Any, Any]]) -> int:
    """How many leading location `options` are whole axes of their stage that run over
    `stage`'s own leading dimensions (the same extents, in order). Computed at the deepest of
    them, the stage makes one of its rows at a time: a softmax's row max over (1, 6, 197)
    rows at the row, not all of them at the batch loop of extent 1."""
    out = stage.op.output(0)
    count = 0
    for d, (target, iv) in enumerate(options[: len(out.shape)]):
        whole = target is options[0][0] and any(iv is axis for axis in target.op.axis)
        if not whole or not same_extent(iv.dom.extent, out.shape[d]):
            break
        count += 1
    return count


# -- the plan: which rule each stage gets ----------------------------------------------------------


@dataclass
class Plan:
    keys: dict[int, str] = field(default_factory=dict)  # id(op) -> decision key prefix
    inline: set[int] = field(default_factory=set)
    fused_into: dict[int, Any] = field(default_factory=dict)  # id(reduction op) -> consumer op
    fused_consumers: set[int] = field(default_factory=set)


def _plan(s: Any, d: Decisions, gpu: bool = False) -> Plan:
    plan = Plan()
    ops = [st.op for st in s.stages]
    for k, op in enumerate(ops):
        plan.keys[id(op)] = f"{k}.{op.name}"
    readers: dict[int, list[Any]] = {id(op): [] for op in ops}
    for op in ops:
        for t in op.input_tensors:
            if op not in readers[id(t.op)]:
                readers[id(t.op)].append(op)
    outputs = {id(op) for op in s.outputs}
    for op in reversed(ops):  # consumers first
        if not is_injective(op) or id(op) in outputs or not readers[id(op)]:
            continue
        key = plan.keys[id(op)]
        feeds_tiling = any(has_reuse(r) for r in readers[id(op)])
        # NOTE: on GPU every injective stage is inlined: a stage kept at root would be a kernel
        # of its own, writing an intermediate the build cannot yet allocate between kernels
        if not gpu and ((is_costly(op) and len(readers[id(op)]) > 1) or feeds_tiling):
            rows = [extent_of(r.axis[-1]) for r in readers[id(op)] if has_reuse(r) and r.axis]
            hint = {"op": op, "identity": is_identity_copy(op), "reader_row": max(rows, default=0)}
            if d.choice(f"inline:{key}", [True, False], hint):
                plan.inline.add(id(op))
        else:
            plan.inline.add(id(op))

    def effective_readers(op: Any) -> list[Any]:
        out = []
        for r in readers[id(op)]:
            more = effective_readers(r) if id(r) in plan.inline else [r]
            out.extend(x for x in more if x not in out)
        return out

    def elementwise_chain(consumer: Any, producer: Any) -> bool:
        """`consumer` reads `producer` element for element, through inlined stages."""
        for t in {id(t.op): t.op for t in consumer.input_tensors}.values():
            if t is producer:
                if not reads_elementwise(consumer, producer):
                    return False
            elif id(t) in plan.inline and _depends_on(t, producer):
                if not (reads_elementwise(consumer, t) and elementwise_chain(t, producer)):
                    return False
        return True

    for op in ops:
        if not has_reuse(op) or op.num_outputs != 1:
            continue
        users = effective_readers(op)
        if len(users) != 1:
            continue
        user = users[0]
        if (
            is_injective(user)
            and (id(user) in outputs or id(user) not in plan.inline)
            and id(user) not in plan.fused_consumers
            and len(user.axis) == len(op.axis)
            and all(same_extent(a.dom.extent, b.dom.extent) for a, b in zip(user.axis, op.axis))
            and elementwise_chain(user, op)
        ):
            plan.fused_into[id(op)] = user
            plan.fused_consumers.add(id(user))
    return plan


def _reads_along_last_axis(inline: set[int], op: Any, tensor: Any) -> bool:
    """Does `op` read `tensor`, and every read of it, directly or through the stages inlined
    into `op` (ids in `inline`), have a last index that walks `op`'s last axis (through each
    inlined stage's own last axis)?"""
    last = op.axis[-1].var if op.axis else None
    found = False
    for r in _reads(op):
        producer = r.tensor.op
        inlined = (
            producer is not tensor.op
            and isinstance(producer, ComputeOp)
            and id(producer) in inline
            and _depends_on(producer, tensor.op)
        )
        if producer is not tensor.op and not inlined:
            continue
        if not r.indices or not any(n is last for n in walk(r.indices[-1])):
            return False
        if inlined and not _reads_along_last_axis(inline, producer, tensor):
            return False
        found = True
    return found


def _depends_on(op: Any, producer: Any) -> bool:
    stack, seen = [op], set()
    while stack:
        x = stack.pop()
        if x is producer:
            return True
        if id(x) in seen:
            continue
        seen.add(id(x))
        stack.extend(t.op for t in x.input_tensors)
    return False


# -- applying the rules ----------------------------------------------------------------------------


class SketchBuilder:
    """Applies the rules of one target kind to a fresh schedule, drawing from `decisions`."""

    def __init__(self, s: Any, target: Any, decisions: Decisions, size_hints: dict | None = None):
        self.s = s
        self.target = target
        self.d = decisions
        self.size_hints = dict(size_hints or {})
        self.rec = Recorder(s)
        self.gpu = target.kind == "cuda"
        self.plan = _plan(s, decisions, self.gpu)

    def key(self, op: Any) -> str:
        return self.plan.keys[id(op)]

    def lanes(self, stage: Any) -> int:
        return self.target.vector_lanes(stage.op.output(0).dtype)

    def extent(self, iv: Any) -> int:
        """The axis's extent as the decisions size it (`hinted_extent`; 1 for a leaf a split
        made, which has no domain of its own)."""
        return 1 if iv.dom is None else hinted_extent(iv.dom.extent, self.size_hints)

    def run(self) -> list:
        original = list(self.s.stages)
        for stage in reversed(original):
            op = stage.op
            if isinstance(op, PlaceholderOp) or id(op) in self.plan.fused_consumers:
                continue
            if id(op) in self.plan.inline:
                self.rec.compute_inline(stage)
            elif has_reuse(op) and op.num_outputs == 1:
                self.multi_level_tiling(stage)
            elif isinstance(op, ComputeOp) and op.is_reduction:
                self.simple_reduction(stage)
            elif isinstance(op, ComputeOp):
                self.elementwise(stage)
        return self.rec.steps

    # -- placement ------------------------------------------------------------------------------
    def is_placed(self, stage: Any) -> bool:
        return stage.is_output or not self.s.consumers_of(stage)

    def locate(self, stages: list[Any], key: str) -> bool:
        """Choose where `stages` (a stage and the partial stages feeding it) are computed: at
        root, or inside a loop of the stage their consumers live in. True if attached."""
        main = stages[-1]
        if self.is_placed(main) or self.gpu:  # on GPU every stage not inlined is a kernel
            return False
        options = self.location_options(main)
        hint = {
            "options": options,
            "reduction": main.op.is_reduction,
            "feeds_tiling": any(has_reuse(c.op) for c in self.s.consumers_of(main)),
            "rows": _row_loops(main, options),
        }
        choice = self.d.choice(f"loc:{key}", list(range(-1, len(options))), hint)
        if choice < 0:
            return False
        target, axis = options[choice]
        for st in reversed(stages):  # the final stage first: then the partials' reader is inside
            self.rec.compute_at(st, target, axis)
        return True

    def location_options(self, stage: Any) -> list[tuple[Any, Any]]:
        """(stage, loop) pairs `stage` may be computed at: the loops of the root stage holding
        all its consumers, outside where any of them is attached, and not vectorized or bound
        to threads; and likewise the loops of a single consumer itself."""
        consumers = self.s.consumers_of(stage)
        roots = {id(self._root_of(c)): self._root_of(c) for c in consumers}
        if len(roots) != 1:
            return []
        targets = [next(iter(roots.values()))]
        if len(consumers) == 1 and consumers[0] is not targets[0]:
            targets.append(consumers[0])
        options = []
        for target in targets:
            limit = len(target.leaf_iter_vars)
            for c in consumers:
                child = self._child_of(c, target)
                if child is not None and child is not target and child.attach_ivar is not None:
                    limit = min(limit, target.leaf_iter_vars.index(child.attach_ivar) + 1)
            for iv in target.leaf_iter_vars[:limit]:
                attr = target.iter_attrs.get(iv)
                kind = attr.kind.value if attr is not None else "serial"
                if kind in ("vectorized", "thread_binding") or iv.kind is IterKind.REDUCE:
                    break
                options.append((target, iv))
        return options

    @staticmethod
    def _root_of(stage: Any) -> Any:
        while stage.attach_type == "scope":
            stage = stage.attach_stage
        return stage

    @staticmethod
    def _child_of(stage: Any, target: Any) -> Any:
        """`stage` or its ancestor attached directly inside `target` (None if not inside it)."""
        while stage is not None and stage is not target:
            if stage.attach_stage is target:
                return stage
            stage = stage.attach_stage
        return stage

    # -- rules ----------------------------------------------------------------------------------
    def elementwise(self, stage: Any) -> None:
        key = self.key(stage.op)
        attached = self.locate([stage], key)
        axes = list(stage.leaf_iter_vars)
        if self.gpu:
            if not attached:
                self.gpu_elementwise(stage, key, axes)
            return
        lanes = self.lanes(stage)
        extent = self.extent(axes[-1])
        hint = {
            "role": "vector",
            "lanes": lanes,
            "bytes": max(1, dt.bits_of(stage.op.output(0).dtype) // 8),
            "streams": bool(self.row_inputs(stage)),
            "lane_math": has_lane_math(stage.op),
            "symbolic": not is_static(axes[-1]),  # `extent` is a hint: no divisor of it
        }
        ((vec,),) = self.d.tile(f"vec:{key}", [extent], 2, hint)
        if vec > 1:
            outer, inner = self.rec.split(stage, axes[-1], vec)
            if hint["symbolic"] and vec > lanes and vec % lanes == 0:
                # a run-time row's last step is masked: in vectors of the target's width, each
                # masked on its own, those past the row skipped whole (one masked step of 64
                # lanes was a wide masked load LLVM took apart lane by lane). Softmax of 2364
                # rows of 197 under size_vars, 1 thread: 226 -> 218 us (constant rows: 195)
                pieces, inner = self.rec.split(stage, inner, lanes)
                self.rec.annotate("unroll", stage, pieces)
            self.rec.annotate("vectorize", stage, inner)
            # (of a run-time row, the next row is as far ahead as at the hint: a prefetch
            # never faults, a wrong distance only fetches lines that are not read)
            row_bytes = extent * hint["bytes"]
            self.prefetch_next_row(stage, key, outer, -(-extent // vec), row_bytes)
        if not attached:
            self.parallel_outer(stage, key, axes[:-1] if len(axes) > 1 else [])

    def prefetch_next_row(
        self, stage: Any, key: str, loop: Any, steps: int, row_bytes: int | None = None
    ) -> None:
        """Fetch the inputs this stage walks row by row one row ahead (a decision): the next
        row's reads then overlap this row's arithmetic (the ops softmax does it by hand)."""
        inputs = self.row_inputs(stage)
        # and the output rows this stage's values are written to, element for element, fetched
        # writable as they are computed: the stores then find their lines in cache instead of
        # stalling on each read-for-ownership (as ops/softmax; 4096², AVX2: 0.77x -> ~0.9x it)
        outputs = [
            c
            for c in self.s.consumers_of(stage)
            if c.is_output and c.attach_type == "root" and reads_elementwise(c.op, stage.op)
        ]
        hint = {"row": steps, "row_bytes": row_bytes}
        if inputs and self.d.choice(f"prefetch:{key}", [False, True], hint):
            for home in inputs:
                self.rec.prefetch(stage, home, loop, steps)
            for out in outputs:
                self.rec.prefetch(stage, out, loop, 0)

    def row_inputs(self, stage: Any) -> list[Any]:
        """The stages of the inputs (placeholders of 2 or more dimensions) `stage` reads and
        walks row by row: every read of them, directly or through stages inlined into it, runs
        along its last axis.

        NOTE: not the inputs of a stage inlined into this one (a residual add's a and r): with
        two streams, prefetching them cost more than it brought (add + layer norm 4096²,
        AVX-512 6.59 -> 6.84 ms, AVX2 code 6.67 -> 7.29; with one stream, layer norm, 4% gained).
        """
        if len(stage.op.axis) < 2:
            return []
        direct = {id(t.op): t for t in stage.op.input_tensors}
        return [
            self.s[t]
            for t in direct.values()
            if isinstance(self.s[t].op, PlaceholderOp)
            and len(t.shape) >= 2
            and _reads_along_last_axis(self.plan.inline, stage.op, t)
        ]

    def parallel_outer(self, stage: Any, key: str, axes: list[Any]) -> None:
        """Fuse the leading `n` of `axes` (a decision) and run that loop in parallel."""
        if not axes:
            return
        extents = [self.extent(iv) for iv in axes]
        n = self.d.choice(f"par:{key}", list(range(len(axes) + 1)), {"extents": extents})
        if n > 0:
            fused = self.rec.fuse(stage, axes[:n])
            self.rec.annotate("parallel", stage, fused)

    def simple_reduction(self, stage: Any) -> None:
        """A reduction without reuse: vector partials via rfactor (a decision), then placed."""
        key = self.key(stage.op)
        op = stage.op
        stages = [stage]
        red = op.reduce_axis[-1]
        lanes = self.lanes(stage)
        if self.gpu:
            self.gpu_reduction(stage, key)
            return
        if reduces_columns(op, lanes) and self.d.choice(f"cols:{key}", [False, True], {}):
            self.column_reduction(stage, key, lanes)
            return
        if slides_windows(op):
            self.window_reduction(stage, key, lanes)
            return
        extent = self.extent(red)  # (of a run-time row: its lanes past the row masked off)
        width = self.d.choice(
            f"rf:{key}", [0, lanes, 2 * lanes, 4 * lanes], {"extent": extent, "lanes": lanes}
        )
        if width and extent >= width and op.num_outputs == 1:
            _, ki = self.rec.split(stage, red, width)
            partial = self.rec.rfactor(stage, ki, len(op.axis))
            *data, lane = partial.leaf_iter_vars[: len(partial.op.axis)]
            reduce_leaves = partial.leaf_iter_vars[len(partial.op.axis) :]
            acc, vec = self.rec.split(partial, lane, lanes)
            self.rec.reorder(partial, [*data, *reduce_leaves, acc, vec])
            if width > lanes:
                self.rec.annotate("unroll", partial, acc)
            self.rec.annotate("vectorize", partial, vec)
            stages = [partial, stage]
        if not self.locate(stages, key) and len(stages) == 2:
            final = stages[1]
            spatial = [iv for iv in final.leaf_iter_vars if iv.kind is not IterKind.REDUCE]
            if spatial:
                self.rec.compute_at(stages[0], final, spatial[-1])
                self.parallel_outer(final, key, spatial[:1])
        elif len(stages) == 1 and self.is_placed(stage):
            spatial = [iv for iv in stage.leaf_iter_vars if iv.kind is not IterKind.REDUCE]
            self.parallel_outer(stage, key, spatial[:1])

    def column_reduction(self, stage: Any, key: str, lanes: int) -> None:
        """A reduction across rows (`out[j] = sum(x[k, j])`): a vector of outputs at a time, the
        reduction loops outside its lanes, so each step loads a contiguous vector (vector
        partials along k would gather a column: sum over dim 0 of 512 x 384 ran 6x slower).
        Up to 8 vectors of outputs a step, unrolled: one vector's sum is a chain of dependent
        adds as long as the reduction, several chains keep the adder busy (the embedding
        classifier's mean over 128 rows of 256, 1 thread: 17.2 -> 10.3 us)."""
        n = len(stage.op.axis)
        *data, last = stage.leaf_iter_vars[:n]
        reduce_leaves = stage.leaf_iter_vars[n:]
        vectors = extent_of(last) // lanes
        block = max(k for k in range(1, 9) if vectors % k == 0)
        outer, inner = self.rec.split(stage, last, block * lanes)
        chains, vector = self.rec.split(stage, inner, lanes)
        self.rec.reorder(stage, [*data, outer, *reduce_leaves, chains, vector])
        if block > 1:
            self.rec.annotate("unroll", stage, chains)
        self.rec.annotate("vectorize", stage, vector)
        if not self.locate([stage], key) and self.is_placed(stage):
            self.parallel_outer(stage, key, [*data, outer][:1])

    def window_reduction(self, stage: Any, key: str, lanes: int) -> None:
        """A window reduction (pools): a vector of outputs along the last axis at a time (its
        width a decision), the window loops outside the lanes and unrolled, so each window
        position is one vector load (strided by the window's stride) and one vector combine.
        Scalar, a 3 x 3 max pool ran one NaN-propagating max after another (ResNet-18's stem,
        1 thread: 1.1 ms AVX-512, 0.5-2.0 ms AVX2 code, by data)."""
        n = len(stage.op.axis)
        *data, last = stage.leaf_iter_vars[:n]
        reduce_leaves = stage.leaf_iter_vars[n:]
        widths = [w for w in (lanes, lanes // 2, lanes // 4) if w >= 2]
        width = self.d.choice(f"win:{key}", [0, *widths], {"extent": extent_of(last)})
        if width:
            outer, vector = self.rec.split(stage, last, width)
            self.rec.reorder(stage, [*data, outer, *reduce_leaves, vector])
            self.rec.annotate("vectorize", stage, vector)
            # unrolled window positions fold their bounds clamps (`max(j * 2 + rx - 1, 0)`
            # holds no clamp for rx >= 1), leaving plain strided vectors
            extents = [extent_of(iv) for iv in reduce_leaves]
            if reduce_leaves and extents[-1] <= WINDOW_UNROLL:
                self.rec.annotate("unroll", stage, reduce_leaves[-1])
                if len(extents) > 1 and extents[-1] * extents[-2] <= WINDOW_UNROLL:
                    self.rec.annotate("unroll", stage, reduce_leaves[-2])
            data = [*data, outer]
        if not self.locate([stage], key) and self.is_placed(stage):
            self.parallel_outer(stage, key, data[:1])

    def multi_level_tiling(self, stage: Any) -> None:
        from tensorforge.tune.auto.sketch_tiling import multi_level_tiling

        multi_level_tiling(self, stage)

    # -- GPU rules (sketch_gpu.py) ----------------------------------------------------------------
    def gpu_elementwise(self, stage: Any, key: str, axes: list[Any]) -> None:
        from tensorforge.tune.auto.sketch_gpu import gpu_elementwise

        gpu_elementwise(self, stage, key, axes)

    def gpu_reduction(self, stage: Any, key: str) -> None:
        from tensorforge.tune.auto.sketch_gpu import gpu_reduction

        gpu_reduction(self, stage, key)

    def gpu_tiling(self, stage: Any, key: str) -> None:
        from tensorforge.tune.auto.sketch_gpu import gpu_tiling

        gpu_tiling(self, stage, key)


def generate(s: Any, target: Any, decisions: Decisions, size_hints: dict | None = None) -> list:
    """Apply the sketch rules to the fresh schedule `s`; returns the steps (s is scheduled).
    `size_hints` (te.var -> int) size the decisions on extents known only at run time; the
    steps stay correct for every value (their splits leave masked or peeled tails)."""
    return SketchBuilder(s, target, decisions, size_hints).run()
