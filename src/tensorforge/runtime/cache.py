"""An in-memory LRU cache of compiled executables, keyed by a hash of the source and the target;
kernels it misses go on to the on-disk cache (disk_cache.py) before being compiled, where their
runtime entry is `disk_cacheable`."""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from tensorforge.runtime import disk_cache
from tensorforge.runtime.packed_func import PACKED_SYMBOL
from tensorforge.runtime.registry import runtime_for

if TYPE_CHECKING:
    from tensorforge.codegen.base import KernelSource
    from tensorforge.target import Target

Executable = TypeVar("Executable")


def cache_key(source: KernelSource, target: Target | str) -> tuple[str, str]:
    """(sha256 of everything the executable is made from, full target string)."""
    digest = hashlib.sha256()
    # NOTE: the text is nearly everything; entry, params and launch geometry are what the
    # executable also reads, so equal keys always mean interchangeable executables.
    for part in (
        source.text,
        source.target,
        source.entry,
        repr(source.params),
        repr(source.launch),
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest(), str(target)


class ExecutableCache:
    """At most `maxsize` executables, least recently used evicted first; safe across threads."""

    def __init__(self, maxsize: int = 256):
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[str, str], object] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_compile(
        self,
        source: KernelSource,
        target: Target | str,
        factory: Callable[[KernelSource, Target | str], Executable],
    ) -> Executable:
        """The cached executable for (source, target), or `factory(source, target)` stored."""
        key = cache_key(source, target)
        with self._lock:
            if key in self._entries:
                self.hits += 1
                self._entries.move_to_end(key)
                return self._entries[key]
            self.misses += 1
        # Compile outside the lock so one slow compile does not stall other threads' hits.
        executable = factory(source, target)
        with self._lock:
            executable = self._entries.setdefault(key, executable)  # a racing thread may have won
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return executable

    def forget(self, executable: object) -> None:
        """Drop the entries holding `executable` (one whose code was built but then failed to
        compile or load, so that building that source again compiles it again)."""
        with self._lock:
            for key in [k for k, v in self._entries.items() if v is executable]:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


EXECUTABLES = ExecutableCache(maxsize=256)  # the process-wide cache Module.from_sources uses


def get_or_compile(
    source: KernelSource,
    target: Target | str,
    factory: Callable[[KernelSource, Target | str], Executable],
) -> Executable:
    """`EXECUTABLES.get_or_compile(source, target, factory)`; the disk is asked first where the
    kind's runtime entry is `disk_cacheable`."""
    # NOTE: a kernel calling packed functions reaches them through this process's callback,
    # which a library on disk could not link to: it stays in memory only
    if runtime_for(source.target).disk_cacheable and PACKED_SYMBOL not in source.text:
        factory = functools.partial(
            disk_cache.load_or_compile, factory=factory, memory_key=cache_key(source, target)
        )
    return EXECUTABLES.get_or_compile(source, target, factory)
