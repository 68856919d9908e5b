"""Work spread over every core by forked workers: a model's kernels (graph/program.py), the
object code of a library of many (shared_lib.build_llvm_library).

Scheduling, lowering and writing a kernel's LLVM IR is Python (about 85% of a CPU kernel's
build: RegNetY-400MF's 63 distinct kernels, 56 of 63 s under cProfile), and llvmlite runs one
LLVM call at a time per process; threads would share one interpreter and one LLVM. So
`build_all` forks workers (`jobs()` - 1 of them) that inherit the caller's state and take jobs
from a shared pipe of job numbers, as this process does: a worker sends back what it made
(for a kernel, its KernelSource and schedule rule, pickled), which this process finishes (a
kernel's machine code is compiled here: the executables and the caches stay where the model
runs); a job of its own this process does whole. Whoever is free takes the next job, and once
none is left this process also does the jobs the workers hold (the oldest first), taking
whichever result comes first: a slow job, or a worker given little of a loaded machine, holds
nothing up.

The results are the ones a serial run makes: a worker runs the same code, and where anything
goes wrong there (an exception, a result that then fails to finish, a worker that dies) this
process does that job itself, the serial way, so an error is raised here, as the serial run
raises it; the warnings a worker's job raises are raised here (through this process's filters).
Ctrl-C ends the workers at once (SIGINT's default action in them); this process
raises KeyboardInterrupt and kills and reaps any still running. No thread of ours is inside
LLVM when a worker forks (disk_cache's writer stops around fork()).

TENSORFORGE_BUILD_JOBS sets the number of processes (1: everything here); by default, one per
core this process may run on, up to MAX_DEFAULT_JOBS (on Linux; elsewhere everything runs
here). The model's own thread count (torch.set_num_threads, TF_NUM_THREADS) is not this: the
compile is over before the model runs.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import queue
import signal
import struct
import sys
import threading
import warnings
from collections.abc import Callable

# NOTE: each worker comes to hold copies of the pages it writes (a few hundred MB of a model's
# compile): a many-core machine does not get a worker per core unless asked
MAX_DEFAULT_JOBS = 8
MIN_JOBS = 3  # fewer jobs than this run here (a fork costs tens of milliseconds)
_NUMBER = struct.Struct("<i")  # one job number in the pipe (reads of 4 bytes are atomic)
_LENGTH = struct.Struct("<Q")  # the length of a pickled result
# a worker's messages: (job, one of these, its result or None, the warnings it raised)
_MADE, _TAKEN, _FAILED = 0, 1, 2


def jobs() -> int:
    """How many processes build a model's kernels: TENSORFORGE_BUILD_JOBS, else the cores (at
    most MAX_DEFAULT_JOBS)."""
    configured = os.environ.get("TENSORFORGE_BUILD_JOBS", "").strip()
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            warnings.warn(
                f"tensorforge: TENSORFORGE_BUILD_JOBS={configured!r} is not a number; "
                "building on every core",
                stacklevel=2,
            )
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return min(cores, MAX_DEFAULT_JOBS)


def build_all(
    count: int,
    build: Callable[[int], object],
    generate: Callable[[int], object],
    finish: Callable[[int, object], object],
    done: Callable[[], None] = lambda: None,
    workers: int | None = None,
) -> list:
    """[build(j) for j in range(count)], made by this process and `workers` - 1 forked ones:
    a worker computes `generate(j)` (picklable), which this process turns into the result with
    `finish(j, generated)`; `done()` after each result. `build`, `finish`: raising here is the
    caller's error; a worker's failure makes this process `build(j)`."""
    workers = jobs() if workers is None else workers
    # (fork without exec: Linux only; macOS forbids it to processes using some of its libraries)
    if workers <= 1 or count < MIN_JOBS or not sys.platform.startswith("linux"):
        results = []
        for j in range(count):
            results.append(build(j))
            done()
        return results
    return _Pool(count, generate, min(workers, count) - 1).run(build, finish, done)


class _Pool:
    def __init__(self, count: int, generate: Callable[[int], object], forks: int):
        self.count, self.generate, self.forks = count, generate, forks
        self.received: queue.Queue = queue.Queue()
        self.children: list[int] = []
        self.readers: list[threading.Thread] = []
        self.ended = 0  # workers whose results have all arrived
        self.claims = -1  # the pipe of job numbers (its read end)

    def run(self, build, finish, done) -> list:
        results: list = [None] * self.count
        made = [False] * self.count
        taken: list[int] = []  # jobs the workers said they took, oldest first

        def take(item) -> None:
            j, what, generated, warned = item
            if what == _TAKEN:
                taken.append(j)
            elif not made[j]:  # (else this process did it meanwhile)
                for message, category, filename, lineno in warned:  # as if raised here
                    warnings.warn_explicit(message, category, filename, lineno)
                results[j] = build(j) if what == _FAILED else finish(j, generated)
                made[j] = True
                done()

        try:
            self._start()
            while (j := self._claim()) is not None:
                for item in self._arrived():  # the workers' first: they wait for none
                    take(item)
                results[j] = build(j)
                made[j] = True
                done()
            # No job is left to take. A worker's job this process then does too, the oldest
            # first, rather than wait: whichever ends first gives it (the same result), so a
            # slow job (or a worker given little of a loaded machine) holds nothing up.
            while True:
                for item in self._arrived():
                    take(item)
                if all(made):
                    break
                j = next((j for j in taken if not made[j]), None)
                if j is not None:
                    results[j] = build(j)
                    made[j] = True
                    done()
                elif self.ended == len(self.children):  # taken by a worker that died
                    j = made.index(False)
                    results[j] = build(j)
                    made[j] = True
                    done()
                else:
                    with contextlib.suppress(queue.Empty):
                        item = self.received.get(timeout=0.05)
                        if item is None:
                            self.ended += 1
                        else:
                            take(item)
            return results
        finally:
            self._stop()

    # -- this process -----------------------------------------------------------------------
    def _start(self) -> None:
        read, write = os.pipe()
        self.claims = read
        numbers = b"".join(_NUMBER.pack(j) for j in range(self.count))
        try:
            os.write(write, numbers)  # (a pipe holds 64 KiB: 16384 kernels)
        finally:
            os.close(write)  # an empty pipe then reads as its end: no more jobs
        for _ in range(self.forks):
            result_read, result_write = os.pipe()
            with warnings.catch_warnings():  # (3.12+: fork with threads; ours hold no locks)
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:
                os.close(result_read)
                self._work(result_write)  # never returns
            self.children.append(pid)
            os.close(result_write)
            reader = threading.Thread(
                target=self._read, args=(result_read,), name="tensorforge-build-results"
            )
            reader.start()
            self.readers.append(reader)

    def _claim(self) -> int | None:
        data = os.read(self.claims, _NUMBER.size)
        return _NUMBER.unpack(data)[0] if len(data) == _NUMBER.size else None

    def _arrived(self) -> list:
        items = []
        while True:
            try:
                item = self.received.get_nowait()
            except queue.Empty:
                return items
            if item is None:
                self.ended += 1
            else:
                items.append(item)

    def _read(self, fd: int) -> None:
        """(In a thread) the results one worker sends, into `received`; None at its end."""
        try:
            with os.fdopen(fd, "rb") as stream:
                while True:
                    head = stream.read(_LENGTH.size)
                    if len(head) < _LENGTH.size:
                        break
                    body = stream.read(_LENGTH.unpack(head)[0])
                    try:
                        self.received.put(pickle.loads(body))
                    except Exception:  # noqa: BLE001 - cut short: the worker died writing it
                        break
        finally:
            self.received.put(None)

    def _stop(self) -> None:
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGKILL)  # (done workers have exited: nothing to kill)
            except ProcessLookupError:
                pass
        for pid in self.children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        for reader in self.readers:
            reader.join()
        if self.claims >= 0:
            os.close(self.claims)
            self.claims = -1
        self.children, self.readers = [], []

    # -- a worker ---------------------------------------------------------------------------
    def _work(self, fd: int) -> None:
        """(In a forked worker) generate the jobs it claims and send them; exits, never returns."""
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: gone at once, no traceback
            # the collector leaves the inherited objects alone: walking them would copy every
            # page they lie on (fork shares them until written)
            gc.freeze()
            with os.fdopen(fd, "wb") as stream:
                while (j := self._claim()) is not None:
                    taken = pickle.dumps((j, _TAKEN, None, []))
                    stream.write(_LENGTH.pack(len(taken)) + taken)
                    stream.flush()
                    try:
                        with warnings.catch_warnings(record=True) as caught:
                            warnings.simplefilter("always")  # (this process's filters decide)
                            generated = self.generate(j)
                        warned = [
                            (str(w.message), w.category, w.filename, w.lineno) for w in caught
                        ]
                        body = pickle.dumps((j, _MADE, generated, warned))
                    except Exception:  # noqa: BLE001 - this process builds it, and raises
                        body = pickle.dumps((j, _FAILED, None, []))
                    stream.write(_LENGTH.pack(len(body)) + body)
                    stream.flush()
        finally:
            os._exit(0)
