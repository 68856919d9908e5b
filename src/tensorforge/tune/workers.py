"""Forked worker processes with hard timeouts: the isolation every measurement relies on.

Workers are forked (not spawned) so templates defined in `__main__`, a test module or an
interactive session exist in the worker with no extra step. A worker that raises, crashes or
hangs costs only the item it was working on.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence


def mp_context() -> Any:
    """The multiprocessing context: "fork" where the platform has it."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _child_entry(target: Callable[..., Any], *args: Any) -> None:
    # A crash is reported by the parent; no faulthandler dump from the child (pytest enables it).
    faulthandler.disable()
    target(*args)


def start_process(target: Callable[..., Any], args: tuple) -> Any:
    """Start `target(*args)` in a forked child; returns the Process."""
    proc = mp_context().Process(target=_child_entry, args=(target, *args), daemon=True)
    with warnings.catch_warnings():  # Python 3.12 warns about forking a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        proc.start()
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


def call_in_child(fn: Callable[[], Any], timeout: float) -> Any:
    """Run `fn()` in a forked child and return its (picklable) result; raise on failure."""
    parent, child = mp_context().Pipe(duplex=False)
    proc = start_process(_call_child, (child, fn))
    child.close()
    try:
        if not parent.poll(timeout):
            raise TimeoutError(f"child process did not answer within {timeout} s")
        status, value = parent.recv()
    except EOFError:
        raise RuntimeError(death_message(proc, "running")) from None
    finally:
        kill(proc)
        parent.close()
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
        parent, child = mp_context().Pipe(duplex=False)
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
                        conn.close()
                        proc.join(timeout=5)
                        continue
                    if time.monotonic() > deadline:
                        kill(proc)
                        results[chunk[position]] = Failure("timeout", f"took longer than {timeout} s")
                        restart = position + 1
                    workers[conn][2:] = [position, deadline]
                except EOFError:
                    results[chunk[position]] = Failure("crash", death_message(proc, "working"))
                    restart = position + 1
                if restart is not None:
                    del workers[conn]
                    conn.close()
                    kill(proc)
                    launch(chunk, restart)
    finally:
        for conn, (proc, *_rest) in workers.items():
            kill(proc)
            conn.close()
    return results


def iter_chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
