"""The on-disk cache of compiled CPU kernels: one shared library per kernel, so another process
building the same kernel loads it instead of compiling it again (for the kinds whose runtime
entry is `disk_cacheable`, registry.py).

An entry is the file export_library writes (library_file.py), named by a hash of the kernel's
source text, entry, params, the full target string (CPU and features), the tensorforge version and
the file format. Entries are written to a temporary file and renamed into place (atomic:
concurrent processes see a whole entry or none), checked (sha256) before every load, and a
damaged one is deleted and rebuilt, never loaded. Least recently used entries (by mtime, which a
hit refreshes) go when the folder grows past its bound.

Writing an llvm entry costs object code plus a link by the C compiler (~50-150 ms), so a miss
returns the JIT-compiled kernel at once and a background thread writes the entry (write-behind):
`tf.build` does not wait for it. That thread keeps off LLVM while kernels are being compiled
(llvmlite allows one LLVM call at a time per process), runs the compiler at low priority, stops
while Module.time_evaluator measures and before fork() (so no thread of ours is inside LLVM or
the compiler in the child), and is not a daemon: a short script still leaves its entries behind.
Without a C compiler nothing is written.

Settings, read at each build: TENSORFORGE_CACHE=0 turns the cache off; TENSORFORGE_CACHE_DIR
(default $XDG_CACHE_HOME/tensorforge, i.e. ~/.cache/tensorforge); TENSORFORGE_CACHE_MAX_MB
(default 512).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorforge.errors import TensorForgeError
from tensorforge.runtime import library_file
from tensorforge.runtime.registry import runtime_for
from tensorforge.runtime.shared_lib import c_compiler

if TYPE_CHECKING:
    from tensorforge.codegen.base import KernelSource
    from tensorforge.target import Target

DEFAULT_MAX_MB = 512
IDLE_S = 0.1  # the writer makes object code once no compile has run for this long
MAX_PENDING = 16
STALE_TEMPORARY_S = 3600  # a writer's temporary file this old was left by a killed process
_OFF = ("0", "false", "no", "off")


@dataclass
class Stats:
    """What this process's disk cache did: loads, compiles, entries written, entries refused."""

    hits: int = 0
    misses: int = 0
    writes: int = 0
    rejected: int = 0  # damaged or mismatched entries deleted instead of loaded
    write_errors: int = 0
    last_error: str = ""


STATS = Stats()


# -- settings -------------------------------------------------------------------------------------
def enabled() -> bool:
    return os.environ.get("TENSORFORGE_CACHE", "1").strip().lower() not in _OFF


def cache_dir() -> str:
    """$TENSORFORGE_CACHE_DIR, else $XDG_CACHE_HOME/tensorforge, else ~/.cache/tensorforge."""
    configured = os.environ.get("TENSORFORGE_CACHE_DIR", "").strip()
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.expanduser("~/.cache")
    return os.path.join(base, "tensorforge")


def max_bytes() -> int:
    try:
        return int(float(os.environ.get("TENSORFORGE_CACHE_MAX_MB", DEFAULT_MAX_MB)) * 2**20)
    except ValueError:  # NOTE: a typo in a setting must not break builds
        return DEFAULT_MAX_MB * 2**20


def kernels_dir() -> str:
    return os.path.join(cache_dir(), "kernels")


def entry_key(memory_key: tuple[str, str]) -> str:
    """The file name's hash: the in-memory key (source hash, target string) + versions."""
    digest, target = memory_key
    parts = (str(library_file.FORMAT_VERSION), library_file.tensorforge_version(), digest, target)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# -- the cache ------------------------------------------------------------------------------------
def load_or_compile(
    source: KernelSource,
    target: Target | str,
    factory: Callable[[KernelSource, Target | str], object],
    memory_key: tuple[str, str],
) -> object:
    """The kernel's executable from its disk entry, or `factory(source, target)` (then written)."""
    if not enabled():
        return factory(source, target)
    key = entry_key(memory_key)
    path = os.path.join(kernels_dir(), f"{key}.so")
    executable = _load(path, key, source)
    if executable is not None:
        STATS.hits += 1
        return executable
    STATS.misses += 1
    with WRITER.compiling():
        executable = factory(source, target)
    # Only what can make its entry is written (test doubles and others cannot).
    if hasattr(executable, "cache_entry") and c_compiler() is not None:
        WRITER.submit(_Job(path, key, source, target, executable))
    return executable


def _load(path: str, key: str, source: KernelSource) -> object | None:
    try:
        file = library_file.read(path)
    except TensorForgeError:
        if os.path.exists(path):  # there, but damaged: never load it, build it again
            _reject(path)
        return None
    metadata = file.metadata
    functions = metadata.get("functions") or [{}]
    if (
        metadata.get("kind") != source.target
        or metadata.get("cache_key") != key
        or len(functions) != 1
        or functions[0].get("entry") != source.entry
    ):
        _reject(path)
        return None
    try:
        [(_, executable)] = runtime_for(source.target).load_library(file, {source.entry: source})
    except TensorForgeError:
        _reject(path)
        return None
    try:
        os.utime(path)  # least recently used goes first: a hit makes the entry recent
    except OSError:
        pass
    return executable


def _reject(path: str) -> None:
    STATS.rejected += 1
    try:
        os.unlink(path)
    except OSError:
        pass


def flush() -> None:
    """Write every entry this process has queued, and wait for them."""
    WRITER.flush()


def clear() -> None:
    """Delete every entry (after the queued ones are written)."""
    flush()
    folder = kernels_dir()
    if os.path.isdir(folder):
        for entry in os.scandir(folder):
            try:
                os.unlink(entry.path)
            except OSError:
                pass


# -- writing, in the background -------------------------------------------------------------------
@dataclass
class _Job:
    path: str
    key: str
    source: KernelSource
    target: Target | str
    executable: object


def _write(job: _Job) -> None:
    metadata = {"target": str(job.target), "entry": job.source.entry, "cache_key": job.key}
    data = job.executable.cache_entry(metadata)
    folder = os.path.dirname(job.path)
    os.makedirs(folder, exist_ok=True)
    library_file.write_atomically(job.path, data)
    STATS.writes += 1
    _evict(folder, max_bytes())


def _evict(folder: str, limit: int) -> None:
    """Delete the least recently used entries until the folder holds at most `limit` bytes."""
    entries, total, now = [], 0, time.time()
    for entry in os.scandir(folder):
        try:
            info = entry.stat()
        except OSError:
            continue
        if entry.name.startswith(".tmp-"):
            if now - info.st_mtime > STALE_TEMPORARY_S:
                _unlink(entry.path)
        elif entry.name.endswith(".so"):
            entries.append((info.st_mtime, info.st_size, entry.path))
            total += info.st_size
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        _unlink(path)
        total -= size


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:  # another process removed it first
        pass


class _Writer:
    """Entries waiting to be written, and the one thread that writes them.

    The thread starts on demand and ends when nothing is left (a process that builds nothing
    new has no extra thread). It makes object code only once no kernel has been compiled for
    IDLE_S: llvmlite runs one LLVM call at a time per process, so object code made beside a
    compile would make that compile wait. At most MAX_PENDING entries wait; beyond that a
    kernel is simply not written (a long burst of builds, e.g. a fuzzer's, is not worth it).
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._jobs: collections.deque[_Job] = collections.deque()
        self._thread: threading.Thread | None = None
        self._compiling = 0
        self._last_compile = 0.0  # time.monotonic() when the last compile ended
        self._suspended = 0
        self._hurry = 0

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Mark a compile in progress (the writer keeps off LLVM meanwhile)."""
        with self._cond:
            self._compiling += 1
        try:
            yield
        finally:
            with self._cond:
                self._compiling -= 1
                self._last_compile = time.monotonic()
                self._cond.notify_all()

    def submit(self, job: _Job) -> None:
        with self._cond:
            if len(self._jobs) < MAX_PENDING:
                self._jobs.append(job)
                self._start()

    def _start(self) -> None:  # NOTE: called with self._cond held
        if self._thread is None and self._jobs and not self._suspended:
            # NOTE: not a daemon: the interpreter waits for it at exit, so a short script
            # still leaves its entries behind.
            self._thread = threading.Thread(target=self._run, name="tensorforge-disk-cache")
            self._thread.start()

    def _next_job(self) -> _Job | None:
        with self._cond:
            while True:
                if self._suspended or not self._jobs:
                    self._thread = None
                    self._cond.notify_all()
                    return None
                quiet = time.monotonic() - self._last_compile
                exiting = not threading.main_thread().is_alive()  # no compile comes any more
                if self._hurry or exiting or (not self._compiling and quiet >= IDLE_S):
                    return self._jobs.popleft()
                self._cond.wait(None if self._compiling else IDLE_S - quiet)

    def _run(self) -> None:
        while (job := self._next_job()) is not None:
            try:
                _write(job)
            except Exception as err:  # noqa: BLE001 - the cache is best effort, never an error
                # NOTE: no logging here: logging's locks are taken around fork(), which waits
                # for this thread.
                STATS.write_errors += 1
                STATS.last_error = f"{job.source.entry}: {type(err).__name__}: {err}"

    def flush(self) -> None:
        """Write everything queued, now (without waiting for compiles to pause)."""
        with self._cond:
            self._hurry += 1
            self._cond.notify_all()
        try:
            while True:
                with self._cond:
                    self._start()
                    thread = self._thread
                if thread is None or thread is threading.current_thread():
                    return
                thread.join()
        finally:
            with self._cond:
                self._hurry -= 1

    def suspend(self) -> None:
        """Let the entry being written finish, then stop the thread (before fork or timing)."""
        with self._cond:
            self._suspended += 1
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def resume(self) -> None:
        with self._cond:
            self._suspended -= 1
            self._start()


WRITER = _Writer()
# A forked child starts with an empty queue (the parent writes what it queued), and no thread
# of ours is inside LLVM or the C compiler while the process forks.
os.register_at_fork(
    before=WRITER.suspend, after_in_parent=WRITER.resume, after_in_child=WRITER._reset
)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """No entry is written inside this block (timing uses it: a write would share the CPUs)."""
    WRITER.suspend()
    try:
        yield
    finally:
        WRITER.resume()
