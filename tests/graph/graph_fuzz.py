"""A random program generator for the torch.compile backend: small torch functions built from
the operators the backend lowers (and a few it runs eagerly), for graph_fuzz_run.py to compile
and compare with eager torch on fresh random inputs.

A case is Python source (`def fn(a0, a1, ...)`) plus its inputs' shapes and dtypes, drawn from
one seed (`generate(seed)`): the program is grown one operator at a time, each run eagerly on
sample values as it is added (so every line is valid torch and its shape is known).
"""

from __future__ import annotations

import dataclasses
import random
import re
import warnings

import torch
import torch.nn.functional as F  # noqa: N812 (the generated source says F.)

from tests.graph.graph_fuzz_gaps import LIBRARY_FORMS, op_lowered_gaps
from tests.graph.graph_fuzz_int import make_int_input, op_int_divide
from tests.graph.graph_fuzz_ops_convs import op_conv_gaps
from tests.graph.graph_fuzz_ops_gathers import op_gathers
from tests.graph.graph_fuzz_ops_pointwise import op_part_writes, op_pointwise_gaps
from tests.graph.graph_fuzz_ops_scans import op_scan_gaps
from tests.graph.graph_fuzz_ops_scatters import op_scatters
from tests.graph.graph_fuzz_ops_sorts import op_sorts
from tests.graph.graph_fuzz_products import (  # (with the sizes every op draws from)
    MAX_NUMEL,
    SIZES,
    op_attention,
    op_conv,
    op_embedding,
    op_matmul,
)

BIG_SIZES = [257, 1000, 4099]
HALF = torch.bfloat16


@dataclasses.dataclass
class Input:
    shape: tuple
    dtype: torch.dtype
    kind: str = "randn"  # "randn" | "index:<high>" | "positive" | "bool" | "dividend" | "divisor"
    constant: bool = False  # a module parameter under Dynamo (folded at compile time)


@dataclasses.dataclass
class Case:
    seed: int
    inputs: list[Input]
    lines: list[str]  # "vN = expr"
    outputs: list[str]
    dynamic: bool | str = False  # True: dynamic=True; "mark": mark_dynamic(first input, 0)

    def source(self, outputs: list[str] | None = None) -> str:
        outputs = outputs or self.outputs
        args = ", ".join(f"a{k}" for k in range(len(self.inputs)))
        body = [f"    {line}" for line in live(self.lines, outputs)]
        body.append(f"    return ({', '.join(outputs)},)")
        return "\n".join([f"def fn({args}):", *body])


def live(lines: list[str], outputs: list[str]) -> list[str]:
    """The lines the outputs depend on (dead code dropped)."""
    needed = set(outputs)
    kept = []
    for line in reversed(lines):
        name, expr = line.split(" = ", 1)
        if name in needed:
            kept.append(line)
            needed |= set(re.findall(r"\b[av]\d+\b", expr))
    return kept[::-1]


def compile_source(source: str):
    scope = {"torch": torch, "F": F, "H": HALF}
    exec(source, scope)  # noqa: S102 - the fuzzer's own generated program
    return scope["fn"]


# -- inputs -------------------------------------------------------------------------------------


def make_input(spec: Input, gen: torch.Generator, shape=None) -> torch.Tensor:
    shape = spec.shape if shape is None else shape
    if spec.kind.startswith("index:"):
        high = int(spec.kind.split(":")[1])
        return torch.randint(0, high, shape, generator=gen, dtype=spec.dtype)
    if spec.kind == "bool":
        return torch.rand(shape, generator=gen) > 0.5
    if spec.kind in ("dividend", "divisor"):
        return make_int_input(spec.kind, spec.dtype, shape, gen)
    value = torch.randn(shape, generator=gen)
    if spec.kind == "positive":
        value = value.abs() + 0.5
    return value.to(spec.dtype)


def make_inputs(case: Case, seed: int, shapes=None) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shapes = shapes or [s.shape for s in case.inputs]
    return [make_input(s, gen, shape) for s, shape in zip(case.inputs, shapes)]


# -- the generator ------------------------------------------------------------------------------


class Generator:
    """Grows one program: `values` are the names defined so far with their sample tensors."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.half = self.rng.random() < 0.3
        self.dtype = HALF if self.half else torch.float32
        self.inputs: list[Input] = []
        self.samples: dict[str, torch.Tensor] = {}
        self.lines: list[str] = []
        self.gen = torch.Generator().manual_seed(seed)

    # values
    def new_input(self, shape, dtype=None, kind="randn", constant=False) -> str:
        spec = Input(tuple(shape), dtype or self.dtype, kind, constant)
        name = f"a{len(self.inputs)}"
        self.inputs.append(spec)
        self.samples[name] = make_input(spec, self.gen)
        return name

    def add(self, expr: str) -> str | None:
        """Define `expr` as a new value, if eager torch accepts it and it stays small."""
        name = f"v{len(self.lines)}"
        scope = {"torch": torch, "F": F, "H": HALF, **self.samples}
        try:
            with warnings.catch_warnings():  # (var of one element: degrees of freedom <= 0)
                warnings.simplefilter("ignore")
                value = eval(expr, scope)  # noqa: S307 - the generator's own expression
        except Exception:  # noqa: BLE001 - an invalid combination: draw another
            return None
        if not isinstance(value, torch.Tensor) or value.numel() > 4 * MAX_NUMEL:
            return None
        self.samples[name] = value
        self.lines.append(f"{name} = {expr}")
        return name

    def float_and_dim(self):
        """(name, sample, dim) of a float value of rank 1 or more, the dim negative half the
        time; None where there is none."""
        x = self.pick(lambda t: t.is_floating_point() and t.dim() > 0)
        if x is None:
            return None
        rank = self.samples[x].dim()
        return (
            x,
            self.samples[x],
            self.rng.randrange(rank) - (rank if self.rng.random() < 0.5 else 0),
        )

    def pick(self, want=lambda t: True) -> str | None:
        names = [n for n, t in self.samples.items() if want(t) and t.numel()]  # (none empty)
        if not names:
            return None
        draw = self.rng.random()  # mostly chain on the latest values: deeper fusions
        if draw < 0.5:
            return names[-1]
        return self.rng.choice(names[-4:] if draw < 0.8 else names)

    def floats(self, t) -> bool:
        return t.is_floating_point()

    def size(self, big=False) -> int:
        if big and self.rng.random() < 0.15:
            return self.rng.choice(BIG_SIZES)
        return self.rng.choice(SIZES[:6] if self.rng.random() < 0.5 else SIZES)

    def shape(self, rank=None) -> tuple:
        rank = rank or self.rng.choice([1, 2, 2, 3, 3, 4])
        while True:
            shape = tuple(self.size(big=rank <= 2) for _ in range(rank))
            if _numel(shape) <= MAX_NUMEL:
                return shape

    def partner(self, shape) -> tuple:
        """A shape that broadcasts against `shape`: dims kept, made 1, or leading ones dropped."""
        choice = self.rng.random()
        if choice < 0.15:
            return ()
        out = [d if self.rng.random() < 0.6 else 1 for d in shape]
        drop = self.rng.randint(0, len(out)) if self.rng.random() < 0.4 else 0
        return tuple(out[drop:])


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _dims(rng, rank, least=1) -> list[int]:
    count = rng.randint(least, max(least, rank))
    return sorted(rng.sample(range(rank), min(count, rank)))


# Each op takes the generator and returns an expression (or None: not applicable now).


def op_unary(g: Generator):
    x = g.pick(g.floats)
    forms = [
        "torch.relu({x})",
        "F.gelu({x})",
        "F.gelu({x}, approximate='tanh')",
        "F.silu({x})",
        "torch.sigmoid({x})",
        "torch.tanh({x})",
        "torch.exp({x})",
        "torch.log({x}.abs() + 1)",
        "torch.sqrt({x}.abs())",
        "torch.rsqrt({x}.abs() + 0.5)",
        "{x}.abs()",
        "-{x}",
        "torch.erf({x})",
        "torch.floor({x} * 3)",
        "torch.ceil({x})",
        "torch.reciprocal({x}.abs() + 0.5)",
        "F.hardtanh({x}, -0.5, 1.5)",
        "F.relu6({x} * 4)",
        "F.leaky_relu({x}, 0.1)",
        "{x}.clamp(min=-0.3, max=0.7)",
        "{x}.clamp(min=0.1)",
        "{x} ** 2",
        "{x} ** 3",
        "{x}.abs() ** 0.5",
        "({x}.abs() + 1) ** 1.7",
        "({x}.abs() + 1) ** -0.5",
        "torch.sign({x})",
        "torch.round({x} * 2)",
        "F.softplus({x})",
        "F.hardswish({x})",
        "F.elu({x})",
        "torch.trunc({x} * 2)",
        *LIBRARY_FORMS,
    ]
    return g.rng.choice(forms).format(x=x) if x else None


def op_binary(g: Generator):
    x = g.pick(g.floats)
    if x is None:
        return None
    shape = tuple(g.samples[x].shape)
    same = [
        n for n, t in g.samples.items() if t.is_floating_point() and _broadcasts(t.shape, shape)
    ]
    if same and g.rng.random() < 0.5:
        y = g.rng.choice(same)
    else:
        y = g.new_input(g.partner(shape), kind="positive" if g.rng.random() < 0.3 else "randn")
    a, b = (x, y) if g.rng.random() < 0.7 else (y, x)
    forms = [
        "{a} + {b}",
        "{a} - {b}",
        "{a} * {b}",
        "{a} / ({b}.abs() + 0.5)",
        "torch.maximum({a}, {b})",
        "torch.minimum({a}, {b})",
        "torch.add({a}, {b}, alpha=0.5)",
        "torch.sub({a}, {b}, alpha=2)",
        "torch.pow({a}.abs() + 1, {b})",
        "torch.div({a} * 5, {b}.abs() + 0.5, rounding_mode='floor')",
        "torch.div({a} * 5, {b}.abs() + 0.5, rounding_mode='trunc')",
        "torch.remainder({a} * 5, {b}.abs() + 0.5)",
        "torch.fmod({a} * 5, {b}.abs() + 0.5)",
        "torch.atan2({a}, {b})",
        "{a} * 2.5",
        "3 - {a}",
        "{a} / 7",
        "{a} + 1",
        "torch.where({a} > {b}, {a}, {b})",
        "torch.where({a} < 0, {b}, 0.5)",
        "{a}.masked_fill({b} > 0.3, -1.5)",
        "torch.where(({a} > 0) & ({b} < 0.5), {a} * {b}, -{b})",
        "torch.where(({a} > 0) | ~({b} < 0.5), 1.0, {b})",
        "({a} >= {b}).to({a}.dtype) * {a}",
        "({a} != {b}).float() + ({a} <= 0.2).float()",
        "torch.lerp({a}, {b}, 0.3)",
        "torch.hypot({a}, {b})",
    ]
    return g.rng.choice(forms).format(a=a, b=b)


def _broadcasts(small, big) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))


def op_compare(g: Generator):
    """Comparisons that stay as outputs (bool), integer values, casts."""
    x = g.pick(g.floats)
    if x is None:
        return None
    forms = [
        "{x} > 0.25",
        "({x} * 4).to(torch.int64)",
        "({x} * 4).to(torch.int64) * 3 + 1",
        "({x} * 4).to(torch.int64).float() / 4",
        "({x} > 0).to(torch.int64).sum(-1)",
        "({x} > 0).sum()",
        "{x}.to(H)",
        "{x}.float()",
        "{x}.to(H).float() * 2",
        "torch.logical_not({x} > 0)",
        "torch.logical_and({x} > 0, {x} < 1).float()",
        "torch.isnan({x}).float() + {x}",
        "torch.argmax({x}, -1)",
        "torch.zeros_like({x}) + {x}",
        "torch.ones_like({x}) * 2 + {x}",
        "torch.full_like({x}, 3.0) - {x}",
        "({x} * 4).to(torch.int64) // 3",
        "({x} * 4).to(torch.int64) % 3",
        "~(({x} * 4).to(torch.int64))",
        "({x} * 4).to(torch.int32) + 2",
        "torch.clamp(({x} * 4).to(torch.int64), -2, 3)",
    ]
    return g.rng.choice(forms).format(x=x)


def op_view(g: Generator):
    x = g.pick()
    if x is None:
        return None
    t = g.samples[x]
    rank, shape, rng = t.dim(), tuple(t.shape), g.rng
    if rank == 0:
        return f"{x}.reshape(1, 1)"
    d = rng.randrange(rank)
    e = rng.randrange(rank)
    n = shape[d]
    forms = [
        f"{x}.transpose({d}, {e})",
        f"{x}.permute({rng.sample(range(rank), rank)})",
        f"{x}.unsqueeze({rng.randint(-rank - 1, rank)})",
        f"{x}.reshape(-1)",
        f"{x}.flatten({min(d, e)}, {max(d, e)})",
        f"{x}.contiguous()",
        f"{x}.select({d}, {rng.randrange(n)})" if rank > 1 else f"{x}[{-1 if n > 1 else 0}]",
        f"{x}.narrow({d}, {n // 3}, {max(1, n - n // 3 - n // 4)})",
        f"{x}[{', '.join([':'] * d + [_slice(rng, n)])}]",
        f"{x}[..., {_slice(rng, shape[-1])}]",
        f"{x}.t()" if rank <= 2 else f"{x}.mT",
        f"torch.cat([{x}, {x} * 2], {d})",
        f"torch.cat([{x}, {x}[{', '.join([':'] * d + ['1:'])}]], {d})" if n > 1 else None,
        f"torch.stack([{x}, {x} + 1], {rng.randint(0, rank)})",
        f"{x}.chunk(2, {d})[-1]",
        f"{x}.split({max(1, n // 2)}, {d})[0]",
        f"{x}.squeeze({d})" if n == 1 else f"{x}.unsqueeze(0).squeeze(0)",
        f"{x}.expand({_expanded(rng, shape)})",
        f"{x}.reshape({_regrouped(shape)})",
        f"{x}.view({_regrouped(shape)})" if t.is_contiguous() else None,
        f"torch.flip({x}, [{d}])",
        f"torch.roll({x}, 1, {d})",
        f"{x}.repeat({', '.join(['1'] * (rank - 1) + ['2'])})",
        f"{x}.index_select({d}, torch.tensor({_indices(rng, n)}))",
        f"torch.gather({x}, {d}, {_gather_index(g, shape, d)})",
        f"{x}[{_index_input(g, shape[0])}]",
        f"F.pad({x}, ({rng.randint(0, 2)}, {rng.randint(0, 2)}))",
        f"{x}.tril()" if rank >= 2 else None,
    ]
    form = rng.choice([f for f in forms if f])
    return form


def _slice(rng, n) -> str:
    start = rng.choice(["", "1", str(n // 2), "-3"])
    stop = rng.choice(["", "-1", str(max(1, n - 1))])
    step = rng.choice(["", "", "2", "3"])
    return f"{start}:{stop}" + (f":{step}" if step else "")


def _expanded(rng, shape) -> str:
    sizes = [str(rng.choice([3, 5])) if d == 1 else "-1" for d in shape]
    if rng.random() < 0.3:
        sizes.insert(0, "2")
    return ", ".join(sizes)


def _regrouped(shape) -> str:
    total = _numel(shape)
    last = shape[-1]
    if len(shape) >= 2 and total // last > 1:
        return f"-1, {shape[-2] * last}" if len(shape) > 2 else f"{total // last}, {last}, 1"
    return f"1, {total}"


def _indices(rng, n) -> list[int]:
    return [rng.randrange(n) for _ in range(rng.randint(1, 5))]


def _gather_index(g: Generator, shape, d) -> str:
    index_shape = list(shape)
    index_shape[d] = g.rng.randint(1, 4)
    return g.new_input(index_shape, torch.int64, f"index:{shape[d]}")


def _index_input(g: Generator, n) -> str:
    return g.new_input((g.rng.randint(1, 7),), torch.int64, f"index:{n}")


def op_reduce(g: Generator):
    x = g.pick(lambda t: t.is_floating_point() and t.dim() > 0)
    if x is None:
        return None
    rank, rng = g.samples[x].dim(), g.rng
    dims = _dims(rng, rank)
    dims = [d - rank if rng.random() < 0.3 else d for d in dims]
    keep = rng.random() < 0.4
    d = rng.randrange(rank) - (rank if rng.random() < 0.5 else 0)
    forms = [
        f"{x}.sum({dims}, keepdim={keep})",
        f"{x}.mean({dims}, keepdim={keep})",
        f"{x}.amax({dims}, keepdim={keep})",
        f"{x}.amin({dims}, keepdim={keep})",
        f"{x}.var({dims}, keepdim={keep})",
        f"{x}.var({d}, unbiased=False)",
        f"{x}.std({d}, keepdim={keep})",
        f"torch.var_mean({x}, {d}, keepdim={keep})[{rng.randint(0, 1)}]",
        f"{x}.sum()",
        f"{x}.mean()",
        f"{x}.max({d}).values",
        f"{x}.max({d})[1]",
        f"torch.logsumexp({x}, {d})",
        f"{x}.norm(dim={d})",
        f"{x}.prod({d})",
        f"torch.cumsum({x}, {d})",
        f"{x} - {x}.mean({d}, keepdim=True)",
        f"{x} / {x}.sum({d}, keepdim=True).abs().clamp(min=1)",
    ]
    return rng.choice(forms)


def op_rows(g: Generator):
    picked = g.float_and_dim()
    if picked is None:
        return None
    (x, t, d), rng = picked, g.rng
    rank = t.dim()
    k = rng.randint(1, min(2, rank))
    norm = tuple(t.shape[rank - k :])
    w = g.new_input(norm, kind="randn", constant=rng.random() < 0.5) if rng.random() < 0.6 else None
    b = g.new_input(norm, kind="randn", constant=rng.random() < 0.5) if rng.random() < 0.5 else None
    forms = [
        f"torch.softmax({x}, {d})",
        f"torch.log_softmax({x}, {d})",
        f"F.layer_norm({x}, {norm}, {w}, {b})",
        f"F.layer_norm({x}, {norm}, eps=1e-3)",
        f"{x} * torch.rsqrt({x}.pow(2).mean(-1, keepdim=True) + 1e-6)"
        + (f" * {w}" if w and k == 1 else ""),
        f"F.normalize({x}, dim={d})",
    ]
    if rank >= 3 and t.shape[1] > 1:
        c = t.shape[1]
        groups = rng.choice([gr for gr in range(1, c + 1) if c % gr == 0])
        gw = g.new_input((c,), constant=rng.random() < 0.5)
        mean = g.new_input((c,), constant=True)
        var = g.new_input((c,), kind="positive", constant=True)
        forms += [
            f"F.group_norm({x}, {groups}, {gw}, {gw})",
            f"F.batch_norm({x}, {mean}, {var}, {gw}, {gw}, False)",
            f"F.batch_norm({x}, {mean}, {var}, None, None, False, 0.1, 1e-3)",
        ]
    return rng.choice(forms)


OPS = [
    (op_unary, 5),
    (op_binary, 6),
    (op_compare, 2),
    (op_view, 5),
    (op_reduce, 3),
    (op_rows, 2),
    (op_matmul, 2),
    (op_conv, 2),
    (op_conv_gaps, 1),
    (op_embedding, 0.3),
    (op_attention, 0.5),
    (op_lowered_gaps, 2),
    (op_scan_gaps, 1),
    (op_int_divide, 3),
    (op_pointwise_gaps, 2),
    (op_part_writes, 1),
    (op_scatters, 1),
    (op_gathers, 1),
    (op_sorts, 1),
]


def generate(seed: int, length: int | None = None) -> Case:
    g = Generator(seed)
    rng = g.rng
    conv_first = rng.random() < 0.25
    for _ in range(rng.randint(1, 2)):
        rank = 4 if conv_first else None
        shape = g.shape(rank)
        if conv_first:
            shape = (shape[0] % 3 + 1, *shape[1:])
            if _numel(shape) > MAX_NUMEL:
                shape = (1, 3, 7, 9)
        g.new_input(shape)
    length = length or rng.randint(2, 8)
    tries = 0
    while len(g.lines) < length and tries < 60:
        tries += 1
        fns, weights = zip(*OPS)
        op = rng.choices(fns, weights)[0]
        before = len(g.inputs)
        expr = op(g)
        if expr is None or g.add(expr) is None:
            del g.inputs[before:]  # inputs drawn for a rejected expression
            for name in [n for n in g.samples if n.startswith("a") and int(n[1:]) >= before]:
                del g.samples[name]
    defined = [line.split(" = ")[0] for line in g.lines]
    if not defined:
        defined = [g.add("a0 * 2") or "a0"]
    outputs = [defined[-1]]
    for name in defined[:-1]:
        if rng.random() < 0.25:
            outputs.append(name)
    draw = rng.random()
    dynamic = True if draw < 0.25 else "mark" if draw < 0.4 else False
    return Case(seed, g.inputs, g.lines, outputs, dynamic=dynamic)
