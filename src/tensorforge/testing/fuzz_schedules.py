"""Draw a random *legal* schedule for a fuzz computation, as statements on `s`.

The schedule is built on a live `Schedule` so each choice sees the current stages and leaf axes,
and recorded as source lines (`s[C].split(axis(s[C], "i"), factor=4, tail="peel")`) so a case is
plain data that replays, shrinks and prints. Axes are named, not positional, so dropping one
step leaves the others meaningful. Three phases, as a user writes a schedule:

1. structure: split / tile / fuse / reorder any stage, cache_read, cache_write, rfactor;
2. placement, consumers first: compute_root, compute_inline (element-wise stages) or
   compute_at a leaf of any stage that (directly, or through stages computed inside it)
   contains every consumer;
3. annotations: unroll, parallel (spatial leaves), vectorize (spatial leaves whose extent,
   from bound inference, is a constant of at most 64).

A primitive that raises ScheduleError at the call is a documented misuse: that step is dropped.
"""

from __future__ import annotations

from typing import Any

from tensorforge.errors import ScheduleError
from tensorforge.schedule.schedule import Schedule
from tensorforge.schedule.stage import Stage
from tensorforge.te.expr import Const
from tensorforge.te.tensor import ComputeOp, IterKind, IterVar, Tensor
from tensorforge.testing.fuzz_choice import Chooser

# Compiler bugs the fuzzer found that are not fixed yet (each has an xfail regression test):
# cases that would hit them are not drawn unless asked for (`known_bugs=True`, `--known-bugs`),
# so a run keeps looking for new ones.
KNOWN_BUGS: dict[str, str] = {}
# Found and fixed since (regression tests in tests/testing/test_fuzz.py): te.if_then_else loading
# both arms (conv2d padding read out of bounds), rfactor after a spatial split (KeyError), peeled
# tails of nparts-split or fused inner axes (elements left unwritten), wide masked loads whose
# mask was not folded (SIGSEGV), masked loads/stores wider than a register (LLVM's x86 lowering
# read whole false pieces: now split into register-sized pieces in codegen), llvm.maxnum
# reductions (an -O3 miscompile and a loop-vectorizer assertion; float max/min are now
# llvm.maximum/minimum, since a written-out compare + select made -O3 loop forever), compute_at
# under a fuse or nparts split of a symbolic extent (the region now falls back to the whole
# dimension), a stage attached under a fused axis of a peeled split (now guarded), a clamped
# region that started before the domain (it now starts inside).

FACTORS = (2, 4, 3, 8, 1, 5, 7, 16, 32, 6, 64)
TAILS = ("auto", "guard", "peel")
STRUCTURE = ("split", "tile", "fuse", "reorder", "cache_read", "cache_write", "rfactor")
MAX_VECTOR_LANES = 256  # the "wide" family's last axis (up to 256) is vectorized whole


class PrimitiveCrashed(Exception):
    """A schedule primitive raised something other than ScheduleError (a compiler bug)."""


class ScheduleDrawer:
    """Draws schedule statements for one computation, applying each to a live schedule."""

    def __init__(self, ch: Chooser, prelude: str, setup: str, known_bugs: bool = False):
        self.ch = ch
        self.known_bugs = known_bugs  # also draw schedules that hit the bugs in KNOWN_BUGS
        self.prelude, self.setup = prelude, setup
        self.steps: list[str] = []
        self.ns = self._replay()

    # -- the live schedule ------------------------------------------------------------------------
    def _replay(self) -> dict[str, Any]:
        ns: dict[str, Any] = {"__name__": "__fuzz_case__"}
        exec(compile(self.prelude + self.setup + "\n".join(self.steps), "<fuzz case>", "exec"), ns)
        return ns

    @property
    def s(self) -> Schedule:
        return self.ns["s"]

    def apply(self, code: str, undo: bool = True) -> bool:
        """Run one statement; keep it if the schedule accepts it, else drop it.

        A primitive made of several (tile, rfactor) may change the schedule before it raises, so
        a rejected statement is undone by replaying the others (`undo`); placement and annotation
        primitives check everything first and need no undo (which would also make the stages
        the caller holds stale).
        """
        try:
            exec(compile(code, "<fuzz step>", "exec"), self.ns)
        except ScheduleError:
            if undo:
                self.ns = self._replay()
            return False
        except Exception:  # noqa: BLE001 - a primitive crashed: the case ends here, and fails
            self.steps.append(code)
            raise PrimitiveCrashed(code) from None
        self.steps.append(code)
        return True

    def tensors(self) -> dict[str, Tensor]:
        """Python names of the tensors the schedule knows, in definition order."""
        return {k: v for k, v in self.ns.items() if isinstance(v, Tensor) and v in self.s}

    def stage_ref(self, stage: Stage) -> str:
        for name, t in self.tensors().items():
            if self.s[t] is stage:
                return f"s[{name}]"
        raise LookupError(f"no name for stage {stage.name}")

    def compute_stages(self) -> list[Stage]:
        return [st for st in self.s.stages if isinstance(st.op, ComputeOp)]

    def axis_ref(self, stage: Stage, iv: IterVar) -> str:
        ref = self.stage_ref(stage)
        return f'axis({ref}, "{iv.name}")'

    # -- phase 1: loop structure and dataflow -------------------------------------------------------
    def structure(self, count: int) -> None:
        for _ in range(count):
            kind = self.ch.choice(STRUCTURE)
            getattr(self, "_" + kind)()

    def _pick_stage(self, want=lambda st: True) -> Stage | None:
        options = [st for st in self.compute_stages() if st.leaf_iter_vars and want(st)]
        return self.ch.choice(options) if options else None

    def _amount(self) -> str:
        which = self.ch.choice(("factor", "nparts"))
        value = self.ch.choice(FACTORS) if self.ch.chance(0.7) else self.ch.integer(1, 45)
        return f"{which}={value}"

    def _split(self, stage: Stage | None = None, iv: IterVar | None = None) -> bool:
        stage = stage or self._pick_stage()
        if stage is None:
            return False
        iv = iv or self.ch.choice(stage.leaf_iter_vars)
        tail = self.ch.choice(TAILS)
        amount = self._amount()
        return self.apply(
            f'{self.stage_ref(stage)}.split({self.axis_ref(stage, iv)}, {amount}, tail="{tail}")'
        )

    def _tile(self) -> None:
        stage = self._pick_stage(lambda st: len(st.leaf_iter_vars) >= 2)
        if stage is None:
            return
        leaves = list(stage.leaf_iter_vars)
        x = self.ch.choice(leaves)
        y = self.ch.choice([v for v in leaves if v is not x])
        fx, fy = self.ch.choice(FACTORS), self.ch.choice(FACTORS)
        tail = self.ch.choice(TAILS)
        self.apply(
            f"{self.stage_ref(stage)}.tile({self.axis_ref(stage, x)}, {self.axis_ref(stage, y)}, "
            f'{fx}, {fy}, tail="{tail}")'
        )

    def _fuse(self) -> None:
        def pairs(st: Stage) -> list[int]:
            leaves = st.leaf_iter_vars
            return [p for p in range(len(leaves) - 1) if _same_kind(leaves[p], leaves[p + 1])]

        stage = self._pick_stage(lambda st: bool(pairs(st)))
        if stage is None:
            return
        p = self.ch.choice(pairs(stage))
        leaves = stage.leaf_iter_vars
        group = [leaves[p], leaves[p + 1]]
        if p + 2 < len(leaves) and _same_kind(leaves[p], leaves[p + 2]) and self.ch.chance(0.3):
            group.append(leaves[p + 2])
        self.apply(
            f"{self.stage_ref(stage)}.fuse({', '.join(self.axis_ref(stage, v) for v in group)})"
        )

    def _reorder(self) -> None:
        stage = self._pick_stage(lambda st: len(st.leaf_iter_vars) >= 2)
        if stage is None:
            return
        pool = list(stage.leaf_iter_vars)
        chosen = []
        while pool and (len(chosen) < 2 or self.ch.chance(0.5)):
            chosen.append(pool.pop(self.ch.integer(0, len(pool) - 1)))
        self.apply(
            f"{self.stage_ref(stage)}.reorder({', '.join(self.axis_ref(stage, v) for v in chosen)})"
        )

    def _cache_read(self) -> None:
        tensors = self.tensors()
        options = [(name, t) for name, t in tensors.items() if self.s.readers_of(self.s[t])]
        if not options:
            return
        name, t = self.ch.choice(options)
        readers = self.s.readers_of(self.s[t])
        picked = self.ch.subset(readers, 0.7) or readers[:1]
        scope = self.ch.choice(("local", "global"))
        new = f"{name}_{scope}"
        if new in self.ns:
            return
        refs = ", ".join(self.stage_ref(r)[2:-1] for r in picked)
        self.apply(f'{new} = s.cache_read({name}, "{scope}", [{refs}])')

    def _cache_write(self) -> None:
        stage = self._pick_stage(lambda st: st.op.num_outputs == 1 and not st.relations)
        if stage is None:
            return
        scope = self.ch.choice(("local", "global"))
        name = self.stage_ref(stage)[2:-1]
        if f"{name}_{scope}" in self.ns:
            return
        self.apply(f'{name}_{scope} = s.cache_write({name}, "{scope}")')

    def _rfactor(self) -> None:
        def fits(st: Stage) -> bool:
            reduce_leaves = any(v.kind is IterKind.REDUCE for v in st.leaf_iter_vars)
            return st.op.num_outputs == 1 and reduce_leaves

        stage = self._pick_stage(fits)
        name = stage and self.stage_ref(stage)[2:-1]
        if stage is None or f"{name}_rf" in self.ns:
            return
        iv = self.ch.choice([v for v in stage.leaf_iter_vars if v.kind is IterKind.REDUCE])
        if not self._split(stage, iv):
            return
        pick = self.ch.choice((".inner", ".outer"))
        target = next(v for v in stage.leaf_iter_vars if v.name == iv.name + pick)
        factor_axis = self.ch.integer(0, len(stage.op.axis))
        self.apply(
            f"{name}_rf = s.rfactor({name}, {self.axis_ref(stage, target)}, factor_axis={factor_axis})"
        )

    # -- phase 2: placement ---------------------------------------------------------------------
    def placement(self) -> None:
        for stage in reversed(self.compute_stages()):  # consumers are placed before producers
            if stage.is_output:
                continue
            consumers = self.s.consumers_of(stage)
            parents = {}  # parent stage -> its leaves that enclose every consumer
            for p in self.compute_stages():
                if p is stage or p.attach_type == "inline" or not consumers:
                    continue
                depths = [self._depth_in(c, p) for c in consumers]
                if None not in depths:
                    parents[p] = p.leaf_iter_vars[: min(depths) + 1]
            options = ["root"]
            if not stage.op.is_reduction and stage.op.num_outputs == 1:
                options.append("inline")
            if any(parents.values()):
                options += ["at", "at"]
                parents = {p: leaves for p, leaves in parents.items() if leaves}
            ref = self.stage_ref(stage)
            match self.ch.choice(options):
                case "inline":
                    self.apply(f"{ref}.compute_inline()", undo=False)
                case "at":
                    parent = self.ch.choice(list(parents))
                    iv = self.ch.choice(parents[parent])
                    self.apply(
                        f"{ref}.compute_at({self.stage_ref(parent)}, {self.axis_ref(parent, iv)})",
                        undo=False,
                    )
            if stage.attach_type != "inline" and not stage.scope_explicit and self.ch.chance(0.15):
                self.apply(f'{ref}.set_scope("local")', undo=False)

    def _depth_in(self, consumer: Stage, parent: Stage) -> int | None:
        """The innermost leaf position of `parent` whose loop encloses `consumer` (the last
        leaf if `consumer` is `parent`), or None if `consumer` is not computed inside `parent`.

        A producer attached at a deeper loop than a consumer computed inside `parent` would
        not exist yet where that consumer runs.
        """
        current = consumer
        while current is not None:
            if current is parent:
                return len(parent.leaf_iter_vars) - 1
            if current.attach_stage is parent:
                return parent.leaf_iter_vars.index(current.attach_ivar)
            current = current.attach_stage
        return None

    # -- phase 3: annotations -------------------------------------------------------------------
    def annotations(self, p: float) -> None:
        from tensorforge.schedule.to_ir import stage_bounds

        try:
            bounds = stage_bounds(self.s)
        except ScheduleError:
            return  # the build will say why
        for stage in self.compute_stages():
            info = bounds.get(id(stage))
            if info is None:
                continue
            for iv in list(stage.leaf_iter_vars):
                if not self.ch.chance(p):
                    continue
                extent = info.extents.get(iv)
                options = ["unroll"]
                if iv.kind is not IterKind.REDUCE:
                    options.append("parallel")
                    if isinstance(extent, Const) and 1 <= extent.value <= MAX_VECTOR_LANES:
                        options += ["vectorize", "vectorize"]
                kind = self.ch.choice(options)
                self.apply(
                    f"{self.stage_ref(stage)}.{kind}({self.axis_ref(stage, iv)})", undo=False
                )
            self._prefetch(stage, p)

    def _prefetch(self, stage: Stage, p: float) -> None:
        """Now and then a prefetch of one of the stage's inputs, some iterations ahead."""
        names = {t: name for name, t in self.tensors().items()}
        inputs = [t for t in stage.op.input_tensors if t in names]
        if not inputs or not self.ch.chance(p / 2):
            return
        tensor = self.ch.choice(inputs)
        iv = self.ch.choice(list(stage.leaf_iter_vars))
        offset = self.ch.choice((1, 2, 3, 16, 64))
        self.apply(
            f"{self.stage_ref(stage)}.prefetch({names[tensor]}, {self.axis_ref(stage, iv)}, {offset})",
            undo=False,
        )


def _same_kind(a: IterVar, b: IterVar) -> bool:
    """Both reduction axes or both spatial: only those fuse."""
    return (a.kind is IterKind.REDUCE) == (b.kind is IterKind.REDUCE)


def draw_schedule(
    ch: Chooser, prelude: str, setup: str, known_bugs: bool = False
) -> tuple[str, ...]:
    """Schedule statements for the computation that `prelude + setup` defines (with `s`).

    If a primitive crashes (raises something other than ScheduleError), the statements end with
    that call: running the case reproduces the crash.
    """
    drawer = ScheduleDrawer(ch, prelude, setup, known_bugs)
    try:
        drawer.structure(ch.integer(0, 6))
        drawer.placement()
        drawer.annotations(ch.choice((0.3, 0.0, 0.6)))
    except PrimitiveCrashed:
        pass
    return tuple(drawer.steps)
