"""Decisions: every choice a sketch rule makes, by key, sampled at random or given.

The rules ask for a choice (`choice`) or a tile factorization (`tile`) under a key naming the stage
and what it is for ("tile:2.C", "loc:1.exp"). A value given in `fixed` (a replayed or mutated
schedule) is used where it is still legal; any other is asked of the `policy` (the analytic first
guess) or drawn from the seeded generator. `used` holds what was actually chosen, so a schedule is
its decisions: regenerate from them and the same steps come out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np


class Policy(Protocol):
    """Answers decisions by reasoning instead of sampling (tune/auto/analytic.py); None: sample."""

    def choice(self, key: str, options: Sequence[Any], hint: dict) -> Any: ...

    def tile(self, key: str, extents: Sequence[int], levels: int, hint: dict) -> Any: ...


class Decisions:
    def __init__(
        self,
        rng: np.random.Generator | int | None = None,
        fixed: dict | None = None,
        policy: Policy | None = None,
    ):
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.fixed = dict(fixed or {})
        self.policy = policy
        self.used: dict[str, Any] = {}
        self.draws = 0  # values drawn from rng (0: the schedule is a function of `fixed`)

    def choice(self, key: str, options: Sequence[Any], hint: dict | None = None) -> Any:
        """One of `options` (JSON values)."""
        options = list(options)
        value = self.fixed.get(key, _MISSING)
        if value is _MISSING or value not in options:
            value = None
            if self.policy is not None:
                value = self.policy.choice(key, options, hint or {})
            if value is None or value not in options:
                value = options[int(self.rng.integers(len(options)))]
                self.draws += 1
        self.used[key] = value
        return value

    def tile(
        self, key: str, extents: Sequence[int], levels: int, hint: dict | None = None
    ) -> list[list[int]]:
        """For each extent, the `levels - 1` inner loop extents of a `levels`-deep split (the
        outermost level covers the rest, ceil-divided)."""
        value = self.fixed.get(key, _MISSING)
        if not _valid_tiles(value, extents, levels):
            value = None
            if self.policy is not None:
                value = self.policy.tile(key, extents, levels, hint or {})
            if not _valid_tiles(value, extents, levels):
                value = [sample_tile(self.rng, e, levels) for e in extents]
                self.draws += 1
        value = [[int(f) for f in factors] for factors in value]
        self.used[key] = value
        return value


_MISSING = object()


def _valid_tiles(value: Any, extents: Sequence[int], levels: int) -> bool:
    if not isinstance(value, (list, tuple)) or len(value) != len(extents):
        return False
    for factors, extent in zip(value, extents):
        if not isinstance(factors, (list, tuple)) or len(factors) != levels - 1:
            return False
        if not all(isinstance(f, (int, np.integer)) and f >= 1 for f in factors):
            return False
        if math.prod(factors) > extent and not _one_padded_tile(factors, extent):
            return False
    return True


def _one_padded_tile(factors: Sequence[int], extent: int) -> bool:
    """One innermost tile a little wider than the whole axis: a vector tile rounded up to whole
    or power-of-two vectors, its lanes past the extent masked off (analytic.cpu_tiles)."""
    return math.prod(factors[:-1]) == 1 and extent <= factors[-1] < 2 * extent


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def sample_tile(rng: np.random.Generator, extent: int, levels: int) -> list[int]:
    """Inner extents for a `levels`-deep split of `extent`: mostly a perfect factorization (every
    loop exact), sometimes powers of two that leave a tail (so prime extents get tiled too)."""
    inner = levels - 1
    factors = [1] * inner
    if inner == 0:
        return factors
    perfect = rng.random() < 0.8 or extent in (1, 2, 3)
    remaining = extent
    for level in rng.permutation(inner):
        if perfect:
            choices = divisors(remaining)
            factors[level] = int(choices[int(rng.integers(len(choices)))])
            remaining //= factors[level]
        else:
            top = max(0, int(math.log2(max(1, remaining))))
            factors[level] = 2 ** int(rng.integers(top + 1))
            remaining //= factors[level]  # (floor: the inner loops never reach past the extent)
    return factors


def mutate_tile(rng: np.random.Generator, value: list[list[int]], extents: Sequence[int]) -> Any:
    """Move a prime factor between two levels of one axis (the outermost level included), or
    resample that axis: the neighbourhood Ansor's tile-size mutation walks."""
    value = [list(f) for f in value]
    candidates = [a for a, e in enumerate(extents) if e > 1 and value[a]]
    if not candidates:
        return value
    axis = candidates[int(rng.integers(len(candidates)))]
    factors, extent = value[axis], extents[axis]
    outer = -(-extent // math.prod(factors))
    levels = [outer, *factors]
    if rng.random() < 0.2 or math.prod(levels) != extent:
        value[axis] = sample_tile(rng, extent, len(levels))
        return value
    sources = [k for k, f in enumerate(levels) if f > 1]
    src = sources[int(rng.integers(len(sources)))]
    dst = int(rng.integers(len(levels) - 1))
    dst = dst if dst < src else dst + 1
    prime = _smallest_prime(levels[src]) if rng.random() < 0.5 else _largest_prime(levels[src])
    levels[src] //= prime
    levels[dst] *= prime
    value[axis] = levels[1:]
    return value


def _smallest_prime(n: int) -> int:
    for p in range(2, math.isqrt(n) + 1):
        if n % p == 0:
            return p
    return n


def _largest_prime(n: int) -> int:
    last, p = 1, 2
    while p * p <= n:
        while n % p == 0:
            last, n = p, n // p
        p += 1
    return max(last, n) if n > 1 else last
