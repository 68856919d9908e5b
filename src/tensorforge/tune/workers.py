"""Forked worker processes with hard timeouts: the isolation every measurement relies on.

Workers are forked (not spawned) so templates defined in `__main__`, a test module or an
interactive session exist in the worker with no extra step. A worker that raises, crashes or
hangs costs only the item it was working on.
"""

from __future__ import annotations

import ctypes
import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


def mp_context(method: str = "fork") -> Any:
    """A multiprocessing context: "fork" (the default) or "forkserver" where the platform has it.

    "forkserver" forks children from a clean server process instead of from this one: needed
    where this process may have initialized CUDA, which a forked child could not use. Its
    children get their arguments pickled; templates travel by name (see Template.__reduce__),
    and the server imports the main script first, so templates defined there exist in it too.
    """
    methods = multiprocessing.get_all_start_methods()
    if method not in methods:
        method = "fork" if "fork" in methods else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["__main__", "tensorforge.tune"])
    return ctx


# Parent ends of the pipes to live children. A forked child closes its copies of them: a child
# holding a sibling's parent end would keep that sibling from ever seeing EOF.
_parent_ends: dict[int, Any] = {}


def pipe(duplex: bool = False) -> tuple[Any, Any]:
    """(parent end, child end) of a new pipe; close the parent end with `close_parent`.

    Without `duplex`, the parent end receives and the child end sends.
    """
    parent, child = mp_context().Pipe(duplex=duplex)
    _parent_ends[id(parent)] = parent
    return parent, child


def close_parent(conn: Any) -> None:
    _parent_ends.pop(id(conn), None)
    conn.close()


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (a killed tuner leaves no orphans)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def _child_entry(target: Callable[..., Any], *args: Any) -> None:
    # Ctrl-C reaches the whole process group: the tuner (the parent) handles it and ends its
    # workers; a worker ignores it, so it prints no traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked across the fork (start_process): a Ctrl-C
        signal.pthread_sigmask(
            signal.SIG_UNBLOCK, {signal.SIGINT}
        )  # that came meanwhile is dropped
    _die_with_parent()
    for conn in list(_parent_ends.values()):
        try:
            conn.close()
        except OSError:
            pass
    _parent_ends.clear()
    # A crash is reported by the parent; no faulthandler dump from the child (pytest enables it).
    faulthandler.disable()
    target(*args)


def start_process(target: Callable[..., Any], args: tuple, method: str = "fork") -> Any:
    """Start `target(*args)` in a child process (see mp_context); returns the Process."""
    proc = mp_context(method).Process(target=_child_entry, args=(target, *args), daemon=True)
    # SIGINT stays blocked from the fork until the child ignores it: a Ctrl-C in between would
    # raise KeyboardInterrupt inside multiprocessing's bootstrap and print its traceback. The
    # parent gets its pending Ctrl-C as soon as the mask is restored.
    block = hasattr(signal, "pthread_sigmask")
    if block:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with warnings.catch_warnings():  # Python 3.12 warns about forking a threaded process
            warnings.simplefilter("ignore", DeprecationWarning)
            proc.start()
    finally:
        if block:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return proc


def kill(proc: Any) -> None:
    """End `proc` now (SIGKILL) and reap it."""
    if proc.is_alive():
        proc.kill()
    proc.join(timeout=5)


def death_message(proc: Any, when: str) -> str:
    """Why a child ended without answering: its signal or exit status."""
    proc.join(timeout=1)
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process crashed with {name} while {when}"
    return f"the process exited with status {code} while {when}"


def format_exception(error: BaseException) -> str:
    """`Type: message` plus the innermost frames, short enough for a log record."""
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    text = "".join(lines[-6:]).strip()
    return text[-2000:]


@dataclass
class Failure:
    """A worker item that did not produce a value."""

    kind: str  # "error" | "timeout" | "crash"
    message: str


def _call_child(conn: Any, fn: Callable[[], Any]) -> None:
    try:
        conn.send(("ok", fn()))
    except BaseException as e:  # noqa: BLE001 - report everything to the parent
        conn.send(("error", format_exception(e)))
    finally:
        conn.close()


def call_in_child(fn: Callable[[], Any], timeout: float, method: str = "fork") -> Any:
    """Run `fn()` in a child process and return its (picklable) result; raise on failure.

    With method "forkserver", `fn` must be picklable (e.g. a functools.partial of a module-level
    function)."""
    parent, child = pipe()
    proc = start_process(_call_child, (child, fn), method)
    child.close()
    try:
        if not parent.poll(timeout):
            raise TimeoutError(f"child process did not answer within {timeout} s")
        status, value = parent.recv()
    except EOFError:
        raise RuntimeError(death_message(proc, "running")) from None
    finally:
        kill(proc)
        close_parent(parent)
    if status != "ok":
        raise RuntimeError(value)
    return value


def _map_child(conn: Any, fn: Callable[[Any], Any], items: Sequence[Any], start: int) -> None:
    for k in range(start, len(items)):
        try:
            result = ("ok", fn(items[k]))
        except BaseException as e:  # noqa: BLE001
            result = ("error", format_exception(e))
        conn.send((k, result))
    conn.close()


def fork_map(
    fn: Callable[[Any], Any], items: Sequence[Any], n_workers: int, timeout: float
) -> list[Any]:
    """`[fn(x) for x in items]` over `n_workers` forked workers; a failed item gives a `Failure`.

    Each worker takes a contiguous chunk. An item that takes longer than `timeout` seconds or
    kills its worker becomes a Failure, and a fresh worker continues with the rest of the chunk.
    """
    items = list(items)
    results: list[Any] = [None] * len(items)
    if not items:
        return results
    n_workers = max(1, min(n_workers, len(items)))
    bounds = [len(items) * w // n_workers for w in range(n_workers + 1)]
    chunks = [list(range(bounds[w], bounds[w + 1])) for w in range(n_workers)]
    workers: dict[Any, list] = {}  # conn -> [proc, chunk, next position, deadline]

    def launch(chunk: list[int], position: int) -> None:
        if position >= len(chunk):
            return
        parent, child = pipe()
        sub = [items[k] for k in chunk]
        proc = start_process(_map_child, (child, fn, sub, position))
        child.close()
        workers[parent] = [proc, chunk, position, time.monotonic() + timeout]

    for chunk in chunks:
        launch(chunk, 0)
    try:
        while workers:
            now = time.monotonic()
            wait_for = max(0.0, min(w[3] for w in workers.values()) - now)
            multiprocessing.connection.wait(list(workers), timeout=wait_for)
            for conn in list(workers):
                proc, chunk, position, deadline = workers[conn]
                restart = None
                try:
                    while position < len(chunk) and conn.poll():
                        k, (status, value) = conn.recv()
                        results[chunk[k]] = value if status == "ok" else Failure("error", value)
                        position = k + 1
                        deadline = time.monotonic() + timeout
                    if position >= len(chunk):
                        del workers[conn]
                        close_parent(conn)
                        proc.join(timeout=5)
                        continue
                    if time.monotonic() > deadline:
                        kill(proc)
                        results[chunk[position]] = Failure(
                            "timeout", f"took longer than {timeout} s"
                        )
                        restart = position + 1
                    workers[conn][2:] = [position, deadline]
                except EOFError:
                    results[chunk[position]] = Failure("crash", death_message(proc, "working"))
                    restart = position + 1
                if restart is not None:
                    del workers[conn]
                    close_parent(conn)
                    kill(proc)
                    launch(chunk, restart)
    finally:
        for conn, (proc, *_rest) in workers.items():
            kill(proc)
            close_parent(conn)
    return results


def iter_chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
