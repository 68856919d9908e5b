"""Run one fuzz case as a script, in a child process: build, call on guarded arrays, compare.

A `Case` is data (a family, its parameters, schedule statements, where the guard pages sit)
that renders to a standalone Python script; the child executes exactly that script's text,
so the reproducer printed for a failure is the thing that failed. Kernels run only in
children: an out-of-bounds access hits a guard page and kills the child, and the parent
reports the signal instead of dying. Children are forked from a clean fork server that never
runs a kernel itself (libgomp's thread pool does not survive a fork); a test's faults (a function
patched over a compiler function) are passed to them as `patches`.
"""

from __future__ import annotations

import dataclasses
import importlib
import multiprocessing
import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from tensorforge.testing.fuzz_families import family_source

PRELUDE = '''import numpy as np

import tensorforge as tf
from tensorforge import te
from tensorforge.testing.check import random_array
from tensorforge.testing.guarded import check_all, guarded_copy, guarded_empty


def axis(stage, name):
    """The leaf axis of `stage` called `name`."""
    for v in stage.leaf_iter_vars:
        if v.name == name:
            return v
    raise LookupError(f"stage '{stage.op.name}' has no leaf axis '{name}'")


'''

RUN = '''

def place(t):
    """Each array sits in its own pages with a PROT_NONE page right {where} it."""
    return dict(side="{side}", align={align}, name=t.name)


rng = np.random.default_rng({seed})
ins = [guarded_copy(random_array(shape, t.dtype, rng), **place(t)) for t, shape in zip(inputs, in_shapes)]
outs = [guarded_empty(shape, t.dtype, **place(t)) for t, shape in zip(outputs, out_shapes)]
mod(*[g.array for g in ins + outs])
check_all(ins + outs)  # no byte written beside an array, no input changed
expected = reference(*[g.array for g in ins])
expected = expected if isinstance(expected, tuple) else (expected,)
for t, g, want in zip(outputs, outs, expected):
    np.testing.assert_allclose(g.array, want, rtol=rtol, atol=atol, err_msg=f"output '{{t.name}}' differs from numpy")
'''

# differential testing: another target's kernel against the llvm one, on the same inputs
AGAINST_LLVM = """
llvm_mod = tf.build(s, inputs + outputs, target="llvm")
llvm_outs = [guarded_empty(shape, t.dtype, **place(t)) for t, shape in zip(outputs, out_shapes)]
llvm_mod(*[g.array for g in ins + llvm_outs])
for t, g, want in zip(outputs, outs, llvm_outs):
    np.testing.assert_allclose(g.array, want.array, rtol=rtol, atol=atol, err_msg=f"output '{{t.name}}' differs between {target} and llvm")
"""

# statuses that are not a failure: "ok", and "invalid" (the case's own setup raised: only
# candidates the shrinker makes by dropping steps can be invalid)
PASSING = ("ok", "invalid")


@dataclass(frozen=True)
class Case:
    """One fuzz example: a computation, a schedule (statements), and where the guard pages sit."""

    family: str
    params: tuple[tuple[str, int], ...]
    steps: tuple[str, ...] = ()
    side: str = "end"  # the guard page right after ("end") or right before ("start") each array
    exact: bool = False  # data flush against the guard page, instead of a 64-byte aligned start
    seed: int = 0  # input data
    target: str = "llvm"  # built for this target kind (another than llvm is compared with llvm too)

    def computation_source(self) -> str:
        return family_source(self.family, dict(self.params))

    def setup_source(self) -> str:
        lines = [
            f"# {self.family}: {', '.join(f'{k}={v}' for k, v in self.params)}",
            self.computation_source(),
            "",
            "s = te.create_schedule([t.op for t in outputs])",
            *self.steps,
        ]
        return "\n".join(lines) + "\n"

    def build_source(self) -> str:
        if self.target == "llvm":
            return "mod = tf.build(s, inputs + outputs)\n"
        return f"mod = tf.build(s, inputs + outputs, target={self.target!r})\n"

    def run_source(self) -> str:
        align = "np.dtype(t.dtype).itemsize" if self.exact else "64"
        where = "after" if self.side == "end" else "before"
        text = RUN.format(side=self.side, align=align, seed=self.seed, where=where)
        if self.target != "llvm":
            text += AGAINST_LLVM.format(target=self.target)
        return text

    def script(self) -> str:
        """A standalone script that builds this case and compares it with NumPy."""
        return (
            PRELUDE
            + self.setup_source()
            + self.build_source()
            + self.run_source()
            + 'print("ok: matches numpy, nothing touched outside the arrays")\n'
        )

    def with_steps(self, steps: tuple[str, ...]) -> Case:
        return dataclasses.replace(self, steps=tuple(steps))

    def with_params(self, params: dict[str, int]) -> Case:
        return dataclasses.replace(self, params=tuple(params.items()))

    def with_target(self, target: str) -> Case:
        return dataclasses.replace(self, target=target)


@dataclass(frozen=True)
class Outcome:
    """What running a case gave. `status` is one of: ok, invalid (the schedule steps raised),
    rejected (ScheduleError from build), lowering (LoweringError: the IR verifier), error (any
    other exception), crash (killed by a signal: a guard page was hit), guard (bytes written
    beside an array, or an input changed), mismatch (differs from NumPy), timeout."""

    status: str
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.status not in PASSING

    def __str__(self) -> str:
        return f"{self.status}: {self.message}" if self.message else self.status


def run_here(case: Case) -> Outcome:
    """Run `case` in this process (a guard-page hit kills it: use `run_isolated`)."""
    from tensorforge.errors import LoweringError, ScheduleError
    from tensorforge.testing.guarded import GuardError

    ns: dict[str, Any] = {"__name__": "__fuzz_case__"}
    try:
        exec(compile(PRELUDE + case.setup_source(), "<fuzz case>", "exec"), ns)
    except Exception as e:  # noqa: BLE001
        if raised_inside_tensorforge(e):  # a primitive crashed instead of raising its error
            return Outcome(
                "error",
                f"{type(e).__name__} in a schedule primitive: {e}\n{_tail(traceback.format_exc())}",
            )
        return Outcome("invalid", f"{type(e).__name__}: {e}")  # e.g. a step whose axis was dropped
    try:
        exec(compile(case.build_source(), "<fuzz build>", "exec"), ns)
    except ScheduleError as e:
        return Outcome("rejected", f"ScheduleError: {e}")
    except LoweringError as e:
        return Outcome("lowering", f"LoweringError: {e}")
    except Exception as e:  # noqa: BLE001
        return Outcome(
            "error", f"{type(e).__name__} in build: {e}\n{_tail(traceback.format_exc())}"
        )
    try:
        exec(compile(case.run_source(), "<fuzz run>", "exec"), ns)
    except GuardError as e:
        return Outcome("guard", str(e))
    except AssertionError as e:
        return Outcome("mismatch", str(e).strip())
    except Exception as e:  # noqa: BLE001
        return Outcome("error", f"{type(e).__name__} in call: {e}\n{_tail(traceback.format_exc())}")
    return Outcome("ok")


def raised_inside_tensorforge(e: BaseException) -> bool:
    """An exception that is not a tensorforge error and was raised by tensorforge's own code
    (a KeyError deep in a primitive, say): a bug, where a user should get a clear error."""
    from tensorforge.errors import TensorForgeError

    if isinstance(e, TensorForgeError):
        return False
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"{os.sep}tensorforge{os.sep}" in tb.tb_frame.f_code.co_filename


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# -- isolation --------------------------------------------------------------------------------------
Patch = tuple[str, str, Any]  # (module, attribute, value) set in the child before the case runs


def skip_verify(ir, *args, **kwargs):
    """A stand-in for the IR verifier (patch it over ir.pipeline.verify_func to see what gets
    past it): returns the IR (a PrimFunc or statement) unchecked."""
    return ir


_context = None
# imported once by the fork server, so each child starts with them (and LLVM) loaded
PRELOAD = [
    "tensorforge.testing.fuzz_run",
    "tensorforge.testing.guarded",
    "tensorforge.testing.check",
    "tensorforge.build",
    "tensorforge.codegen.llvm",
    "tensorforge.codegen.c",
    "tensorforge.runtime.module",
]


def _mp_context():
    global _context
    if _context is None:
        # the server (started now, with this environment) preloads numpy: one BLAS thread each,
        # or many cases at once oversubscribe the machine with spinning threads
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _child(case: Case, patches: tuple[Patch, ...], conn) -> None:
    os.environ.setdefault("TENSORFORGE_CACHE", "0")
    os.environ.setdefault("TF_NUM_THREADS", "2")  # parallel loops really run in parallel, cheaply
    quiet = os.open(os.devnull, os.O_WRONLY)  # LLVM's optimization remarks; results go through conn
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    for module, attribute, value in patches:
        setattr(importlib.import_module(module), attribute, value)
    try:
        outcome = run_here(case)
    except BaseException as e:  # noqa: BLE001 - report anything rather than die silently
        outcome = Outcome("error", f"{type(e).__name__}: {e}")
    conn.send(outcome)
    conn.close()


WALL_FACTOR = 10  # a case may wait this many times its CPU time limit for a CPU


def cpu_seconds(pid: int) -> float | None:
    """CPU time process `pid` and its waited-for children (the C compiler) have used, or None
    where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # after the name: state is field 3, utime stime cutime cstime are fields 14..17
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@dataclass
class Running:
    """A case running in a child process; `result()` waits for it."""

    case: Case
    timeout: float
    process: Any = None
    conn: Any = None
    started: float = field(default_factory=time.monotonic)
    outcome: Outcome | None = None

    def ready(self) -> bool:
        """Finished, died, or out of time: `result()` will not wait."""
        return self.conn.poll() or not self.process.is_alive() or self._left() <= 0

    def _left(self) -> float:
        """Seconds the case has left: of CPU time where the OS tells it (on a loaded machine, or
        at a low priority, a case waits for a CPU: no hang), and of WALL_FACTOR times as much
        wall time (a deadlock spends no CPU time)."""
        wall = time.monotonic() - self.started
        cpu = cpu_seconds(self.process.pid)
        return self.timeout - (wall if cpu is None else max(cpu, wall / WALL_FACTOR))

    def result(self) -> Outcome:
        if self.outcome is not None:
            return self.outcome
        got = None
        while self.process.is_alive() and self._left() > 0 and not self.conn.poll(1.0):
            pass
        if self.conn.poll():
            try:
                got = self.conn.recv()
            except EOFError:
                got = None
        self.process.join(None if got is not None else 5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
            wall = time.monotonic() - self.started
            got = got or Outcome(
                "timeout",
                f"no result within {self.timeout:g} s of CPU time ({wall:.0f} s of wall time; a hang?)",
            )
        if got is None:
            code = self.process.exitcode
            if code is not None and code < 0:
                name = signal.Signals(-code).name
                why = (
                    " (an out-of-bounds access hit a guard page?)"
                    if name in ("SIGSEGV", "SIGBUS")
                    else ""
                )
                got = Outcome("crash", f"the kernel's process was killed by {name}{why}")
            else:
                got = Outcome(
                    "crash", f"the kernel's process exited with code {code} without a result"
                )
        self.conn.close()
        self.outcome = got
        return got


def start(case: Case, patches: tuple[Patch, ...] = (), timeout: float = 120.0) -> Running:
    ctx = _mp_context()
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(case, tuple(patches), sender), daemon=True)
    process.start()
    sender.close()
    return Running(case, timeout, process, receiver)


def run_isolated(case: Case, patches: tuple[Patch, ...] = (), timeout: float = 120.0) -> Outcome:
    """Run `case` in a child process; a crash or hang becomes an Outcome, never kills the caller."""
    return start(case, patches, timeout).result()
