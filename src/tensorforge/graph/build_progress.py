"""Progress of a model's kernel builds on stderr: a model of many kernels takes tens of seconds
to schedule, lower and compile (RegNetY-400MF's 63 distinct kernels on this 2-core CPU: 47 s,
the machine loaded, or half that on both cores: runtime/build_workers.py), which torch.compile
otherwise spends in silence. The count is of distinct kernels (kernels alike share one build).
Nothing is printed for builds shorter than QUIET_SECONDS; after that a line every
EVERY_SECONDS, and one when done. Ctrl-C says how far it got and what a new compile reuses.
TENSORFORGE_PROGRESS=0 silences it."""

from __future__ import annotations

import os
import sys
import time

QUIET_SECONDS = 5.0
EVERY_SECONDS = 10.0


class BuildProgress:
    def __init__(self, total: int, target) -> None:
        self.total, self.done = total, 0
        self.kind = "CUDA" if target.kind == "cuda" else "CPU"
        self.start = self.last = time.perf_counter()
        self.shown = False
        self.enabled = os.environ.get("TENSORFORGE_PROGRESS", "1") not in ("0", "")

    def _say(self, text: str) -> None:
        if self.enabled:
            print(f"tensorforge: {text}", file=sys.stderr, flush=True)
            self.shown = True

    def __enter__(self) -> BuildProgress:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.finish()
        elif issubclass(kind, KeyboardInterrupt):
            self.interrupted()

    def step(self) -> None:
        """One more kernel built."""
        self.done += 1
        now = time.perf_counter()
        if now - self.start >= QUIET_SECONDS and (
            not self.shown or now - self.last >= EVERY_SECONDS
        ):
            self.last = now
            self._say(
                f"built {self.done} of {self.total} {self.kind} kernels ({now - self.start:.0f} s)"
            )

    def finish(self) -> None:
        if self.shown:
            self._say(
                f"built {self.total} {self.kind} kernels in {time.perf_counter() - self.start:.0f} s"
            )

    def interrupted(self) -> None:
        self._say(
            f"compile interrupted after {self.done} of {self.total} kernels "
            f"({time.perf_counter() - self.start:.0f} s); compiling again schedules them anew, "
            f"and the ones already compiled to machine code load from the kernel cache"
        )
