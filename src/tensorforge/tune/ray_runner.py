"""Tuning on a Ray cluster (API.md §10): builds as Ray tasks on any CPU, measurements on actors
that own a device.

    runner = tune.RayRunner(address="auto")
    tuner.tune(n_trial=1000, measure_option=tune.measure_option(runner=runner), callbacks=[...])

Placement: every measurement actor asks for the custom resource `target_resource(target)`, which a
node offers once per device it can measure that exact target on (a local cluster started here
offers it for this machine; other machines join with `ray start --address=... --resources
"$(tensorforge ray-resources --target ...)"`). So a measurement only runs on matching hardware,
and never beside another measurement on the same device.

Faults: a build or measurement whose Ray worker dies is retried once elsewhere, then recorded as
a crash; a node that joins mid-run gets builds at once and, if it offers the resource, its own
measurement actor. Records stream into the same JSON-lines log as local tuning, so a killed driver
loses nothing measured and the next run resumes from the log.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tensorforge.tune.measure import MeasureErrorNo, MeasureInput, MeasureOption, MeasureResult
from tensorforge.tune.ray_remote import (
    MeasureActorBody,
    Protocol,
    TaskSpec,
    build_candidate,
    config_payload,
    target_resource,
)
from tensorforge.tune.template import Task, TuneError

logger = logging.getLogger("tensorforge.tune")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise TuneError(
            "RayRunner needs Ray: pip install 'tensorforge[distributed]' (or pip install ray)"
        ) from None
    return ray


class RayRunner:
    """Measure candidates on a Ray cluster; pass it as `measure_option(runner=RayRunner(...))`.

    address: "auto" (a running cluster, else a local one started here), "ray://host:10001" or
    "host:6379" (that cluster), or None / "local" (always a local one). `num_cpus` caps a local
    cluster's build slots (default: every core). `cv_threshold`, `max_repeat`: each measurement
    repeats until the coefficient of variation of its repeats is under the threshold, or the cap.
    `num_gpus` caps how many of this host's GPUs a local cluster measures on (default: every
    visible one; one measurement actor each). `top_k` best candidates are re-measured `confirm_rounds` times, interleaved on one device,
    before one is declared best. `retries`: how often a trial whose worker died is tried again.
    """

    def __init__(
        self,
        address: str | None = "auto",
        *,
        num_cpus: int | None = None,
        cv_threshold: float = 0.03,
        max_repeat: int = 20,
        top_k: int = 5,
        confirm_rounds: int = 3,
        retries: int = 1,
        measure_cpus: float = 0,
        num_gpus: int | None = None,
    ):
        if not 0 < cv_threshold < 1:
            raise ValueError(f"RayRunner: cv_threshold must be in (0, 1), got {cv_threshold}")
        if max_repeat < 1 or top_k < 0 or confirm_rounds < 1 or retries < 0:
            raise ValueError("RayRunner: max_repeat, confirm_rounds >= 1; top_k, retries >= 0")
        if num_gpus is not None and num_gpus < 1:
            raise ValueError(f"RayRunner: num_gpus must be >= 1 (or None for all), got {num_gpus}")
        self.address = address
        self.num_cpus = num_cpus
        self.cv_threshold = cv_threshold
        self.max_repeat = max_repeat
        self.top_k = top_k
        self.confirm_rounds = confirm_rounds
        self.retries = retries
        self.measure_cpus = measure_cpus
        self.num_gpus = num_gpus
        self.started_local = False

    def __repr__(self) -> str:
        return f"RayRunner(address={self.address!r})"

    def __call__(self, *args: Any) -> Any:  # used where a per-candidate runner function is expected
        raise TuneError(
            "RayRunner drives a whole tuning run; pass it as measure_option(runner=RayRunner(...)) "
            "to a tuner's tune(), not as a per-candidate runner function"
        )

    # -- the cluster -----------------------------------------------------------------------------
    def connect(self, target: str) -> None:
        """Join the cluster named by `address`, or start a local one offering `target`'s device."""
        ray = _ray()
        if ray.is_initialized():
            return
        quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
        if self.address not in (None, "local"):
            try:
                ray.init(address=self.address, **quiet)
                return
            except ConnectionError:
                if self.address != "auto":
                    raise TuneError(
                        f"RayRunner: no Ray cluster answers at {self.address!r}; start one with "
                        "`ray start --head` or pass address=None for a local one"
                    ) from None
        kind = target.split()[0]
        devices = _local_gpu_count() if kind == "cuda" else 1
        gpus = {}
        if kind == "cuda":
            if self.num_gpus is not None:
                if self.num_gpus > devices:
                    raise TuneError(
                        f"RayRunner: num_gpus={self.num_gpus}, but this host shows {devices} "
                        "GPU(s) (CUDA_VISIBLE_DEVICES and the driver decide which)"
                    )
                devices = self.num_gpus
            # Ray hands each measurement actor its own GPU (CUDA_VISIBLE_DEVICES) out of these.
            gpus = {"num_gpus": devices}
        # Workers are started from this process's environment: they import this tensorforge.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(
            num_cpus=self.num_cpus or os.cpu_count() or 1,
            resources={target_resource(target): max(devices, 0)},
            include_dashboard=False,
            **gpus,
            **quiet,
        )
        self.started_local = True

    def shutdown(self) -> None:
        """Stop the local cluster this runner started (a joined cluster is left running)."""
        if self.started_local:
            _ray().shutdown()
            self.started_local = False

    def protocol(self, option: MeasureOption) -> Protocol:
        return Protocol(
            number=option.number,
            min_repeat=option.repeat,
            max_repeat=max(self.max_repeat, option.repeat),
            min_repeat_ms=option.min_repeat_ms,
            cv_threshold=self.cv_threshold,
        )

    def create_measurer(
        self, task: Task, option: MeasureOption, feature_fn: Callable[[Any], Any] | None
    ) -> RayMeasurer:
        self.connect(task.target)
        return RayMeasurer(self, task, option, feature_fn)


def _local_gpu_count() -> int:
    try:
        from tensorforge.runtime.device import cuda_device_count

        return int(cuda_device_count())
    except Exception:  # noqa: BLE001 - no driver, no pycuda: no GPU here
        return 0


@dataclass
class _Trial:
    position: int
    config: Any
    start: float = field(default_factory=time.perf_counter)
    attempts: int = 0  # measurement attempts whose worker died
    build_cost: float = 0.0
    artifact: bytes | None = None
    features: Any = None


class RayMeasurer:
    """Measures batches of one task's configs on the cluster; the Tuner's Measurer interface."""

    def __init__(
        self,
        runner: RayRunner,
        task: Task,
        option: MeasureOption,
        feature_fn: Callable[[Any], Any] | None,
    ):
        ray = _ray()
        self.ray = ray
        self.runner = runner
        self.task = task
        self.option = option
        self.feature_fn = feature_fn
        self.spec = TaskSpec.of(task)
        self.resource = target_resource(task.target)
        self.protocol = runner.protocol(option)
        self.features: dict[int, Any] = {}
        self._actor_class = ray.remote(MeasureActorBody)
        self._build = ray.remote(build_candidate)
        self._actors: list[Any] = []
        self._busy: dict[Any, Any] = {}  # actor -> in-flight ref
        self._best: list[tuple[float, _Trial]] = []  # the top_k successes, kept for confirmation
        self._last_refresh = 0.0
        self._reference: Any = None
        self._refresh_actors(force=True)
        # Enough candidates per batch to keep every build slot busy while the devices measure.
        self.batch_size = int(min(128, 8 * ray.cluster_resources().get("CPU", 1)))
        if not self._actors:
            raise TuneError(
                f"RayRunner: no node of the cluster offers the resource {self.resource!r} for "
                f"target {task.target.split(' -mattr=')[0]!r}; start a worker on matching "
                "hardware with `ray start --address=... --resources "
                f"'{{\"{self.resource}\": 1}}'` (see `tensorforge ray-resources`)"
            )
        if option.check_correctness:
            self._reference = self._reference_outputs()

    # -- actors ----------------------------------------------------------------------------------
    def _refresh_actors(self, force: bool = False) -> None:
        """One actor per device offering the target's resource; nodes that joined get theirs."""
        now = time.monotonic()
        if not force and now - self._last_refresh < 2.0:
            return
        self._last_refresh = now
        offered = int(self.ray.cluster_resources().get(self.resource, 0))
        kind = self.task.target_kind
        while len(self._actors) < offered:
            options: dict[str, Any] = {
                "resources": {self.resource: 1},
                "num_cpus": self.runner.measure_cpus,
                "max_restarts": 0,
            }
            if kind == "cuda":
                options["num_gpus"] = 1
            actor = self._actor_class.options(**options).remote(self.task.target)
            self._actors.append(actor)

    def _lost(self, actor: Any) -> None:
        if actor in self._actors:
            self._actors.remove(actor)
        self._busy.pop(actor, None)
        # Its resource is freed once Ray notices the death; a replacement is made then.
        self._last_refresh = 0.0

    def actor_locations(self) -> list[dict]:
        """Where each measurement actor runs ({node_id, pid}); for tests and `--verbose`."""
        return self.ray.get([a.where.remote() for a in self._actors])

    # -- measuring -------------------------------------------------------------------------------
    def _reference_outputs(self) -> Any:
        default = self.task.config_space.default()
        built = self.ray.get(
            self._build.options(num_cpus=1).remote(
                self.spec, config_payload(self.task, default), None, self.option.timeout
            )
        )
        if built["status"] != "built":
            raise TuneError(
                f"check_correctness: the default config of {self.task.name!r} did not build: "
                f"{built['error_msg']}"
            )
        out = self.ray.get(
            self._actors[0].measure.remote(
                built["artifact"],
                self.task.arg_specs,
                self.protocol,
                self.option.timeout,
                None,
                True,
            )
        )
        if out["status"] != "outputs":
            raise TuneError(
                f"check_correctness: the default config of {self.task.name!r} did not run: "
                f"{out.get('error_msg')}"
            )
        return out["outputs"]

    def measure(
        self, configs: Sequence[Any], on_result: Callable[[int, MeasureResult], None] | None = None
    ) -> list[MeasureResult]:
        """Build every config on the cluster and measure each as soon as it is built."""
        ray = self.ray
        results: list[MeasureResult | None] = [None] * len(configs)

        def done(trial: _Trial, result: MeasureResult) -> None:
            results[trial.position] = result
            if trial.features is not None:
                self.features[trial.config.index] = trial.features
            if result.ok:
                self._keep_if_top(result.cost, trial)
            if on_result is not None:
                on_result(trial.position, result)

        builds: dict[Any, _Trial] = {}
        build_deadline = 3 * self.option.timeout + 120  # the child's own timeout fires first
        for k, config in enumerate(configs):
            trial = _Trial(k, config)
            ref = self._build.options(num_cpus=1, max_retries=self.runner.retries).remote(
                self.spec, config_payload(self.task, config), self.feature_fn, self.option.timeout
            )
            builds[ref] = trial
        ready: deque[_Trial] = deque()
        running: dict[Any, tuple[Any, _Trial, float]] = {}  # ref -> (actor, trial, deadline)
        while builds or ready or running:
            self._refresh_actors()
            for actor in self._actors:
                if actor not in self._busy and ready:
                    trial = ready.popleft()
                    ref = actor.measure.remote(
                        trial.artifact,
                        self.task.arg_specs,
                        self.protocol,
                        self.option.timeout,
                        self._reference,
                    )
                    self._busy[actor] = ref
                    deadline = time.monotonic() + self.option.timeout * 2 + 60
                    running[ref] = (actor, trial, deadline)
            waiting = list(builds) + list(running)
            if not waiting:
                if ready and not self._actors:
                    self._wait_for_actor()
                continue
            finished, _ = ray.wait(waiting, num_returns=1, timeout=1.0)
            for ref in finished:
                if ref in builds:
                    trial = builds.pop(ref)
                    self._built(ref, trial, ready, done)
                else:
                    actor, trial, _ = running.pop(ref)
                    self._measured(ref, actor, trial, ready, done)
            now = time.monotonic()
            for ref, (actor, trial, deadline) in list(running.items()):
                if now > deadline:  # the actor hangs beyond the child's own timeout: replace it
                    running.pop(ref)
                    ray.kill(actor)
                    self._lost(actor)
                    self._retry_or_fail(trial, ready, done, "the measurement worker hung")
            for ref, trial in list(builds.items()):
                if time.perf_counter() - trial.start > build_deadline:
                    builds.pop(ref)
                    ray.cancel(ref, force=True)
                    done(
                        trial,
                        self._result(trial, MeasureErrorNo.BUILD_TIMEOUT, "the build worker hung"),
                    )
        return results  # type: ignore[return-value]

    def _wait_for_actor(self) -> None:
        """Every device's actor died: wait (bounded) until Ray frees a resource for a new one."""
        deadline = time.monotonic() + 60
        while not self._actors and time.monotonic() < deadline:
            time.sleep(0.5)
            self._refresh_actors(force=True)
        if not self._actors:
            raise TuneError(
                f"RayRunner: every measurement worker for {self.resource!r} is gone and none "
                "could be restarted; the log holds what was measured: run again to resume"
            )

    def _built(self, ref: Any, trial: _Trial, ready: deque, done: Callable) -> None:
        try:
            out = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:  # the worker died twice (Ray retried once)
            done(trial, self._result(trial, MeasureErrorNo.CRASH, f"build worker lost: {e}"))
            return
        trial.build_cost = out.get("build_cost", 0.0)
        if out["status"] != "built":
            done(trial, self._result(trial, out["error_no"], out["error_msg"]))
            return
        trial.artifact = out["artifact"]
        trial.features = out["features"]
        ready.append(trial)

    def _measured(self, ref: Any, actor: Any, trial: _Trial, ready: deque, done: Callable) -> None:
        self._busy.pop(actor, None)
        try:
            out = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as e:
            self._lost(actor)
            self._retry_or_fail(trial, ready, done, f"measurement worker lost: {e}")
            return
        except self.ray.exceptions.RayError as e:
            done(trial, self._result(trial, MeasureErrorNo.UNKNOWN_ERROR, str(e)))
            return
        meta = dict(out.get("meta", {}))
        if out["status"] == "ran":
            meta["cv"] = round(out["cv"], 5) if math.isfinite(out["cv"]) else None
            meta["repeats"] = len(out["costs"])
            meta["attempts"] = trial.attempts + 1
            done(trial, self._result(trial, MeasureErrorNo.NO_ERROR, "", out["costs"], meta))
        else:
            done(trial, self._result(trial, out["error_no"], out["error_msg"], (), meta))

    def _retry_or_fail(self, trial: _Trial, ready: deque, done: Callable, why: str) -> None:
        trial.attempts += 1
        if trial.attempts <= self.runner.retries:
            logger.info("ray: %s; trial %d tried again", why, trial.position)
            ready.appendleft(trial)
        else:
            done(trial, self._result(trial, MeasureErrorNo.CRASH, f"{why} (after a retry)"))

    def _result(
        self,
        trial: _Trial,
        error_no: int,
        message: str,
        costs: Sequence[float] = (),
        meta: dict | None = None,
    ) -> MeasureResult:
        return MeasureResult(
            costs=tuple(float(c) for c in costs),
            error_no=int(error_no),
            error_msg=message,
            all_cost=time.perf_counter() - trial.start,
            timestamp=time.time(),
            build_cost=trial.build_cost,
            meta=meta or {},
        )

    def _keep_if_top(self, cost: float, trial: _Trial) -> None:
        if self.runner.top_k == 0:
            return
        self._best.append((cost, trial))
        self._best.sort(key=lambda pair: pair[0])
        for _, dropped in self._best[self.runner.top_k :]:
            dropped.artifact = None
        del self._best[self.runner.top_k :]

    # -- confirming the best -----------------------------------------------------------------------
    def finish(self, tuner: Any, callbacks: Sequence[Callable[..., Any]]) -> None:
        """Re-measure the top candidates on one device, interleaved, and declare the best of
        those; the confirmations are logged as records marked `confirmed`."""
        from tensorforge.tune.callbacks import LogToFile

        candidates = [trial for _, trial in self._best if trial.artifact is not None]
        if len(candidates) < 2 or not self._actors:
            return
        actor = self._actors[0]
        protocol = replace(self.protocol, max_repeat=self.protocol.min_repeat)
        rounds: dict[int, list[float]] = {id(t): [] for t in candidates}
        meta: dict[int, dict] = {}
        for _ in range(self.runner.confirm_rounds):
            for trial in candidates:
                try:
                    out = self.ray.get(
                        actor.measure.remote(
                            trial.artifact, self.task.arg_specs, protocol, self.option.timeout
                        )
                    )
                except self.ray.exceptions.RayError:
                    return  # the device went away: the per-trial results stand
                if out["status"] == "ran":
                    rounds[id(trial)].append(statistics.fmean(out["costs"]))
                    meta[id(trial)] = out.get("meta", {})
        best = None
        for trial in candidates:
            costs = rounds[id(trial)]
            if len(costs) < self.runner.confirm_rounds:
                continue
            info = {
                **meta[id(trial)],
                "confirmed": True,
                "rounds": len(costs),
                "cv": round(statistics.stdev(costs) / statistics.fmean(costs), 5),
            }
            result = MeasureResult(
                costs=tuple(costs),
                error_no=0,
                error_msg="",
                all_cost=0.0,
                timestamp=time.time(),
                build_cost=trial.build_cost,
                meta=info,
            )
            inp = MeasureInput(self.task, trial.config)
            for callback in callbacks:
                if isinstance(callback, LogToFile):
                    callback(tuner, [inp], [result])
            if best is None or result.cost < best[0].cost:
                best = (result, trial)
        if best is not None:
            result, trial = best
            tuner.best_cost, tuner.best_config, tuner.best_result = (
                result.cost,
                trial.config,
                result,
            )
            print(
                f"confirmed: the top {len(candidates)} re-measured {self.runner.confirm_rounds}x "
                f"interleaved on one device; best {result.cost * 1e3:.4f} ms",
                file=sys.stderr,
            )

    def close(self) -> None:
        for actor in self._actors:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._actors.clear()
        self._busy.clear()
