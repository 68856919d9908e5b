"""Evolutionary search over the sketch rules' decisions, ranked by xgboost cost models.

Each batch:
1. refit two models on every measured schedule (throughput relative to the best): one on the
   decisions as numbers (cheap for any candidate), one on those plus the lowered IR's features
   (the builds report them: they lower anyway);
2. evolve a population (the best measured schedules and fresh random ones) for a few
   generations: children by mutation (one tile size moved between levels, an unroll, parallel,
   compute-location, rfactor or inlining choice redrawn) or crossover (each stage's decisions from
   either parent; the rules repair whatever no longer fits), parents drawn by the decision
   model's score;
3. lower the best-scored `shortlist` x batch unmeasured children, drop those whose lowered IR
   equals one already measured or shortlisted, rank the rest by the IR model (`lower_shortlist`);
4. measure the top of that ranking, plus `epsilon` of the batch drawn at random (and, with
   `local` > 0, that share of it unranked mutants of the 4 fastest measured).
Before there is anything to learn from, a batch is the best of many random samples by the
analytic prior (prior.py: the register tile against the vector registers, no lowering), best
first, plus `epsilon` random, and from the first guess half of it mutants of the guess; after,
the models take the prior as one more feature. That is the start Ansor and MetaSchedule give
their search (random samples, ranked by a model: theirs pre-trained, here the target's model).
Step 3 (lowering in Python: ~0.02-0.1 s a candidate at GEMM 256³) paid for a cold start
without the prior: GEMM 256³, 3 seeds, 500 trials against 1000 random ones, without the first
guess: 90% of random's best in 27, 22, 76 trials with it and in -, 85, 167 without. It is off
by default (`lower_shortlist=False`; True always, N for the first N trials): with the prior the
cold start needs it no more, and it cost a fifth of the wall time in candidates lowered and
then not measured (this Zen 5, GEMM 256³ without the first guess, 192 trials, seeds 0-2, load
4-8: 87-91% of the wall time building and measuring without it, 73-79% with it, counting the
lowering of candidates not measured as the search's own). With it, the shortlist is lowered in
the candidates' own measurement processes (screening.py; `lower_in_workers=False`: here), and
the chosen ones compile from that IR: the parent only ranks.
GEMM 256³, 500 trials against 1000 random ones, 3 seeds (benchmarks/auto_schedule.py
--search-quality 1000; this Zen 5, 1 thread, kernels in thread CPU time, load 5-9): 90% of
random's best in 1, 2, 1 trials from the first guess and 2, 6, 10 without it (before the
prior: 20, 23, 17) against random's 23, 102, 209; 88-91% of the wall time building and
measuring in both modes (before: 80-83% from the guess, 68-79% strict without it).
`model=False` keeps every batch random: the baseline the guided search is compared with.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensorforge.tune.auto.decisions import Decisions, mutate_tile
from tensorforge.tune.auto.prior import Prior
from tensorforge.tune.auto.screening import build_report, lower_candidate
from tensorforge.tune.auto.task import ScheduleTrace, SearchTask
from tensorforge.tune.measure import MeasureResult

MAX_MADE = 50_000  # generated candidates kept by their decisions

# lowers traces elsewhere: trace index -> (IR hash, IR features), or None where it failed
Screen = Callable[[Sequence[ScheduleTrace]], dict]


class EvolutionarySearch:
    """The search of one task; its options are `SearchTask.tune`'s `**search_options`:

    - `model`: rank by the cost models (False: every batch random, the baseline);
    - `population`, `generations`, `mutation_prob`: the evolution run each batch (its size, how
      many generations, the share of children made by mutation rather than crossover);
    - `epsilon`: the share of each batch drawn at random (exploration);
    - `local`: the share of each batch made of unranked mutants of the 4 fastest measured;
    - `shortlist`: how many candidates (x the batch's model share) are lowered and ranked by
      the IR model, when lowering (`lower_shortlist`);
    - `first_guess`: the analytic first guess (and mutants of it) in the first batch;
    - `lower_shortlist`: lower the shortlist to rank it by the IR model: True always, False
      (default) never, a number for the first that many trials (see the module notes);
    - `lower_in_workers`: where the shortlist is lowered: True (default), each candidate in
      its own measurement process, which then builds it from that IR if it is chosen (the
      search's process only ranks; a candidate that crashes while lowering ends alone);
      False, in the search's own process (each candidate lowered once, then built again
      from its trace if chosen). The search is the same either way;
    - `prior_samples`: before the models have measurements to learn from, each batch's model
      share is the best by the analytic prior (prior.py) of that many random samples per
      place (x the share).
    """

    def __init__(
        self,
        task: SearchTask,
        seed: int | None = 0,
        model: bool = True,
        population: int = 64,
        generations: int = 4,
        mutation_prob: float = 0.85,
        epsilon: float = 0.1,
        local: float = 0.0,
        shortlist: float = 2,
        first_guess: bool = True,
        lower_shortlist: bool | int = False,
        lower_in_workers: bool = True,
        prior_samples: int = 16,
    ):
        self.task = task
        self.rng = np.random.default_rng(seed)
        self.use_model = model
        self.population = population
        self.generations = generations
        self.mutation_prob = mutation_prob
        self.epsilon = epsilon
        self.local = local
        self.shortlist = shortlist
        self.first_guess = first_guess
        self.lower_shortlist = lower_shortlist
        self.lower_in_workers = lower_in_workers
        self.prior_samples = prior_samples
        self.prior = Prior(task) if model else None
        self.measured: dict[int, float] = {}  # trace index -> seconds (inf for failures)
        self.ir_seen: set[str] = set()  # lowered-IR hashes measured or shortlisted
        self.reports: dict[int, tuple[str, Any] | None] = {}  # trace index -> IR hash, features
        self.history: list[tuple[ScheduleTrace, MeasureResult]] = []
        self.ir_features: dict[int, np.ndarray] = {}  # trace index -> IR features
        self.schema: dict[str, int] = {}  # decision key -> its width in the feature vector
        self.best: tuple[float, ScheduleTrace | None] = (math.inf, None)
        self._models: tuple[Any, Any] | None = None
        self._fitted_on = 0
        self._fit_width = 0
        self._extents: dict[str, list[int] | None] = {}  # tile decision key -> loop extents
        self._made: dict[str, ScheduleTrace | None] = {}  # fixed decisions (JSON) -> trace
        self.n_made = 0  # candidates generated (not counting those kept in _made)

    # -- bookkeeping ----------------------------------------------------------------------------
    def update(self, traces: Sequence[ScheduleTrace], results: Sequence[MeasureResult]) -> None:
        for trace, res in zip(traces, results):
            cost = seconds(res)
            self.measured[trace.index] = cost
            self.history.append((trace, res))
            if cost < self.best[0]:
                self.best = (cost, trace)

    def take_features(self, reported: dict[int, Any]) -> None:
        """IR features the measurement builds extracted (keyed by trace index)."""
        for index, feats in reported.items():
            if feats is not None:
                self.ir_features[index] = np.asarray(feats, dtype=np.float64)

    # -- candidates -----------------------------------------------------------------------------
    def _make(self, fixed: dict | None) -> ScheduleTrace | None:
        """The rules' schedule for `fixed` decisions, the rest drawn (None if a rule fails).
        One that drew nothing (every decision given and legal: most mutants and crossovers)
        is kept by its decisions and not generated again: the same trace, and the generator
        untouched either way."""
        key = json.dumps(fixed, sort_keys=True) if fixed else None
        if key is not None and key in self._made:
            return self._made[key]
        decisions = Decisions(self.rng, fixed)
        self.n_made += 1
        try:
            trace, _, _ = self.task.generate(decisions)
        except Exception:  # noqa: BLE001 - a rule that cannot apply: drop the candidate
            trace = None
        if key is not None and decisions.draws == 0 and len(self._made) < MAX_MADE:
            self._made[key] = trace
        return trace

    def random_batch(
        self, n: int, taken: set[int], first_guess: bool = True
    ) -> list[ScheduleTrace]:
        out: list[ScheduleTrace] = []
        if first_guess and self.first_guess and not self.history and not taken:
            from tensorforge.tune.auto.analytic import first_guess

            guess = first_guess(self.task)
            out.append(guess)
            taken.add(guess.index)
        for _ in range(20 * n):
            if len(out) >= n:
                break
            trace = self._make(None)
            if trace is not None and trace.index not in taken and trace.index not in self.measured:
                out.append(trace)
                taken.add(trace.index)
        return out

    def warm_up_batch(self, n: int, taken: set[int]) -> list[ScheduleTrace]:
        """Before the models can rank anything: half the batch mutants of the best schedule so
        far (the first guess, at first, if the search starts from it), the rest the best of
        many random samples by the analytic prior (prior.py), best first, and `epsilon` of
        the batch plain random: a start near a good point, and spread."""
        out = self.random_batch(1, taken) if self.first_guess and not self.history else []
        best = self.best[1] or (out[0] if out else None)
        for _ in range(10 * n):
            if best is None or len(out) >= n // 2:
                break
            child = self.mutate(best)
            if child is not None and child.index not in taken:
                out.append(child)
                taken.add(child.index)
        n_random = max(1, int(round(self.epsilon * n))) if self.epsilon > 0 and n >= 4 else 0
        out += self.prior_batch(n - len(out) - n_random, taken)
        return out + self.random_batch(n - len(out), taken)

    def prior_batch(self, n: int, taken: set[int]) -> list[ScheduleTrace]:
        """The `n` best by the analytic prior of `prior_samples` x n random samples."""
        if n <= 0 or self.prior is None:
            return self.random_batch(n, taken) if n > 0 else []
        pool = self.random_batch(self.prior_samples * n, set(taken), first_guess=False)
        scores = np.array([self.prior.score(t) for t in pool])
        out = [pool[k] for k in np.argsort(-scores, kind="stable")[:n]]
        taken.update(t.index for t in out)
        return out

    def mutate(self, trace: ScheduleTrace) -> ScheduleTrace | None:
        decisions = dict(trace.decisions)
        if not decisions:
            return self._make(None)
        keys = sorted(decisions)
        key = keys[int(self.rng.integers(len(keys)))]
        value = decisions[key]
        if isinstance(value, list) and value and isinstance(value[0], list):
            extents = self._extents_of(key, value)
            decisions[key] = mutate_tile(self.rng, value, extents)
        else:
            del decisions[key]  # redrawn by the rules among the options legal now
        return self._make(decisions)

    def _extents_of(self, key: str, value: list) -> list[int]:
        if key not in self._extents:
            self._extents[key] = _tile_extents(self.task, key)
        return self._extents[key] or [max(1, math.prod(f)) for f in value]

    def crossover(self, a: ScheduleTrace, b: ScheduleTrace) -> ScheduleTrace | None:
        """Each stage's decisions (keys share the stage's name) from one parent or the other."""
        stages = sorted({k.split(":", 1)[1] for k in (*a.decisions, *b.decisions)})
        from_b = {st for st in stages if self.rng.random() < 0.5}
        merged = {}
        for k, v in a.decisions.items():
            if k.split(":", 1)[1] not in from_b:
                merged[k] = v
        for k, v in b.decisions.items():
            if k.split(":", 1)[1] in from_b:
                merged[k] = v
        return self._make(merged)

    # -- features and models --------------------------------------------------------------------
    def _grow_schema(self, trace: ScheduleTrace) -> None:
        for key, value in trace.decisions.items():
            if key not in self.schema:
                self.schema[key] = len(_flatten(value))

    def decision_vector(self, trace: ScheduleTrace, width: int) -> np.ndarray:
        """The decisions as numbers, in schema order, NaN where absent; cut or padded to width."""
        out: list[float] = []
        for key, size in self.schema.items():
            value = trace.decisions.get(key)
            numbers = _flatten(value) if value is not None else []
            out.extend((numbers + [math.nan] * size)[:size])
            if len(out) >= width:
                break
        out = (out + [math.nan] * width)[:width]
        return np.asarray(out, dtype=np.float64)

    def decision_matrix(self, traces: Sequence[ScheduleTrace]) -> np.ndarray:
        """The decision vectors of `traces` (fit width), and the analytic prior's score (a
        feature the models rank by until measurements say otherwise)."""
        xs = np.stack([self.decision_vector(t, self._fit_width) for t in traces])
        if self.prior is None:
            return xs
        prior = np.array([[math.log(self.prior.score(t))] for t in traces])
        return np.concatenate([xs, prior], axis=1)

    def _full_vector(self, trace: ScheduleTrace) -> np.ndarray:
        return np.concatenate([self.decision_matrix([trace])[0], self.ir_features[trace.index]])

    def _fit(self) -> bool:
        if not self.use_model:
            return False
        if self._models is not None and len(self.history) == self._fitted_on:
            return True
        best = self.best[0]
        if not math.isfinite(best):
            return False
        ys = np.array([best / seconds(r) for _, r in self.history])
        if len(np.unique(ys)) < 2:
            return self._models is not None
        from tensorforge.tune.tuner.cost_model import XGBCostModel

        for trace, _ in self.history:
            self._grow_schema(trace)
        self._fit_width = sum(self.schema.values())
        seed = int(self.rng.integers(2**31))
        decision_model = XGBCostModel(seed=seed, num_boost_round=40)
        decision_model.fit(self.decision_matrix([t for t, _ in self.history]), ys)
        ir_model = None
        with_ir = [(t, y) for (t, _), y in zip(self.history, ys) if t.index in self.ir_features]
        if self._lowering() and len(with_ir) >= 8 and len({y for _, y in with_ir}) > 1:
            ir_model = XGBCostModel(seed=seed, num_boost_round=40)
            ir_model.fit(
                np.stack([self._full_vector(t) for t, _ in with_ir]),
                np.array([y for _, y in with_ir]),
            )
        self._models = (decision_model, ir_model)
        self._fitted_on = len(self.history)
        return True

    def _score(self, traces: Sequence[ScheduleTrace]) -> np.ndarray:
        assert self._models is not None
        return self._models[0].predict(self.decision_matrix(traces))

    # -- proposing ------------------------------------------------------------------------------
    def next_batch(self, n: int, screen: Screen | None = None) -> list[ScheduleTrace]:
        """The next `n` schedules to measure. `screen` lowers a shortlist in the measurement
        processes (ScreeningMeasurer.screen); without it, this process lowers them."""
        taken = set(self.measured)
        if not self._fit():
            return self.warm_up_batch(n, taken) if self.use_model else self.random_batch(n, taken)
        n_random = max(1, int(round(self.epsilon * n))) if self.epsilon > 0 and n >= 4 else 0
        local = self.local_batch(int(round(self.local * n)), taken)
        n_model = n - n_random - len(local)
        children = self.evolve()
        fresh = [c for c in children if c.index not in taken]
        if not fresh:
            return local + self.random_batch(n - len(local), taken)
        scores = self._score(fresh)
        order = np.argsort(-scores, kind="stable")
        if self._lowering():
            short = [fresh[k] for k in order[: int(round(self.shortlist * n_model))]]
            picks = self._rank_by_ir(short, n_model, screen)
        else:
            picks = [fresh[k] for k in order[:n_model]]
        for t in picks:
            taken.add(t.index)
        picks = local + picks
        return picks + self.random_batch(n - len(picks), taken)

    def _lowering(self) -> bool:
        """Lower the shortlist now? `lower_shortlist` True: always; a number: while fewer
        trials than that are measured (the decision model learns slowest at first)."""
        limit = self.lower_shortlist
        if isinstance(limit, bool):
            return limit
        return len(self.history) < limit

    def local_batch(self, n: int, taken: set[int]) -> list[ScheduleTrace]:
        """`n` mutants of the 4 fastest schedules measured, unranked: hill-climbing that does
        not depend on the model."""
        ranked = sorted((seconds(r), t.index, t) for t, r in self.history if r.ok)
        elite = [t for _, _, t in ranked[:4]]
        out: list[ScheduleTrace] = []
        for _ in range(10 * n):
            if not elite or len(out) >= n:
                break
            child = self.mutate(elite[int(self.rng.integers(len(elite)))])
            if child is not None and child.index not in taken:
                out.append(child)
                taken.add(child.index)
        return out

    def evolve(self) -> list[ScheduleTrace]:
        ranked = sorted((seconds(r), t.index, t) for t, r in self.history if r.ok)
        elite = [t for _, _, t in ranked[: self.population // 2]]
        population = elite + self.random_batch(self.population - len(elite), set(self.measured))
        seen = {t.index: t for t in population}
        for _ in range(self.generations):
            if not population:
                break
            scores = self._score(population)
            weights = np.exp((scores - scores.max()) * 4.0)
            weights /= weights.sum()
            children = []
            for _ in range(self.population):
                a = population[int(self.rng.choice(len(population), p=weights))]
                if self.rng.random() < self.mutation_prob or len(population) < 2:
                    child = self.mutate(a)
                else:
                    b = population[int(self.rng.choice(len(population), p=weights))]
                    child = self.crossover(a, b)
                if child is not None and child.index not in seen:
                    seen[child.index] = child
                    children.append(child)
            pool = population + children
            pool_scores = self._score(pool)
            keep = np.argsort(-pool_scores, kind="stable")[: self.population]
            population = [pool[k] for k in keep]
        return list(seen.values())

    def _rank_by_ir(
        self, short: list[ScheduleTrace], n: int, screen: Screen | None = None
    ) -> list[ScheduleTrace]:
        """Lower the shortlist (in the measurement processes with `screen`, else here; each
        trace once); drop those whose IR was measured or shortlisted before; rank the rest by
        the IR model if any. A candidate ranked out stays out: letting it back (its IR not
        counted as taken) made the cold start far slower (GEMM 256³, 90% of random's best in
        276 and 257 trials instead of 54 and 57 on seeds 2 and 0): the shortlist then filled
        with the same candidates batch after batch instead of new ones."""
        new = [t for t in short if t.index not in self.reports]
        if screen is not None:
            self.reports.update(screen(new))
        else:
            self.reports.update({t.index: self._report(t) for t in new})
        kept = []
        for trace in short:
            report = self.reports.get(trace.index)
            if report is None:  # a candidate that cannot lower is dropped
                continue
            digest, feats = report
            if digest in self.ir_seen:
                continue
            self.ir_seen.add(digest)
            if feats is not None:  # else the IR model skips this one
                self.ir_features[trace.index] = np.asarray(feats, dtype=np.float64)
            kept.append(trace)
        ir_model = self._models[1] if self._models else None
        if ir_model is not None and kept and all(t.index in self.ir_features for t in kept):
            scores = ir_model.predict(np.stack([self._full_vector(t) for t in kept]))
            kept = [kept[k] for k in np.argsort(-scores, kind="stable")]
        return kept[:n]

    def _report(self, trace: ScheduleTrace) -> tuple[str, Any] | None:
        try:
            return build_report(self.lower(trace))
        except Exception:  # noqa: BLE001 - a candidate that cannot lower
            return None

    def lower(self, trace: ScheduleTrace) -> Any:
        """The lowered IR of `trace`, as its build (and a screening process) lowers it."""
        return lower_candidate(self.task, trace)


def seconds(result: MeasureResult) -> float:
    """A measurement's time: its fastest repeat (the least disturbed by other processes on a
    shared machine); infinity for a failure."""
    return min(result.costs) if result.ok else math.inf


def _flatten(value: Any) -> list[float]:
    if isinstance(value, bool):
        return [float(value)]
    if isinstance(value, (int, float)):
        return [math.log2(1 + value) if value >= 0 else -1.0]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [math.nan]


def _tile_extents(task: SearchTask, key: str) -> list[int] | None:
    """The loop extents a tile decision splits (read off the computation by stage key)."""
    _, stage_key = key.split(":", 1)
    number = int(stage_key.split(".", 1)[0])
    s, _ = task.fresh()
    op = s.stages[number].op
    ext = lambda iv: getattr(iv.dom.extent, "value", 1)  # noqa: E731
    kind = key.split(":", 1)[0]
    if kind in ("rtile", "grtile"):
        return [ext(iv) for iv in op.reduce_axis]
    if kind == "vec":
        return [ext(op.axis[-1])]
    return [ext(iv) for iv in op.axis]
