"""Measuring candidates: parallel builds, serial timed runs, every candidate in its own process.

For each chunk of candidates, `n_parallel` forked processes build at once (instantiate the
template, lower, compile); each built process then waits until the parent lets it run, one at a
time, so timings never share the machine with a build. A candidate whose template raises, whose
build fails, that crashes (SIGSEGV...), that runs past `timeout`, or that disagrees with the
default config's output (`check_correctness=True`) becomes a MeasureResult with an error, and
the search goes on.
"""

from __future__ import annotations

import enum
import math
import multiprocessing.connection
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from tensorforge.target import Target
from tensorforge.tune.template import ArgSpec, Task, TuneError
from tensorforge.tune.workers import (
    call_in_child,
    close_parent,
    cpu_count,
    death_message,
    format_exception,
    kill,
    pipe,
    start_process,
)


class MeasureErrorNo(enum.IntEnum):
    """Why a candidate has no timing (TVM's numbering where TVM has the case)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the template raised for this config
    COMPILE_ERROR = 2  # lowering or code generation failed
    RUNTIME_ERROR = 4  # the kernel raised when run
    WRONG_ANSWER = 5  # differs from the default config's output
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8
    CRASH = 9  # the process died (a signal such as SIGSEGV)


@dataclass(frozen=True)
class MeasureInput:
    task: Task
    config: Any  # a ConfigEntity


@dataclass(frozen=True)
class MeasureResult:
    """Seconds per call of each repeat (`costs`), or an error; `all_cost` is the candidate's wall time."""

    costs: tuple[float, ...]
    error_no: int
    error_msg: str
    all_cost: float
    timestamp: float
    build_cost: float = 0.0
    # Where and how it was measured, when the runner knows (Ray: device, clocks, cv, node).
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR and len(self.costs) > 0

    @property
    def cost(self) -> float:
        """Mean seconds per call; infinity for a failed candidate."""
        return float(np.mean(self.costs)) if self.ok else math.inf

    def to_json(self) -> dict:
        data = {
            "costs": list(self.costs),
            "error_no": int(self.error_no),
            "error_msg": self.error_msg,
            "all_cost": self.all_cost,
            "build_cost": self.build_cost,
            "timestamp": self.timestamp,
        }
        if self.meta:
            data["meta"] = dict(self.meta)
        return data

    @staticmethod
    def from_json(data: dict) -> MeasureResult:
        return MeasureResult(
            costs=tuple(float(c) for c in data.get("costs", ())),
            error_no=int(data.get("error_no", 0)),
            error_msg=str(data.get("error_msg", "")),
            all_cost=float(data.get("all_cost", 0.0)),
            timestamp=float(data.get("timestamp", 0.0)),
            build_cost=float(data.get("build_cost", 0.0)),
            meta=dict(data.get("meta") or {}),
        )


# A builder turns (task, config, feature_fn) into (built module, features or None);
# a runner turns (task, built module, option, reference outputs or None) into seconds per call.
Builder = Callable[[Task, Any, Any], tuple[Any, Any]]
Runner = Callable[[Task, Any, "MeasureOption", Any], Sequence[float]]


@dataclass(frozen=True)
class MeasureOption:
    number: int = 5
    repeat: int = 3
    min_repeat_ms: float = 0
    timeout: float = 10
    n_parallel: int = 1
    check_correctness: bool = False
    builder: Builder | None = field(default=None, repr=False)
    runner: Runner | None = field(default=None, repr=False)


def measure_option(
    number: int | None = None,
    repeat: int | None = None,
    min_repeat_ms: float | None = None,
    timeout: float | None = None,
    n_parallel: int | None = None,
    check_correctness: bool = False,
    *,
    builder: Any = None,
    runner: Any = None,
) -> MeasureOption:
    """How to measure candidates (API.md §4).

    Each of `repeat` measurements runs the kernel `number` times (more if `min_repeat_ms` asks);
    `timeout` bounds a candidate's build and its run, each; `n_parallel` builds run at once
    (default: the number of cores). `builder`/`runner` are AutoTVM's spellings ("local",
    tune.LocalBuilder(...), tune.LocalRunner(...): their settings apply where the arguments
    above are not given), or functions that replace the default build and run steps.
    """
    from tensorforge.tune.autotvm_compat import resolve_builder, resolve_runner

    builder, build_options = resolve_builder(builder)
    runner, run_options = resolve_runner(runner)
    given = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms}
    given.update(timeout=timeout, n_parallel=n_parallel)
    settings = {"number": 5, "repeat": 3, "min_repeat_ms": 0, "timeout": 10, "n_parallel": None}
    settings.update(build_options)
    if "timeout" in build_options and "timeout" in run_options:
        run_options["timeout"] = max(build_options["timeout"], run_options["timeout"])
    settings.update(run_options)
    settings.update({k: v for k, v in given.items() if v is not None})
    number, repeat = settings["number"], settings["repeat"]
    min_repeat_ms, timeout = settings["min_repeat_ms"], settings["timeout"]
    n_parallel = settings["n_parallel"]
    if number < 1 or repeat < 1:
        raise ValueError(f"measure_option: number and repeat must be >= 1, got {number}, {repeat}")
    if not timeout > 0:
        raise ValueError(f"measure_option: timeout must be > 0 seconds, got {timeout}")
    n_parallel = cpu_count() if n_parallel is None else int(n_parallel)
    if n_parallel < 1:
        raise ValueError(f"measure_option: n_parallel must be >= 1, got {n_parallel}")
    return MeasureOption(
        number,
        repeat,
        min_repeat_ms,
        float(timeout),
        n_parallel,
        check_correctness,
        builder,
        runner,
    )


# -- the default build and run steps (they run inside the candidate's process) -------------------


class WrongAnswer(Exception):
    """The candidate's output differs from the default config's."""


class InstantiationError(Exception):
    """The template raised for this config (recorded as INSTANTIATION_ERROR)."""


def instantiate(task: Task, config: Any) -> tuple[Any, list[Any]]:
    """task.instantiate, with the template's own errors marked as InstantiationError."""
    try:
        return task.instantiate(config)
    except Exception as e:
        raise InstantiationError(format_exception(e)) from e


def default_builder(task: Task, config: Any, feature_fn: Any) -> tuple[Any, Any]:
    """Instantiate, lower (extracting features if asked) and compile one candidate."""
    import tensorforge as tf

    s, args = instantiate(task, config)
    with Target(task.target):
        features = None
        if feature_fn is not None:
            func = tf.lower(s, args, name="main")
            try:
                features = feature_fn(func)
            except Exception:  # noqa: BLE001 - features are optional; the model copes without
                features = None
            mod = tf.build(func, target=task.target, name="main")
        else:
            mod = tf.build(s, args, target=task.target, name="main")
    return mod, features


def aligned_full(shape: Sequence[int], fill: Any, dtype: Any, alignment: int = 64) -> np.ndarray:
    """A C-contiguous array filled with `fill` whose data starts on an `alignment`-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    offset = (-raw.ctypes.data) % alignment
    out = raw[offset : offset + nbytes].view(dtype).reshape(shape)
    out[...] = fill
    return out


def make_host_arrays(specs: Sequence[ArgSpec], seed: int = 0) -> list[np.ndarray]:
    """Inputs drawn at random (the same for every candidate); outputs filled with NaN (or 0).

    Arrays are 64-byte aligned, as the kernels' buffers are declared.
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        dtype = np.dtype(spec.dtype)
        if spec.is_output:
            value: Any = np.nan if dtype.kind == "f" else 0
        elif dtype.kind == "f":
            value = rng.uniform(-1.0, 1.0, size=spec.shape)
        elif dtype.kind == "b":
            value = rng.integers(0, 2, size=spec.shape)
        else:
            value = rng.integers(0, 8, size=spec.shape)
        arrays.append(aligned_full(spec.shape, value, dtype))
    return arrays


def device_arrays(task: Task, host: Sequence[np.ndarray]) -> tuple[Any, list[Any]]:
    """(device, the arrays copied to it as tf.nd arrays)."""
    import tensorforge as tf

    dev = tf.device(Target(task.target).device_kind, 0)
    return dev, [tf.nd.array(a, dev) for a in host]


def to_numpy(array: Any) -> np.ndarray:
    return array if isinstance(array, np.ndarray) else array.numpy()


def _entry(mod: Any) -> str:
    return getattr(mod, "entry_name", None) or "main"


def check_outputs(
    specs: Sequence[ArgSpec], got: Sequence[np.ndarray], reference: Sequence[np.ndarray]
) -> None:
    """Raise WrongAnswer unless each output matches the reference within its dtype's tolerance."""
    outputs = [(spec, g) for spec, g in zip(specs, got) if spec.is_output]
    for (spec, value), ref in zip(outputs, reference):
        value = np.asarray(value)
        if np.dtype(spec.dtype).kind == "f":
            rtol = {2: 1e-2, 4: 1e-3, 8: 1e-7}.get(np.dtype(spec.dtype).itemsize, 1e-3)
            scale = float(np.nanmean(np.abs(ref))) if ref.size else 1.0
            bad = ~np.isclose(value, ref, rtol=rtol, atol=rtol * max(scale, 1e-30))
        else:
            bad = value != ref
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise WrongAnswer(
                f"output '{spec.name}' differs from the default schedule's at {int(bad.sum())} of "
                f"{bad.size} elements, e.g. {where}: {value[where]} vs {ref[where]}"
            )


def default_runner(task: Task, mod: Any, option: MeasureOption, reference: Any) -> list[float]:
    """Check the output (if a reference is given), then time the kernel with time_evaluator."""
    dev, arrays = device_arrays(task, make_host_arrays(task.arg_specs))
    if reference is not None:
        mod(*arrays)
        check_outputs(task.arg_specs, [to_numpy(a) for a in arrays], reference)
    timer = mod.time_evaluator(
        _entry(mod),
        dev,
        number=option.number,
        repeat=option.repeat,
        min_repeat_ms=option.min_repeat_ms,
    )
    return [float(c) for c in timer(*arrays).results]


def _reference_outputs(task: Task, option: MeasureOption) -> list[np.ndarray]:
    builder = option.builder or default_builder
    mod, _ = builder(task, task.config_space.default(), None)
    _, arrays = device_arrays(task, make_host_arrays(task.arg_specs))
    mod(*arrays)
    return [np.array(to_numpy(a)) for spec, a in zip(task.arg_specs, arrays) if spec.is_output]


def compute_reference(task: Task, option: MeasureOption, method: str = "fork") -> list[np.ndarray]:
    """The default config's outputs on the standard inputs, computed in a child process."""
    return call_in_child(
        partial(_reference_outputs, task, option), timeout=10 * option.timeout + 60, method=method
    )


def start_method(task: Task) -> str:
    """How candidate processes start: forked from this process, or (CUDA) from a clean server,
    since this process may have initialized CUDA and a forked child could not use it then."""
    return "forkserver" if Target(task.target).is_gpu else "fork"


# -- the candidate process -----------------------------------------------------------------------


def _candidate_main(
    conn: Any, task: Task, config: Any, option: MeasureOption, feature_fn: Any, reference: Any
) -> None:
    """Build, report, wait for the go-ahead, run, report. Runs in the forked child."""
    # NOTE: candidates write no disk-cache entries: the write would share the machine with
    # other candidates' timed runs, and the child may be killed in the middle of it.
    os.environ["TENSORFORGE_CACHE"] = "0"
    builder = option.builder or default_builder
    runner = option.runner or default_runner
    start = time.perf_counter()
    try:
        try:
            mod, features = builder(task, config, feature_fn)
        except InstantiationError as e:
            conn.send(("error", MeasureErrorNo.INSTANTIATION_ERROR, str(e), None))
            return
        except Exception as e:  # noqa: BLE001
            conn.send(("error", MeasureErrorNo.COMPILE_ERROR, format_exception(e), None))
            return
        conn.send(("built", time.perf_counter() - start, features))
        if conn.recv() != "run":
            return
        try:
            costs = runner(task, mod, option, reference)
        except WrongAnswer as e:
            conn.send(("error", MeasureErrorNo.WRONG_ANSWER, str(e), None))
            return
        except Exception as e:  # noqa: BLE001
            conn.send(("error", MeasureErrorNo.RUNTIME_ERROR, format_exception(e), None))
            return
        conn.send(("ran", [float(c) for c in costs]))
    except (EOFError, BrokenPipeError):  # the parent went away
        return
    finally:
        conn.close()


@dataclass
class _Candidate:
    position: int
    config: Any
    proc: Any = None
    conn: Any = None
    start: float = 0.0
    deadline: float = 0.0
    build_cost: float = 0.0
    features: Any = None
    result: MeasureResult | None = None


class Measurer:
    """Measures batches of configs of one task; see the module docstring."""

    def __init__(
        self,
        task: Task,
        option: MeasureOption,
        feature_fn: Callable[[Any], Any] | None = None,
        method: str | None = None,
    ):
        self.task = task
        self.option = option
        self.feature_fn = feature_fn
        self.method = method or start_method(task)
        self.chunk_size = max(8, 4 * option.n_parallel)
        self._reference: Any = None
        if option.check_correctness:
            try:
                self._reference = compute_reference(task, option, self.method)
            except (RuntimeError, TimeoutError) as e:
                raise TuneError(
                    f"check_correctness: the default config of {task.name!r} could not be built "
                    f"and run to give the reference output: {e}"
                ) from None
        self.features: dict[int, Any] = {}  # config index -> features reported by its build

    def measure(
        self, configs: Sequence[Any], on_result: Callable[[int, MeasureResult], None] | None = None
    ) -> list[MeasureResult]:
        """Measure `configs`; `on_result(position, result)` is called as each result is known."""
        results: list[MeasureResult | None] = [None] * len(configs)

        def done(cand: _Candidate, result: MeasureResult) -> None:
            cand.result = result
            results[cand.position] = result
            if cand.features is not None:
                self.features[cand.config.index] = cand.features
            if on_result is not None:
                on_result(cand.position, result)

        for start in range(0, len(configs), self.chunk_size):
            chunk = [
                self._candidate(start + k, c)
                for k, c in enumerate(configs[start : start + self.chunk_size])
            ]
            try:
                built = self._build(chunk, done)
                for cand in built:
                    self._run(cand, done)
            finally:
                for cand in chunk:
                    if cand.proc is not None:
                        kill(cand.proc)
                        close_parent(cand.conn)
                        cand.proc = None
        return results  # type: ignore[return-value]

    # -- phases -------------------------------------------------------------------------------------
    def _candidate(self, position: int, config: Any) -> _Candidate:
        """The candidate record of `config` (a subclass may hand back one whose process
        already runs: tune.auto's screening measurer)."""
        return _Candidate(position, config)

    def _start(self, cand: _Candidate) -> None:
        parent, child = pipe(duplex=True)
        cand.start = time.perf_counter()
        cand.deadline = time.monotonic() + self.option.timeout
        cand.proc = start_process(
            _candidate_main,
            (child, self.task, cand.config, self.option, self.feature_fn, self._reference),
            self.method,
        )
        child.close()
        cand.conn = parent

    def _finish(
        self, cand: _Candidate, error_no: int, message: str, costs: Sequence[float] = ()
    ) -> MeasureResult:
        if cand.proc is not None:
            kill(cand.proc)
            close_parent(cand.conn)
            cand.proc = None
        return MeasureResult(
            costs=tuple(costs),
            error_no=int(error_no),
            error_msg=message,
            all_cost=time.perf_counter() - cand.start,
            timestamp=time.time(),
            build_cost=cand.build_cost,
        )

    def _build(
        self, chunk: list[_Candidate], done: Callable[[_Candidate, MeasureResult], None]
    ) -> list[_Candidate]:
        """Build the chunk, n_parallel at a time; returns the candidates that built, in order."""
        queue = list(chunk)
        active: list[_Candidate] = []
        built: list[_Candidate] = []
        while queue or active:
            while queue and len(active) < self.option.n_parallel:
                cand = queue.pop(0)
                self._start(cand)
                active.append(cand)
            wait_for = max(0.0, min(c.deadline for c in active) - time.monotonic())
            multiprocessing.connection.wait([c.conn for c in active], timeout=wait_for)
            for cand in list(active):
                try:
                    if cand.conn.poll():
                        message = cand.conn.recv()
                        active.remove(cand)
                        if message[0] == "built":
                            cand.build_cost, cand.features = message[1], message[2]
                            built.append(cand)
                        else:
                            _, error_no, text, _ = message
                            cand.build_cost = time.perf_counter() - cand.start
                            done(cand, self._finish(cand, error_no, text))
                    elif time.monotonic() > cand.deadline:
                        active.remove(cand)
                        cand.build_cost = time.perf_counter() - cand.start
                        text = f"building took longer than the timeout of {self.option.timeout} s"
                        done(cand, self._finish(cand, MeasureErrorNo.BUILD_TIMEOUT, text))
                except (EOFError, OSError):
                    active.remove(cand)
                    cand.build_cost = time.perf_counter() - cand.start
                    done(
                        cand,
                        self._finish(
                            cand, MeasureErrorNo.CRASH, death_message(cand.proc, "building")
                        ),
                    )
        built.sort(key=lambda c: c.position)
        return built

    def _run(self, cand: _Candidate, done: Callable[[_Candidate, MeasureResult], None]) -> None:
        """Let one built candidate run, alone; wait for its timing, death or timeout."""
        try:
            cand.conn.send("run")
            if not cand.conn.poll(self.option.timeout):
                text = f"running took longer than the timeout of {self.option.timeout} s"
                done(cand, self._finish(cand, MeasureErrorNo.RUN_TIMEOUT, text))
                return
            message = cand.conn.recv()
        except (EOFError, OSError):
            done(
                cand, self._finish(cand, MeasureErrorNo.CRASH, death_message(cand.proc, "running"))
            )
            return
        if message[0] == "ran":
            done(cand, self._finish(cand, MeasureErrorNo.NO_ERROR, "", message[1]))
        else:
            _, error_no, text, _ = message
            done(cand, self._finish(cand, error_no, text))
