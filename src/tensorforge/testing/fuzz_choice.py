"""Where the fuzzer's random decisions come from: a seeded `random.Random`, or hypothesis.

Generators ask a Chooser, never a random module, so one generator serves both the command line
(plain seeded draws, shrunk by `fuzz.shrink`) and the test suite (hypothesis draws, which
hypothesis shrinks itself). Every choice shrinks towards its first option / lowest value, so
list the simplest option first.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# sizes worth hitting often: 1 (degenerate loops), primes (never divisible), powers of two
SPECIAL_SIZES = (1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 17, 23, 29, 31, 32, 37, 40)


class Chooser:
    """The decisions a generator can ask for."""

    def integer(self, lo: int, hi: int) -> int:  # inclusive
        raise NotImplementedError

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def chance(self, p: float) -> bool:
        """True with probability about p (shrinks to False)."""
        return self.integer(0, 999) >= round(1000 * (1 - p))

    def size(self, hi: int = 40) -> int:
        """A dimension in [1, hi]: often a special size (1, a prime, a power of two)."""
        if self.chance(0.5):
            return self.choice([s for s in SPECIAL_SIZES if s <= hi] or [1])
        return self.integer(1, hi)

    def subset(self, options: Sequence[T], p: float = 0.5) -> list[T]:
        return [o for o in options if self.chance(p)]


class RandomChooser(Chooser):
    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


class HypothesisChooser(Chooser):
    """Draws through hypothesis's `draw`, so failing examples shrink."""

    def __init__(self, draw: Any):
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))
