"""What runs on a Ray cluster's workers: builds anywhere, measurements on the device's own actor.

Nothing here imports ray at module level; `ray_runner` wraps these functions as Ray tasks and
actors. Each build runs in a child process of its Ray worker (`workers.call_in_child`); each
actor measures in one long-lived child process (restarted after a crash or a hang), so a kernel
that crashes or hangs costs one trial, never the worker, and the device is set up once.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from tensorforge.tune.measure import (
    InstantiationError,
    MeasureErrorNo,
    WrongAnswer,
    check_outputs,
    default_builder,
    make_host_arrays,
    to_numpy,
)
from tensorforge.tune.template import ArgSpec, Task, get_template, template
from tensorforge.tune.workers import call_in_child, format_exception


def target_resource(target: str) -> str:
    """The Ray custom resource a node offers when it can measure for `target` (one per device).

    Ray resource names cannot hold the commas and spaces of a full target string, so the name is
    the kind and a hash of the full string: `tensorforge:llvm:3f2a...`. `tensorforge ray-resources`
    prints the names (and the target strings they stand for) a machine should offer.
    """
    kind = target.split()[0] if target.strip() else "llvm"
    digest = hashlib.sha1(target.encode()).hexdigest()[:16]
    return f"tensorforge:{kind}:{digest}"


# -- tasks travel as specs: template by name, or by value when the worker cannot import it -------


@dataclass(frozen=True)
class TaskSpec:
    """A picklable recipe for a task on another machine: a template's Task, or an
    auto-scheduler SearchTask (`kind="auto"`, whose candidates are schedule traces)."""

    name: str
    args: tuple
    target: str
    module: str | None
    code_by_value: bytes | None = field(default=None, repr=False)
    kind: str = "template"

    @staticmethod
    def of(task: Any) -> TaskSpec:
        if isinstance(task, Task):
            func, kind, name = task.template.func, "template", task.name
        else:  # tune.auto.SearchTask: the workload function builds the computation
            func, kind, name = task.func, "auto", task.workload_name
        module = getattr(func, "__module__", None)
        by_value = None
        if not (module or "").startswith("tensorforge."):
            by_value = _pickle_by_value(func, module)
        return TaskSpec(name, tuple(task.args), task.target, module, by_value, kind)

    def task(self) -> Any:
        cached = _TASKS.get(self)
        if cached is None:
            if self.kind == "auto":
                cached = self._search_task()
            else:
                cached = Task(self._template(), self.args, self.target)
            _TASKS[self] = cached
        return cached

    def _template(self) -> Any:
        from tensorforge.tune.template import _TEMPLATES, _template_by_name

        if self.code_by_value is None:
            return _template_by_name(self.name, self.module)
        if self.name not in _TEMPLATES:
            from ray import cloudpickle

            template(self.name)(cloudpickle.loads(self.code_by_value))
        return get_template(self.name)

    def _search_task(self) -> Any:
        from tensorforge.tune.auto.task import _WORKLOADS, SearchTask, register_workload

        if self.name not in _WORKLOADS:
            if self.code_by_value is not None:
                from ray import cloudpickle

                register_workload(name=self.name)(cloudpickle.loads(self.code_by_value))
            elif self.module:
                import importlib

                importlib.import_module(self.module)
        return SearchTask(self.name, self.args, self.target)


def _pickle_by_value(func: Any, module: str | None) -> bytes:
    """`func`'s code, so a worker that cannot import its module (a script, a notebook, a test
    module) can still run it."""
    from ray import cloudpickle

    owner = sys.modules.get(module or "")
    registered = False
    if owner is not None and module != "__main__":
        try:
            cloudpickle.register_pickle_by_value(owner)
            registered = True
        except ValueError:
            registered = False
    try:
        return cloudpickle.dumps(func)
    finally:
        if registered:
            cloudpickle.unregister_pickle_by_value(owner)


def config_payload(task: Any, config: Any) -> Any:
    """What travels to a build worker for `config`: a template config's index (the worker has
    the space), or the schedule trace itself."""
    return config.index if isinstance(task, Task) else config


_TASKS: dict[TaskSpec, Any] = {}


# -- builds ------------------------------------------------------------------------------------------


def _build_in_child(spec: TaskSpec, payload: Any, feature_fn: Any) -> dict:
    os.environ["TENSORFORGE_CACHE"] = "0"
    # A build only compiles: hide the GPUs so it never opens a CUDA context (seconds per build,
    # and a context on the GPU that another candidate is being timed on).
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    task = spec.task()
    start = time.perf_counter()
    try:
        config = task.config_space.get(payload) if isinstance(payload, int) else payload
        mod, features = default_builder(task, config, feature_fn)
    except InstantiationError as e:
        return _error(MeasureErrorNo.INSTANTIATION_ERROR, str(e))
    except Exception as e:  # noqa: BLE001 - any compiler failure is this candidate's result
        return _error(MeasureErrorNo.COMPILE_ERROR, format_exception(e))
    with tempfile.TemporaryDirectory(prefix="tf-ray-build-") as tmp:
        path = os.path.join(tmp, "kernel.tflib")
        mod.export_library(path)
        with open(path, "rb") as f:
            blob = f.read()
    return {
        "status": "built",
        "artifact": blob,
        "features": features,
        "build_cost": time.perf_counter() - start,
        "host": socket.gethostname(),
    }


def build_candidate(spec: TaskSpec, payload: Any, feature_fn: Any, timeout: float) -> dict:
    """Build one config into an exported module (bytes) in a child process; never raises."""
    start = time.perf_counter()
    try:
        return call_in_child(partial(_build_in_child, spec, payload, feature_fn), timeout)
    except TimeoutError:
        return _error(
            MeasureErrorNo.BUILD_TIMEOUT,
            f"building took longer than the timeout of {timeout} s",
            time.perf_counter() - start,
        )
    except RuntimeError as e:  # the child died (a signal) or could not report
        return _error(MeasureErrorNo.CRASH, str(e), time.perf_counter() - start)


def _error(error_no: int, message: str, build_cost: float = 0.0) -> dict:
    return {
        "status": "error",
        "error_no": int(error_no),
        "error_msg": message,
        "build_cost": build_cost,
    }


# -- measurement ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Protocol:
    """How an actor times a kernel: warm-up, then repeats until the spread is small enough."""

    number: int = 5
    min_repeat: int = 3
    max_repeat: int = 20
    min_repeat_ms: float = 0.0
    cv_threshold: float = 0.03  # coefficient of variation (stdev / mean) to stop at
    warmup: int = 1


def coefficient_of_variation(costs: list[float]) -> float:
    if len(costs) < 2:
        return math.inf
    mean = statistics.fmean(costs)
    return statistics.stdev(costs) / mean if mean > 0 else math.inf


def _load_artifact(blob: bytes) -> Any:
    from tensorforge.runtime.export import load_module

    handle, path = tempfile.mkstemp(prefix="tf-ray-kernel-", suffix=".tflib")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(blob)
        return load_module(path)
    finally:
        os.unlink(path)


class _ArgumentArrays:
    """The standard inputs on the device, made once per argument list and reused by every
    candidate (drawing and copying 4096² random inputs per trial would cost more than the
    trial); outputs are refilled with NaN before a checked run."""

    def __init__(self) -> None:
        self.key: Any = None
        self.dev: Any = None
        self.arrays: list[Any] = []
        self.host: list[np.ndarray] = []

    def get(self, target_kind: str, specs: tuple[ArgSpec, ...]) -> tuple[Any, list[Any]]:
        import tensorforge as tf

        key = (target_kind, specs)
        if key != self.key:
            self.arrays = []  # free the old ones first
            self.dev = tf.cuda(0) if target_kind == "cuda" else tf.cpu(0)
            self.host = make_host_arrays(specs)
            self.arrays = [tf.nd.array(a, self.dev) for a in self.host]
            self.key = key
        return self.dev, self.arrays

    def reset_outputs(self, specs: tuple[ArgSpec, ...]) -> None:
        for spec, array, host in zip(specs, self.arrays, self.host):
            if spec.is_output:
                array.copyfrom(host)


def _measure_one(
    cache: _ArgumentArrays,
    blob: bytes,
    specs: tuple[ArgSpec, ...],
    target_kind: str,
    protocol: Protocol,
    reference: Any,
    want_outputs: bool,
) -> dict:
    mod = _load_artifact(blob)
    dev, arrays = cache.get(target_kind, specs)
    if reference is not None or want_outputs:
        cache.reset_outputs(specs)
        mod(*arrays)
        outputs = [np.array(to_numpy(a)) for s, a in zip(specs, arrays) if s.is_output]
        if want_outputs:
            return {"status": "outputs", "outputs": outputs}
        check_outputs(specs, [to_numpy(a) for a in arrays], reference)
    entry = getattr(mod, "entry_name", None) or "main"
    timer = mod.time_evaluator(
        entry, dev, number=protocol.number, repeat=1, min_repeat_ms=protocol.min_repeat_ms
    )
    for _ in range(protocol.warmup):
        timer(*arrays)
    costs: list[float] = []
    while len(costs) < protocol.max_repeat:
        costs.append(float(timer(*arrays).results[0]))
        if (
            len(costs) >= protocol.min_repeat
            and coefficient_of_variation(costs) <= protocol.cv_threshold
        ):
            break
    return {"status": "ran", "costs": costs, "cv": coefficient_of_variation(costs)}


def _serve_measurements(conn: Any) -> None:
    """A measurement process that lives across trials: the device is initialized once, and the
    inputs stay on it. Requests are the arguments of `_measure_one`; answers ("ok", dict) or
    ("error", text). A crash or hang kills only this process; the actor starts another."""
    cache = _ArgumentArrays()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer: tuple = ("ok", _measure_one(cache, *request))
        except Exception as e:  # noqa: BLE001 - the candidate's failure, reported
            answer = ("error", format_exception(e))
        conn.send(answer)


class _MeasureServer:
    """The actor's handle on its measurement process (started on first use, restarted after
    a crash or a timeout)."""

    def __init__(self, method: str):
        self.method = method
        self.proc: Any = None
        self.conn: Any = None

    def call(self, request: tuple, timeout: float) -> dict:
        from tensorforge.tune.workers import close_parent, death_message, kill, pipe, start_process

        if self.proc is None or not self.proc.is_alive():
            parent, child = pipe(duplex=True)
            self.proc = start_process(_serve_measurements, (child,), self.method)
            child.close()
            self.conn = parent
        try:
            self.conn.send(request)
            if not self.conn.poll(timeout):
                self.stop()
                raise TimeoutError(timeout)
            status, value = self.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            message = death_message(self.proc, "running")
            close_parent(self.conn)
            kill(self.proc)
            self.proc = None
            raise RuntimeError(message) from None
        if status != "ok":
            raise RuntimeError(value)
        return value

    def stop(self) -> None:
        from tensorforge.tune.workers import close_parent, kill

        if self.proc is not None:
            kill(self.proc)
            close_parent(self.conn)
            self.proc = None


def device_facts(target_kind: str) -> dict:
    """The measuring device's name and clocks where readable (recorded with every result)."""
    facts: dict[str, Any] = {"host": socket.gethostname()}
    if target_kind == "cuda":
        facts.update(_cuda_facts())
    else:
        facts["device"] = _cpu_name()
        mhz = _cpu_mhz()
        if mhz:
            facts["clock_mhz"] = mhz
    return facts


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_mhz() -> float | None:
    try:
        with open("/proc/cpuinfo") as f:
            values = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
    except (OSError, ValueError):
        return None
    return round(statistics.fmean(values), 1) if values else None


def _cuda_facts() -> dict:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    query = "name,clocks.sm,clocks.mem,clocks.max.sm"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", visible],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        name, sm, mem, max_sm = (part.strip() for part in out.splitlines()[0].split(","))
        return {
            "device": name,
            "gpu_index": visible,
            "clock_sm_mhz": float(sm),
            "clock_mem_mhz": float(mem),
            "clock_sm_max_mhz": float(max_sm),
        }
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {"device": "cuda", "gpu_index": visible}


class MeasureActorBody:
    """One per device: measurements on it run one at a time (Ray actors run calls in order)."""

    def __init__(self, target: str):
        self.target = target
        self.kind = target.split()[0]
        # CUDA must not be initialized in a process that forks: serve from a clean process.
        self.server = _MeasureServer("forkserver" if self.kind == "cuda" else "fork")
        self._facts: dict = {}
        self._facts_at = -math.inf

    def where(self) -> dict:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def measure(
        self,
        blob: bytes,
        specs: tuple[ArgSpec, ...],
        protocol: Protocol,
        timeout: float,
        reference: Any = None,
        want_outputs: bool = False,
    ) -> dict:
        """Time one built kernel (or, with `want_outputs`, return its outputs); never raises."""
        import ray

        start = time.perf_counter()
        if time.monotonic() - self._facts_at > 2.0:  # clocks drift; nvidia-smi costs ~50 ms
            self._facts, self._facts_at = device_facts(self.kind), time.monotonic()
        meta = {
            **self._facts,
            "node_id": ray.get_runtime_context().get_node_id(),
            "worker_pid": os.getpid(),
        }
        request = (blob, specs, self.kind, protocol, reference, want_outputs)
        try:
            out = self.server.call(request, timeout)
        except TimeoutError:
            out = {
                "status": "error",
                "error_no": int(MeasureErrorNo.RUN_TIMEOUT),
                "error_msg": f"running took longer than the timeout of {timeout} s",
            }
        except RuntimeError as e:
            message = str(e)
            error_no = (
                MeasureErrorNo.WRONG_ANSWER
                if WrongAnswer.__name__ in message
                else (
                    MeasureErrorNo.CRASH
                    if "crashed with" in message or "exited with status" in message
                    else MeasureErrorNo.RUNTIME_ERROR
                )
            )
            out = {"status": "error", "error_no": int(error_no), "error_msg": message}
        out["meta"] = meta
        out["run_cost"] = time.perf_counter() - start
        return out
