"""Stage: the loop nest of one operation and the primitives that reshape it (API.md §2)."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from tensorforge.errors import ScheduleError
from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.arith.index_dtype import INT32_MAX, max_value
from tensorforge.ir.stmt import LoopKind
from tensorforge.schedule.relations import TAIL_MODES, Fuse, IterAttr, Relation, Split
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Expr, TensorRead, Var, as_expr
from tensorforge.te.tensor import ComputeOp, IterKind, IterVar, Operation, PlaceholderOp, Tensor
from tensorforge.te.visit import walk

if TYPE_CHECKING:
    from tensorforge.schedule.schedule import Schedule

SCOPES = ("global", "shared", "local", "warp")  # warp: tensor-core fragments (CUDA)
# NOTE: the widest loop `vectorize` accepts. One vector instruction holds at most 64 bytes (16
# float32 lanes on AVX-512); past a few hundred lanes LLVM only slows down (2**18 lanes took
# 132 s to build) and at 2**20 it aborts the process, so wider loops are refused, not tried.
MAX_VECTOR_LANES = 1024


class Stage:
    """How one operation is computed: its loops (leaf_iter_vars), where, and in which scope."""

    def __init__(self, op: Operation, schedule: Schedule):
        self.op = op
        self.schedule = schedule
        self.is_output = False
        root = list(op.axis) + list(op.reduce_axis) if isinstance(op, ComputeOp) else []
        self.all_iter_vars: list[IterVar] = list(root)
        self.leaf_iter_vars: list[IterVar] = list(root)
        self.relations: list[Relation] = []
        self.iter_attrs: dict[IterVar, IterAttr] = {}
        self.attach_type = "root"  # "root" | "scope" | "inline"
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.scope = "global"
        self.scope_explicit = False  # else inferred from the GPU loops around the attach point
        self.storage_align_: dict[int, tuple[int, int]] = {}  # dimension -> (factor, offset)
        self.double_buffered = False
        self.buffer_stages = 2  # copies of a double_buffer()ed tile (an N-stage pipeline)
        self.buffer_sync = "barrier"  # how its pipeline synchronizes: "barrier" or "mbarrier"
        self.prefetches: list[tuple[Tensor, IterVar, int]] = []  # (tensor, loop, iterations ahead)
        # (consumer stage whose output lines are fetched writable, loop, iterations ahead)
        self.write_prefetches: list[tuple[Stage, IterVar, int]] = []

    # -- inspection -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self) -> str:
        return f"Stage({self.name})"

    def attr(self, iv: IterVar) -> IterAttr:
        return self.iter_attrs.setdefault(iv, IterAttr())

    # -- checks ---------------------------------------------------------------------------------
    def _check_compute(self, primitive: str) -> None:
        if isinstance(self.op, PlaceholderOp):
            raise ScheduleError(
                f"{primitive}: '{self.name}' is a placeholder (an input); it has no loops to schedule"
            )

    def _leaf_names(self) -> str:
        return ", ".join(v.name for v in self.leaf_iter_vars) or "none"

    def _check_leaf(self, primitive: str, axis: Any) -> IterVar:
        self._check_compute(primitive)
        if not isinstance(axis, IterVar):
            raise ScheduleError(
                f"{primitive}: expected an axis (IterVar) of stage '{self.name}', got {axis!r}"
            )
        if axis not in self.leaf_iter_vars:
            raise ScheduleError(
                f"{primitive}: '{axis.name}' is not a leaf axis of stage '{self.name}' "
                f"{self._why_not_leaf(axis)}; leaf axes are: {self._leaf_names()}"
            )
        return axis

    def _why_not_leaf(self, axis: IterVar) -> str:
        """Why `axis` is not a leaf here, naming where it does belong, and saying so when a leaf
        merely has the same name (two different axes called 'i', say one of a replaced op)."""
        if axis in self.all_iter_vars:
            return "(it was already split or fused)"
        owner = next((s for s in self.schedule.stages if axis in s.all_iter_vars), None)
        where = (
            f"an axis of stage '{owner.name}'"
            if owner is not None
            else "an axis of no stage of this schedule (of an operation that cache_write or "
            "rfactor replaced? take the axes from s[T].op.axis)"
        )
        same_name = any(v.name == axis.name for v in self.leaf_iter_vars)
        differs = f", a different object from the leaf '{axis.name}'" if same_name else ""
        return f"(it belongs to another stage): this '{axis.name}' is {where}{differs}"

    def _may_pass_int32(self, *axes: IterVar) -> bool:
        """Whether the product of these axes' extents (bounded by the axes' domains, each
        symbolic size up to its dtype's maximum) can pass int32."""
        extents: dict[IterVar, Expr] = {
            iv: iv.dom.extent for iv in self.all_iter_vars if iv.dom is not None
        }
        for rel in self.relations:
            if all(src in extents for src in rel.sources):
                extents.update(rel.derived_extents(extents))
        bound = 1.0
        for a in axes:
            if a not in extents:
                return True
            bound *= max(0.0, max_value(extents[a]))
        return bound > INT32_MAX

    def _new_iv(self, name: str, like: IterVar, dtype: str | None = None) -> IterVar:
        kind = like.kind if like.kind is not IterKind.THREAD else IterKind.DATA_PAR
        iv = IterVar(Var(name, dtype or like.var.dtype), None, kind)
        self.all_iter_vars.append(iv)
        return iv

    # -- loop structure -------------------------------------------------------------------------
    def split(self, axis: IterVar, factor: Any = None, nparts: Any = None, tail: str = "auto"):
        """Split `axis` into (outer, inner) by `factor` (inner extent) or `nparts` (outer extent)."""
        self._check_leaf("split", axis)
        if (factor is None) == (nparts is None):
            raise ScheduleError(
                f"split of '{axis.name}' in stage '{self.name}': give exactly one of factor= or nparts="
            )
        if tail not in TAIL_MODES:
            raise ScheduleError(
                f"split of '{axis.name}' in stage '{self.name}': tail={tail!r}; "
                f"expected one of {', '.join(TAIL_MODES)}"
            )
        which = "factor" if factor is not None else "nparts"
        value = factor if factor is not None else nparts
        amount = as_expr(value) if isinstance(value, (numbers.Integral, Expr)) else None
        if amount is None or not dt.is_int(amount.dtype) or isinstance(value, bool):
            raise ScheduleError(
                f"split of '{axis.name}' in stage '{self.name}': {which} must be an integer or an "
                f"integer expression, got {value!r}"
            )
        if isinstance(amount, Const) and amount.value < 1:
            raise ScheduleError(
                f"split of '{axis.name}' in stage '{self.name}': {which} must be >= 1, got {amount.value}"
            )
        outer = self._new_iv(f"{axis.name}.outer", axis)
        inner = self._new_iv(f"{axis.name}.inner", axis)
        self.relations.append(
            Split(
                axis,
                outer,
                inner,
                amount if factor is not None else None,
                amount if nparts is not None else None,
                tail,
            )
        )
        pos = self.leaf_iter_vars.index(axis)
        self.leaf_iter_vars[pos : pos + 1] = [outer, inner]
        return outer, inner

    def tile(
        self, x_parent: IterVar, y_parent: IterVar, x_factor: Any, y_factor: Any, tail: str = "auto"
    ):
        """Split two axes and order them (x_outer, y_outer, x_inner, y_inner)."""
        xo, xi = self.split(x_parent, factor=x_factor, tail=tail)
        yo, yi = self.split(y_parent, factor=y_factor, tail=tail)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *axes: IterVar) -> IterVar:
        """Fuse adjacent leaf axes (outermost first) into one."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        if not axes:
            raise ScheduleError(f"fuse in stage '{self.name}': give at least one axis")
        for a in axes:
            self._check_leaf("fuse", a)
        positions = [self.leaf_iter_vars.index(a) for a in axes]
        if positions != list(range(positions[0], positions[0] + len(axes))):
            names = ", ".join(a.name for a in axes)
            raise ScheduleError(
                f"fuse in stage '{self.name}': axes ({names}) must be adjacent and ordered outer to "
                f"inner in the current loop order ({self._leaf_names()})"
            )
        kinds = {a.kind for a in axes}
        if len(kinds) > 1:
            raise ScheduleError(
                f"fuse in stage '{self.name}': cannot fuse a reduction axis with a spatial axis "
                f"({', '.join(a.name for a in axes)})"
            )
        fused = axes[0]
        for inner in axes[1:]:
            wide = self._may_pass_int32(fused, inner)  # (65536, 65536) fused: an int64 loop
            new = self._new_iv(f"{fused.name}.{inner.name}.fused", fused, "int64" if wide else None)
            self.relations.append(Fuse(fused, inner, new))
            pos = self.leaf_iter_vars.index(fused)
            self.leaf_iter_vars[pos : pos + 2] = [new]
            fused = new
        return fused

    def reorder(self, *axes: IterVar) -> None:
        """Put the named leaf axes in this order, in the positions they occupy together."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        seen: list[IterVar] = []
        for a in axes:
            self._check_leaf("reorder", a)
            if a in seen:
                raise ScheduleError(
                    f"reorder in stage '{self.name}': axis '{a.name}' appears twice"
                )
            seen.append(a)
        positions = sorted(self.leaf_iter_vars.index(a) for a in axes)
        for pos, a in zip(positions, axes):
            self.leaf_iter_vars[pos] = a

    # -- loop annotations -----------------------------------------------------------------------
    def _annotate(self, primitive: str, axis: IterVar, kind: LoopKind) -> None:
        self._check_leaf(primitive, axis)
        current = self.attr(axis).kind
        if current not in (LoopKind.SERIAL, kind):
            raise ScheduleError(
                f"{primitive}: axis '{axis.name}' of stage '{self.name}' is already {current.value}"
            )
        self.attr(axis).kind = kind

    def unroll(self, axis: IterVar) -> None:
        self._annotate("unroll", axis, LoopKind.UNROLLED)

    def vectorize(self, axis: IterVar) -> None:
        """Run loop `axis` as vector instructions: a spatial axis of constant extent of at most
        MAX_VECTOR_LANES (1024) lanes; split a wider one and vectorize the inner part."""
        self._check_leaf("vectorize", axis)
        if axis.kind is IterKind.REDUCE:
            raise ScheduleError(
                f"vectorize: '{axis.name}' of stage '{self.name}' is a reduction axis; vectorize a "
                f"spatial axis (or rfactor the reduction first)"
            )
        if self.attach_type == "root":  # else its extent is the region bound inference finds
            check_vector_lanes(self, axis, self._extent_over_domain(axis))
        self._annotate("vectorize", axis, LoopKind.VECTORIZED)

    def _extent_over_domain(self, axis: IterVar) -> Expr:
        """The extent of loop `axis` when the stage computes its whole domain."""
        root = list(self.op.axis) + list(self.op.reduce_axis)
        extents: dict[IterVar, Expr] = {iv: iv.dom.extent for iv in root}
        for rel in self.relations:
            extents.update(rel.derived_extents(extents))
        return simplify_expr(extents[axis])

    def parallel(self, axis: IterVar) -> None:
        self._check_leaf("parallel", axis)
        if axis.kind is IterKind.REDUCE:
            raise ScheduleError(
                f"parallel: '{axis.name}' of stage '{self.name}' is a reduction axis; iterations "
                f"would race on the output (rfactor the reduction first)"
            )
        self._annotate("parallel", axis, LoopKind.PARALLEL)

    def bind(self, axis: IterVar, thread: IterVar) -> None:
        """Map loop `axis` to the GPU index `thread` (a te.thread_axis)."""
        self._check_leaf("bind", axis)
        if not isinstance(thread, IterVar) or thread.kind is not IterKind.THREAD:
            raise ScheduleError(
                f"bind: '{axis.name}' of stage '{self.name}' must be bound to a te.thread_axis, got {thread!r}"
            )
        for other, attr in self.iter_attrs.items():
            if (
                attr.thread is not None
                and attr.thread.thread_tag == thread.thread_tag != "vthread"  # any number of those
                and other is not axis
            ):
                raise ScheduleError(
                    f"bind: thread tag '{thread.thread_tag}' is already bound to axis '{other.name}' "
                    f"of stage '{self.name}'; bind each tag once per stage"
                )
        if axis.kind is IterKind.REDUCE and not thread.thread_tag.startswith("threadIdx"):
            raise ScheduleError(
                f"bind: reduction axis '{axis.name}' of stage '{self.name}' can only be bound to a "
                f"threadIdx axis (a cross-thread reduction), not {thread.thread_tag}"
            )
        self._annotate("bind", axis, LoopKind.THREAD_BINDING)
        self.attr(axis).thread = thread

    def pragma(self, axis: IterVar, name: str, value: Any = None) -> None:
        self._check_leaf("pragma", axis)
        known = (
            "unroll_explicit",
            "auto_unroll_max_step",
            "parallel_launch_point",
            "vectorize",
            "unroll",
            "async_copy",  # CUDA: fill a double-buffered shared tile with cp.async (sm_80+)
            "launch_min_blocks",  # CUDA: __launch_bounds__(threads, value) on the kernel
            "cluster_dims",  # CUDA sm_90: blocks run in clusters of `value` along x
            "block_lanes",  # CUDA: threadIdx.x extent `value` where no loop binds it (warps)
        )
        if name not in known:
            raise ScheduleError(
                f"pragma: unknown pragma {name!r} on '{axis.name}' of stage '{self.name}'; "
                f"known: {', '.join(known)}"
            )
        self.attr(axis).pragmas.append((name, value))

    def tensorize(self, axis: IterVar, intrin: Any) -> None:
        """Replace the loop nest under `axis` by a te.decl_tensor_intrin's calls."""
        from tensorforge.schedule.tensorize import tensorize

        tensorize(self, axis, intrin)

    # -- placement ------------------------------------------------------------------------------
    def compute_at(self, parent: Stage, axis: IterVar) -> None:
        """Compute this stage inside loop `axis` of `parent`, over the region `parent` needs there."""
        self._check_compute("compute_at")
        if not isinstance(parent, Stage):
            raise ScheduleError(
                f"compute_at of '{self.name}': parent must be a Stage (s[T]), got {parent!r}"
            )
        if parent is self:
            raise ScheduleError(f"compute_at: stage '{self.name}' cannot be computed at itself")
        if axis not in parent.leaf_iter_vars:
            raise ScheduleError(
                f"compute_at of '{self.name}': '{getattr(axis, 'name', axis)}' is not a leaf axis of "
                f"stage '{parent.name}'; its leaf axes are: {parent._leaf_names()}"
            )
        # whether `parent` consumes this stage through the stages computed inside it is judged
        # at lowering, on the finished schedule; a stage that does not depend on this one at all
        # never will
        if not self.schedule.depends_on(parent, self):
            consumers = [c.name for c in self.schedule.consumers_of(self)]
            raise ScheduleError(
                f"compute_at: stage '{parent.name}' does not consume '{self.name}' (directly, or "
                f"through stages computed inside it); '{self.name}' is read by: "
                f"{', '.join(consumers) or 'nothing'}"
            )
        if self.is_output:
            raise ScheduleError(
                f"compute_at: '{self.name}' is an output of the schedule; it must stay at root"
            )
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, axis

    def compute_inline(self) -> None:
        """Substitute this stage's expression into every consumer."""
        self._check_compute("compute_inline")
        if self.is_output:
            raise ScheduleError(
                f"compute_inline: '{self.name}' is an output of the schedule and cannot be inlined"
            )
        if self.op.is_reduction:
            raise ScheduleError(
                f"compute_inline: '{self.name}' is a reduction; only element-wise stages can be inlined"
            )
        if self.op.num_outputs > 1:
            raise ScheduleError(
                f"compute_inline: '{self.name}' has several outputs and cannot be inlined"
            )
        attached = [s.name for s in self.schedule.stages if s.attach_stage is self]
        if attached:
            raise ScheduleError(
                f"compute_inline: stages {', '.join(attached)} are computed at '{self.name}'; "
                f"move them first"
            )
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None

    def compute_root(self) -> None:
        self._check_compute("compute_root")
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None

    # -- storage --------------------------------------------------------------------------------
    def set_scope(self, scope: str) -> None:
        if scope not in SCOPES:
            raise ScheduleError(
                f"set_scope of '{self.name}': unknown scope {scope!r}; expected one of {', '.join(SCOPES)}"
            )
        if self.is_output and scope != "global":
            raise ScheduleError(
                f"set_scope: '{self.name}' is an output; outputs live in global memory"
            )
        self.scope = scope
        self.scope_explicit = True

    def storage_align(self, axis: IterVar, factor: int, offset: int) -> None:
        """Pad the row stride of dimension `axis` so stride % factor == offset."""
        self._check_compute("storage_align")
        root = list(self.op.axis)
        if axis not in root:
            raise ScheduleError(
                f"storage_align: '{getattr(axis, 'name', axis)}' is not a data axis of stage "
                f"'{self.name}' ({', '.join(a.name for a in root)})"
            )
        if int(factor) < 1 or not 0 <= int(offset) < int(factor):
            raise ScheduleError(
                f"storage_align on '{self.name}': need factor >= 1 and 0 <= offset < factor"
            )
        self.storage_align_[root.index(axis)] = (int(factor), int(offset))

    def double_buffer(self, stages: int = 2, sync: str = "barrier") -> None:
        """Keep `stages` copies of this stage's tile where a serial loop refills it: the fills
        of the next `stages - 1` iterations run ahead of the compute (on the GPU as `cp.async`
        copies where the fill is a plain copy of global memory, sm_80+).

        sync="barrier": one block-wide barrier a step. sync="mbarrier" (CUDA sm_80+): each
        copy of the tile has a "full" and an "empty" mbarrier in shared memory instead; a warp
        waits only for the copies it reads to land and for every warp to be done with a copy
        before refilling it, so warps drift apart instead of all stalling at every step.
        sync="mbarrier_lag" (3+ stages): the same, but a step's compute still reads its copy
        when it returns (wgmma keeps one group of multiplies in flight): each warp releases a
        copy one step later, after the next step's compute has waited for the last one."""
        self._check_compute("double_buffer")
        if isinstance(stages, bool) or not isinstance(stages, int) or not 2 <= stages <= 8:
            raise ScheduleError(
                f"double_buffer on '{self.name}': stages must be an int from 2 to 8, got {stages!r}"
            )
        if sync not in ("barrier", "mbarrier", "mbarrier_lag"):
            raise ScheduleError(
                f"double_buffer on '{self.name}': sync must be 'barrier', 'mbarrier' or "
                f"'mbarrier_lag', got {sync!r}"
            )
        if sync == "mbarrier_lag" and stages < 3:
            raise ScheduleError(
                f"double_buffer on '{self.name}': sync='mbarrier_lag' releases a copy a step late, "
                f"so it needs 3+ stages (the refill of 2 would wait for the step after it)"
            )
        self.double_buffered = True
        self.buffer_stages = stages
        self.buffer_sync = sync

    def prefetch(self, tensor: Tensor, axis: IterVar, offset: Any) -> None:
        """At the top of each iteration of loop `axis`, prefetch the part of `tensor` that this
        stage reads `offset` iterations later (a CPU cache hint: it overlaps memory traffic with
        computation; it never faults, and GPU code ignores it). Only tensors with a home of their
        own are fetched: inputs and stages computed at root, not those computed inside another
        stage's loops or inlined.

        `tensor` may also be the output of a root stage that reads this one element for element
        (`y[i, j] = f(this[i, j], ...)`): then the lines `y` will be written at the positions
        this stage computes `offset` (>= 0) iterations later are fetched writable (prefetchw), so
        those stores find them in cache. Softmax uses it: its output rows are fetched while the
        exps are computed, not when the stores of the final scaling stall on them.
        """
        self._check_compute("prefetch")
        self._check_leaf("prefetch", axis)
        reads = self.reads()
        is_read = isinstance(tensor, Tensor) and tensor.op in [t.op for t in reads]
        consumer = (
            None
            if is_read or not isinstance(tensor, Tensor)
            else self._elementwise_consumer(tensor)
        )
        if not is_read and consumer is None:
            raise ScheduleError(
                f"prefetch in stage '{self.name}': {getattr(tensor, 'name', tensor)!r} is neither a "
                f"tensor this stage reads ({', '.join(t.name for t in reads) or 'nothing'}) nor the "
                f"output of a stage that reads '{self.name}' element for element"
            )
        least = 0 if consumer is not None else 1
        if isinstance(offset, bool) or not isinstance(offset, numbers.Integral) or offset < least:
            raise ScheduleError(
                f"prefetch of '{tensor.name}' at '{axis.name}' in stage '{self.name}': offset must "
                f"be {'a non-negative' if least == 0 else 'a positive'} number of iterations, "
                f"got {offset!r}"
            )
        if consumer is not None:
            self.write_prefetches.append((consumer, axis, int(offset)))
        else:
            self.prefetches.append((tensor, axis, int(offset)))

    def _elementwise_consumer(self, tensor: Tensor) -> Stage | None:
        """The stage computing `tensor`, if it reads this stage only at its own indices."""
        if tensor.op not in self.schedule or not isinstance(tensor.op, ComputeOp):
            return None
        consumer = self.schedule[tensor.op]
        own = tuple(iv.var for iv in consumer.op.axis)
        reads = [
            n
            for e in consumer.op.body
            for n in walk(e)
            if isinstance(n, TensorRead) and n.tensor.op is self.op
        ]
        at_own = lambda r: (
            len(r.indices) == len(own) and all(a is b for a, b in zip(r.indices, own))
        )  # noqa: E731
        if not reads or not all(at_own(r) for r in reads):
            return None
        return consumer

    def reads(self) -> list[Tensor]:
        """The tensors this stage reads, looking through the producers inlined into it (and also
        naming those, for a prefetch given before the inlining)."""
        reads, seen, pending = [], set(), list(self.op.input_tensors)
        while pending:
            t = pending.pop(0)
            if t.op in seen:
                continue
            seen.add(t.op)
            reads.append(t)
            if t.op in self.schedule and self.schedule[t.op].attach_type == "inline":
                pending += t.op.input_tensors
        return reads


def check_vector_lanes(stage: Stage, axis: IterVar, extent: Expr) -> None:
    """A vectorized loop of a constant extent past MAX_VECTOR_LANES is refused."""
    if isinstance(extent, Const) and extent.value > MAX_VECTOR_LANES:
        raise ScheduleError(
            f"vectorize: axis '{axis.name}' of stage '{stage.name}' has {extent.value} lanes; at "
            f"most {MAX_VECTOR_LANES} are supported (split it, e.g. factor=16, and vectorize the "
            f"inner axis)"
        )


def as_stage_key(x: Any) -> Operation:
    if isinstance(x, Tensor):
        return x.op
    if isinstance(x, Operation):
        return x
    raise ScheduleError(f"schedule: expected a Tensor or Operation, got {x!r}")
