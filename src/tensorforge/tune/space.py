"""Config spaces: the knobs a template defines, and configs (one choice per knob) as plain data.

A template calls `cfg.define_split(...)`, `cfg.define_knob(...)` ... on the config that
`tune.get_config()` returns. While the space is being defined (a `ConfigSpace`), each knob reads
as its first choice, so the defining run also builds the default schedule. Under a tuner, the
config is a `ConfigEntity`: its `define_*` calls do nothing and `cfg[name]` is the chosen entity.

Configs are numbered as TVM numbers them: mixed radix over the knobs in definition order, the
first knob varying fastest, so `len(space)` is the product of the knob sizes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

# -- helpers ------------------------------------------------------------------------------------


def get_factors(n: int) -> list[int]:
    """All divisors of `n`, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def get_pow2s(n: int) -> list[int]:
    """1, 2, 4, ... up to `n`."""
    return [2**e for e in range(int(math.log2(n)) + 1)] if n >= 1 else [1]


def _axis_extent(axis: Any, what: str) -> int:
    """The constant extent of an IterVar (or an int standing for one)."""
    if isinstance(axis, int):
        return axis
    dom = getattr(axis, "dom", None)
    extent = getattr(dom, "extent", None)
    value = getattr(extent, "value", None)
    if not isinstance(value, int):
        name = getattr(axis, "name", axis)
        raise ValueError(f"{what}: axis '{name}' needs a constant extent to be tuned, got {extent}")
    return value


def _stage(s: Any, op: Any) -> Any:
    return s[op]


# -- one knob: the space of its choices and the chosen entity ----------------------------------


class KnobSpace:
    """The choices of one knob. Subclasses fill `entities`."""

    kind = "knob"
    entities: list[Any]

    def __len__(self) -> int:
        return len(self.entities)

    def __getitem__(self, index: int) -> Any:
        return self.entities[index]

    def index_of(self, choice_json: Any) -> int | None:
        """The index of the entity whose JSON form is `choice_json` (None if there is none)."""
        for i, entity in enumerate(self.entities):
            if entity.to_json() == choice_json:
                return i
        return None

    def describe(self) -> str:
        return self.kind


class SplitEntity:
    """One way to split an axis: `size` lists the extents of the loops, outermost first.

    `size[0]` is the outer extent (ceil of the axis extent over the product of the rest).
    """

    def __init__(self, size: Sequence[int]):
        self.size = list(size)

    def apply(self, s: Any, op: Any, axis: Any) -> list[Any]:
        """Split `axis` of `s[op]` into len(size) loops; returns them, outermost first."""
        stage = _stage(s, op)
        loops = []
        for i in range(1, len(self.size)):
            outer, axis = stage.split(axis, factor=math.prod(self.size[i:]))
            loops.append(outer)
        return loops + [axis]

    def to_json(self) -> list[int]:
        return list(self.size)

    def __repr__(self) -> str:
        return f"split{self.size}"


class SplitSpace(KnobSpace):
    """Factorizations of an axis extent into `num_outputs` loops (TVM's policies).

    "factors": inner extents multiply to a divisor of the extent (no tail);
    "power2": inner extents are powers of two (a tail where they don't divide);
    "verbose": both candidate sets together.
    """

    kind = "split"

    def __init__(self, extent: int, num_outputs: int, policy: str, max_factor: int | None):
        if num_outputs < 2:
            raise ValueError(f"define_split: num_outputs must be >= 2, got {num_outputs}")
        if extent < 1:
            raise ValueError(f"define_split: the axis extent must be >= 1, got {extent}")
        if policy == "factors":
            candidates, no_tail = get_factors(extent), True
        elif policy == "power2":
            candidates, no_tail = get_pow2s(extent), False
        elif policy == "verbose":
            candidates, no_tail = sorted(set(get_factors(extent)) | set(get_pow2s(extent))), False
        else:
            raise ValueError(
                f"define_split: policy must be 'factors', 'power2' or 'verbose', got {policy!r}"
            )
        if max_factor is not None:
            candidates = [f for f in candidates if f <= max_factor]
        self.extent, self.num_outputs, self.policy, self.max_factor = (
            extent,
            num_outputs,
            policy,
            max_factor,
        )
        self.entities = []
        self._generate(candidates, [], no_tail)

    def _generate(self, candidates: list[int], stack: list[int], no_tail: bool) -> None:
        """Depth-first over the inner extents, as TVM's SplitSpace does (so indices match TVM's)."""
        if len(stack) == self.num_outputs - 1:
            prod = math.prod(stack)
            if prod <= self.extent and (self.extent % prod == 0 or not no_tail):
                inner = stack[::-1]
                self.entities.append(SplitEntity([-(-self.extent // prod)] + inner))
            return
        for factor in candidates:
            if math.prod(stack) * factor > self.extent:
                break  # candidates ascend: every later factor overshoots too
            stack.append(factor)
            self._generate(candidates, stack, no_tail)
            stack.pop()

    def describe(self) -> str:
        extra = f", max_factor={self.max_factor}" if self.max_factor is not None else ""
        return f"split(extent={self.extent}, num_outputs={self.num_outputs}, policy={self.policy}{extra})"


class ReorderEntity:
    """A permutation of the axes given to define_reorder: `perm[i]` is the axis placed i-th."""

    def __init__(self, perm: Sequence[int]):
        self.perm = list(perm)

    def apply(self, s: Any, op: Any, axes: Sequence[Any]) -> list[Any]:
        ordered = [axes[i] for i in self.perm]
        _stage(s, op).reorder(*ordered)
        return ordered

    def to_json(self) -> list[int]:
        return list(self.perm)

    def __repr__(self) -> str:
        return f"reorder{self.perm}"


class ReorderSpace(KnobSpace):
    """Orders of a list of axes: every permutation ("all") or a given list ("candidate")."""

    kind = "reorder"

    def __init__(self, axes: Sequence[Any], policy: str, candidate: Sequence[Sequence[Any]] | None):
        self.num_axes, self.policy = len(axes), policy
        if policy == "all":
            self.entities = [ReorderEntity(p) for p in itertools.permutations(range(len(axes)))]
        elif policy == "candidate":
            if not candidate:
                raise ValueError("define_reorder: policy 'candidate' needs candidate=[order, ...]")
            self.entities = [ReorderEntity(_positions(axes, order)) for order in candidate]
        elif policy == "identity":
            self.entities = [ReorderEntity(range(len(axes)))]
        else:
            raise ValueError(f"define_reorder: policy must be 'all' or 'candidate', got {policy!r}")

    def describe(self) -> str:
        return f"reorder(axes={self.num_axes}, policy={self.policy})"


def _positions(axes: Sequence[Any], order: Sequence[Any]) -> list[int]:
    positions = []
    for ax in order:
        found = [i for i, a in enumerate(axes) if a is ax or (isinstance(ax, int) and ax == i)]
        if not found:
            raise ValueError(f"define_reorder: candidate axis {ax!r} is not one of the axes given")
        positions.append(found[0])
    if sorted(positions) != list(range(len(axes))):
        raise ValueError("define_reorder: each candidate must order every axis exactly once")
    return positions


_ANNOTATIONS = {
    "try_unroll": ["none", "unroll"],
    "try_vec": ["none", "vec"],
    "try_unroll_vec": ["none", "unroll", "vec"],
}


class AnnotateEntity:
    """One annotation per axis: "none", "unroll" or "vec"."""

    def __init__(self, anns: Sequence[str]):
        self.anns = list(anns)

    def apply(
        self,
        s: Any,
        op: Any,
        axes: Sequence[Any],
        axis_lens: Sequence[int] | None = None,
        max_unroll: int | None = None,
    ) -> list[Any]:
        """Annotate `axes` of `s[op]`; an unroll longer than `max_unroll` (given `axis_lens`) is skipped."""
        stage = _stage(s, op)
        for i, (axis, ann) in enumerate(zip(axes, self.anns)):
            if ann == "unroll":
                if max_unroll is None or axis_lens is None or axis_lens[i] <= max_unroll:
                    stage.unroll(axis)
            elif ann == "vec":
                stage.vectorize(axis)
        return list(axes)

    def to_json(self) -> list[str]:
        return list(self.anns)

    def __repr__(self) -> str:
        return f"annotate{self.anns}"


class AnnotateSpace(KnobSpace):
    """Per-axis annotations; at most one axis is vectorized (as in TVM)."""

    kind = "annotate"

    def __init__(self, axes: Sequence[Any], policy: str):
        if policy not in _ANNOTATIONS:
            raise ValueError(
                f"define_annotate: policy must be one of {', '.join(_ANNOTATIONS)}, got {policy!r}"
            )
        self.num_axes, self.policy = len(axes), policy
        choices = [_ANNOTATIONS[policy]] * len(axes)
        self.entities = [
            AnnotateEntity(anns) for anns in itertools.product(*choices) if anns.count("vec") <= 1
        ]

    def describe(self) -> str:
        return f"annotate(axes={self.num_axes}, policy={self.policy})"


class OtherOptionEntity:
    """A choice among listed values: read it as `.val`."""

    def __init__(self, val: Any):
        self.val = val

    def to_json(self) -> Any:
        return self.val

    def __repr__(self) -> str:
        return repr(self.val)


class OtherOptionSpace(KnobSpace):
    """`define_knob(name, values)`: one of the listed values."""

    kind = "knob"

    def __init__(self, values: Sequence[Any]):
        values = list(values)
        if not values:
            raise ValueError("define_knob: values must not be empty")
        self.values = values
        self.entities = [OtherOptionEntity(v) for v in values]

    def describe(self) -> str:
        return f"knob({self.values})"


# -- the config a template sees ----------------------------------------------------------------


class _ConfigBase:
    """What ConfigSpace and ConfigEntity share: `cfg[name]`, flop counting."""

    def __init__(self) -> None:
        self._entity_map: dict[str, Any] = {}
        self.flop = 0.0

    def __getitem__(self, name: str) -> Any:
        try:
            return self._entity_map[name]
        except KeyError:
            known = ", ".join(self._entity_map) or "none"
            raise KeyError(f"config has no knob {name!r} (knobs: {known})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._entity_map

    def add_flop(self, flop: float) -> None:
        """Count `flop` floating-point operations for this workload (overrides the estimate)."""
        self.flop += float(flop)


class ConfigSpace(_ConfigBase):
    """The space a template defines. While defining, `cfg[name]` is that knob's first choice."""

    def __init__(self) -> None:
        super().__init__()
        self.space_map: dict[str, KnobSpace] = {}
        self.is_fallback = True  # a template run under a bare ConfigSpace uses the default config

    # -- defining knobs ---------------------------------------------------------------------------
    def define_split(
        self,
        name: str,
        axis: Any,
        num_outputs: int = 2,
        policy: str = "factors",
        max_factor: int | None = None,
    ) -> None:
        """Split `axis` (an IterVar of constant extent, or an int extent) into `num_outputs` loops."""
        extent = _axis_extent(axis, f"define_split('{name}')")
        self._add(name, SplitSpace(extent, num_outputs, policy, max_factor))

    def define_reorder(
        self, name: str, axes: Sequence[Any], policy: str = "all", candidate: Any = None
    ) -> None:
        """Order `axes`: every permutation ("all") or the orders listed in `candidate`."""
        self._add(name, ReorderSpace(list(axes), policy, candidate))

    def define_annotate(self, name: str, axes: Sequence[Any], policy: str = "try_unroll") -> None:
        """Annotate each of `axes` (unroll and/or vectorize, per the policy)."""
        self._add(name, AnnotateSpace(list(axes), policy))

    def define_knob(self, name: str, values: Sequence[Any]) -> None:
        """A free choice among `values` (read it as `cfg[name].val`)."""
        self._add(name, OtherOptionSpace(values))

    def _add(self, name: str, space: KnobSpace) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"knob names must be non-empty strings, got {name!r}")
        if name in self.space_map:
            raise ValueError(f"knob {name!r} is defined twice in this template")
        self.space_map[name] = space
        self._entity_map[name] = space[0]

    # -- the space --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return math.prod(len(sp) for sp in self.space_map.values())

    @property
    def dims(self) -> list[int]:
        """The number of choices of each knob, in definition order."""
        return [len(sp) for sp in self.space_map.values()]

    @property
    def knob_names(self) -> list[str]:
        return list(self.space_map)

    def get(self, index: int) -> ConfigEntity:
        """The config numbered `index` (0 <= index < len(self))."""
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(
                f"config index {index} out of range for a space of {len(self)} configs"
            )
        rest, entities = index, {}
        for name, space in self.space_map.items():
            rest, choice = divmod(rest, len(space))
            entities[name] = space[choice]
        return ConfigEntity(self, index, entities)

    def index_of(self, choices: Sequence[int]) -> int:
        """The config index of per-knob choice indices (definition order)."""
        index, radix = 0, 1
        for choice, space in zip(choices, self.space_map.values()):
            index += choice * radix
            radix *= len(space)
        return index

    def choices_of(self, index: int) -> list[int]:
        """Per-knob choice indices of config `index` (the inverse of index_of)."""
        out, rest = [], int(index)
        for space in self.space_map.values():
            rest, choice = divmod(rest, len(space))
            out.append(choice)
        return out

    def default(self) -> ConfigEntity:
        """The default config: every knob at its first choice (what a template gets untuned)."""
        return self.get(0)

    def from_json(self, data: dict) -> ConfigEntity | None:
        """Rebuild a config from its JSON form; None if it does not fit this space."""
        knobs = data.get("knobs")
        index = data.get("index")
        if isinstance(index, int) and 0 <= index < len(self):
            config = self.get(index)
            if knobs is None or config.knobs == knobs:
                return config
        if not isinstance(knobs, dict) or set(knobs) != set(self.space_map):
            return None
        choices = []
        for name, space in self.space_map.items():
            choice = space.index_of(knobs[name])
            if choice is None:
                return None
            choices.append(choice)
        return self.get(self.index_of(choices))

    def __iter__(self) -> Iterator[ConfigEntity]:
        return (self.get(i) for i in range(len(self)))

    def __str__(self) -> str:
        lines = [f"ConfigSpace: {len(self)} configs, {len(self.space_map)} knobs"]
        for i, (name, space) in enumerate(self.space_map.items()):
            lines.append(f"  {i:2d} {name}: {space.describe()}  ({len(space)} choices)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ConfigSpace(len={len(self)}, knobs={list(self.space_map)})"


class ConfigEntity(_ConfigBase):
    """One point of a space: `index` and one chosen entity per knob. Its define_* calls are no-ops."""

    def __init__(self, space: ConfigSpace, index: int, entity_map: dict[str, Any]):
        super().__init__()
        self.space = space
        self.index = index
        self._entity_map = dict(entity_map)
        self.is_fallback = False

    # A template defines its knobs on every run; here the choices are already made.
    def define_split(self, name: str, *args: Any, **kwargs: Any) -> None:
        self._check_defined(name)

    def define_reorder(self, name: str, *args: Any, **kwargs: Any) -> None:
        self._check_defined(name)

    def define_annotate(self, name: str, *args: Any, **kwargs: Any) -> None:
        self._check_defined(name)

    def define_knob(self, name: str, *args: Any, **kwargs: Any) -> None:
        self._check_defined(name)

    def _check_defined(self, name: str) -> None:
        if name not in self._entity_map:
            raise KeyError(
                f"knob {name!r} was not defined when the space was built; a template must define "
                f"the same knobs for every config"
            )

    @property
    def knobs(self) -> dict[str, Any]:
        """Each knob's choice as JSON data (split sizes, permutation, annotations, value)."""
        return {name: entity.to_json() for name, entity in self._entity_map.items()}

    def to_json(self) -> dict:
        """The config as plain data: {"index": i, "knobs": {name: choice}}."""
        return {"index": self.index, "knobs": self.knobs}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigEntity) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(self.index)

    def __str__(self) -> str:
        knobs = ", ".join(f"{k}={v}" for k, v in self.knobs.items())
        return f"[{self.index}] {knobs}"

    def __repr__(self) -> str:
        return f"ConfigEntity({self})"
