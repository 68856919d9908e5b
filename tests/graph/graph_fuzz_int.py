"""Integer division for graph_fuzz.py's programs: integer tensors divided by integer tensors
(broadcast), by negative numbers and by -1, with floor and trunc rounding, `%`, remainder and
fmod, of int8 through int64 values that include each type's minimum and maximum (and a few
products and sums of those, which wrap around).

Divisors are never zero. Eager torch raises for an integer division by zero on the CPU
(RuntimeError: ZeroDivisionError), while a compiled kernel divides by 1 there (its guarded
vector tails load 0 into inactive lanes; torch's CUDA kernels give an unspecified value too),
so the two cannot be compared: a divisor is an input drawn without zeros, or a value of the
program with its zeros replaced (`torch.where(v == 0, -1, v)`). The minimum divided by -1 wraps
in torch's floor division, remainder and fmod (INT_MIN // -1 == INT_MIN) and must not trap
compiled, but eager's trunc division traps on it itself (SIGFPE), so a trunc dividend is
clamped above the minimum.
"""

from __future__ import annotations

import torch

INT_TYPES = [torch.int64, torch.int64, torch.int32, torch.int32, torch.int16, torch.int8]


def make_int_input(kind: str, dtype: torch.dtype, shape, gen: torch.Generator) -> torch.Tensor:
    """An input of kind "dividend" (small values, a few of them the type's extremes, -1, 0) or
    "divisor" (nonzero: small values of both signs, -1 often, now and then an extreme)."""
    info = torch.iinfo(dtype)
    small = min(info.max, 50)
    if kind == "dividend":
        value = torch.randint(-small, small + 1, shape, generator=gen)
        extremes = torch.tensor([info.min, info.min, info.max, info.min + 1, -1, 0])
    else:
        value = torch.randint(1, 10, shape, generator=gen)
        value = torch.where(torch.rand(shape, generator=gen) < 0.5, -value, value)
        extremes = torch.tensor([-1, -1, -1, info.min, info.max])
    pick = torch.randint(0, len(extremes), shape, generator=gen)
    special = torch.rand(shape, generator=gen) < 0.3
    return torch.where(special, extremes[pick], value).to(dtype)


def _integers(t: torch.Tensor) -> bool:
    return not t.is_floating_point() and t.dtype != torch.bool


def _dividend(g) -> str | None:
    """An integer value of the program, a float one truncated to integers, or a new input."""
    draw = g.rng.random()
    if draw < 0.4:
        x = g.pick(_integers)
        if x is not None:
            return x
    if draw < 0.7:
        x = g.pick(lambda t: t.is_floating_point())
        if x is not None:
            return f"({x} * 8).to({g.rng.choice(['torch.int64', 'torch.int32'])})"
    return g.new_input(g.shape(), g.rng.choice(INT_TYPES), "dividend")


def _divisor(g, dividend: torch.Tensor) -> str:
    """A divisor that broadcasts against the dividend, never zero, mostly of its type (mixed
    types promote to the wider: no minimum there to overflow). NOTE: a 0-d one is always of
    its type: torch casts a 0-d divisor to the dividend's type, where INT64_MIN is 0."""
    shape = tuple(dividend.shape)

    def fits(t: torch.Tensor) -> bool:
        same = t.dtype == dividend.dtype or t.dim() > 0
        return _integers(t) and same and _broadcasts(tuple(t.shape), shape)

    if g.rng.random() < 0.25:
        y = g.pick(fits)
        if y is not None:
            return f"torch.where({y} == 0, -1, {y})"
    divisor = g.partner(shape)
    mixed = g.rng.random() < 0.2 and divisor
    return g.new_input(divisor, g.rng.choice(INT_TYPES) if mixed else dividend.dtype, "divisor")


def _broadcasts(small, big) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))


FORMS = [
    "{a} // {b}",
    "torch.div({a}, {b}, rounding_mode='floor')",
    "torch.floor_divide({a}, {b})",
    "torch.div({t}, {b}, rounding_mode='trunc')",
    "{a} % {b}",
    "torch.remainder({a}, {b})",
    "torch.fmod({a}, {b})",
    "{a} // -1",
    "{a} % -1",
    "{a} // -{k}",
    "{a} % -{k}",
    "torch.div({t}, -{k}, rounding_mode='trunc')",
    "{k} // {b}",
    "({a} // {b}) * {b} + {a} % {b}",
    "({a} // {b} + {a} % {b}).float()",
    "({a} // {b}).float() * 0.5 + ({a} % -{k}).float()",
    "{a} / {b}",
    "torch.where({a} % {b} == 0, {a} // {b}, -{a})",
    # arithmetic that wraps around (torch's integers do; the minimum and maximum are among the
    # values): no rewrite that assumes it cannot may change the answer
    "({a} * {k}) // {k}",
    "{a} * 4 > {a}",
    "({a} + {b}) - {b}",
    "({a} * 1103515245 + 12345) % 65536",
]


def op_int_divide(g):
    form = g.rng.choice(FORMS)
    a = _dividend(g)
    if a is None:
        return None
    try:
        sample = eval(a, {"torch": torch, **g.samples})  # noqa: S307 - the generator's own
    except Exception:  # noqa: BLE001 - not a valid expression now
        return None
    b = _divisor(g, sample) if "{b}" in form else None
    k = g.rng.choice([2, 3, 7, 16])
    above_min = f"{a}.clamp(min={torch.iinfo(sample.dtype).min + 1})"  # (eager's trunc
    # division traps on the minimum)
    return form.format(a=a, b=b, t=above_min, k=k)
