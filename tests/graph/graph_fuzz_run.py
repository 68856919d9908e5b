"""Running graph_fuzz.py's random programs: `run_case` compiles one (make_fx + compile_aten, or
Dynamo with static or dynamic sizes), runs it on fresh inputs and names what went wrong (a wrong
answer, an exception; a node run eagerly is noted, not failed); `minimize` cuts a failing case
to the smallest prefix of its program whose last value still fails; `reproducer` prints it.

    python -m tests.graph.graph_fuzz_run --seed 1000 --cases 2000   # the wide sweep

The sweep is graph_fuzz_sweep.py's: each case in a worker process, so a crash fails one case.
"""

from __future__ import annotations

import dataclasses
import random
import re
import traceback

import torch
import torch.nn.functional as F  # noqa: N812 (the generated source says F.)

from tests.graph.graph_fuzz import HALF, Case, compile_source, live, make_inputs

# -- running ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    kind: str  # "ok" | "wrong" | "suspect" | "error"
    detail: str = ""


def tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype in (torch.float32, torch.float64) else 2**-6


def compare(got, expected, reference=None, loose=1.0) -> str | None:
    """None where `got` matches eager's `expected`, else what differs (first output named).
    With `reference` (the program in float32 where it computes in bfloat16), a float output
    may be as far from it as twice eager's own error plus a bfloat16 eps (about
    tests/graph/test_half_precision.py's standard: fused chains round once, eager after each
    operator), and an integer or bool output may take eager's value or the reference's."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, eager has {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected)):
        r = reference[k] if reference is not None else None
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"output {k}: {tuple(g.shape)} {g.dtype}, eager {tuple(e.shape)} {e.dtype}"
        if not e.is_floating_point():
            differ = g != e
            if r is not None and r.shape == e.shape:
                differ &= g != r.to(g.dtype)
            if differ.any():
                return f"output {k}: {differ.sum().item()} of {e.numel()} elements differ"
            continue
        finite = torch.isfinite(e)
        if r is None and not torch.equal(finite, torch.isfinite(g)):
            return f"output {k}: inf/nan at other places"
        if r is None and not torch.equal(
            g[~finite].float().nan_to_num(), e[~finite].float().nan_to_num()
        ):
            return f"output {k}: other infinities"
        if r is not None:
            finite &= torch.isfinite(r) & torch.isfinite(g)
            r = r[finite].double()
        g, e = g[finite].double(), e[finite].double()
        if not e.numel():
            continue
        if r is not None:
            # NOTE: never relative to under 0.1 (as below): atan2(x, x) - its mean is 0 in
            # float32 and in eager (both round), 2e-4 where the mean alone was rounded
            scale = max(r.abs().max().item(), 0.1)
            ours, eagers = (g - r).abs().max().item() / scale, (e - r).abs().max().item() / scale
            # NOTE: + one bfloat16 eps, not test_half_precision's 1/8: an intermediate both
            # store in bfloat16 is rounded in both and not in the reference, so which of the
            # two lands nearer it after a cube (x ** 3 of a rounded product) is luck
            if ours > 2 * eagers + torch.finfo(HALF).eps:
                return f"output {k}: error {ours:.2e} against float32, eager's {eagers:.2e}"
            continue
        # NOTE: relative to the output's largest value, but never to one under 0.1: an output
        # that cancels to about zero (x - hardswish(x) for x >= 3: 12.0000001 - 12) differs from
        # eager by its operands' roundings, not its own
        scale = max(e.abs().max().item(), 0.1)
        error = (g - e).abs().max().item() / scale
        if error > tolerance(expected[k].dtype) * loose:
            return f"output {k}: relative error {error:.2e}"
    return None


def float32_reference(case: Case, outputs, values) -> list | None:
    """The program in float32 (bfloat16 inputs and casts to H made float32), where it has any."""
    if not any(s.dtype == HALF for s in case.inputs) and "H)" not in case.source(outputs):
        return None
    scope = {"torch": torch, "F": F, "H": torch.float32}
    exec(case.source(outputs), scope)  # noqa: S102 - the fuzzer's own generated program
    wide = [v.float() if v.dtype == HALF else v for v in values]
    return _as_list(scope["fn"](*wide))


def _float32_run(case: Case, outputs, values, variable: list) -> list:
    """The program in float32 (as float32_reference) on `variable` (its non-constant inputs,
    which may need gradients) and the constant ones of `values`."""
    scope = {"torch": torch, "F": F, "H": torch.float32}
    exec(case.source(outputs), scope)  # noqa: S102 - the fuzzer's own generated program
    it = iter(variable)
    args = [v.float() if v.dtype == HALF else v for v in values]
    args = [a if spec.constant else next(it) for spec, a in zip(case.inputs, args)]
    return _as_list(scope["fn"](*args))


def _as_list(value) -> list:
    return list(value) if isinstance(value, (tuple, list)) else [value]


class _Module(torch.nn.Module):
    """The case's function with its constant inputs as parameters (what Dynamo folds)."""

    def __init__(self, fn, case: Case, values):
        super().__init__()
        self.fn = fn
        self.order = []
        for k, (spec, value) in enumerate(zip(case.inputs, values)):
            if spec.constant:
                self.register_parameter(f"p{k}", torch.nn.Parameter(value, requires_grad=False))
                self.order.append(("p", k))
            else:
                self.order.append(("x", k))

    def forward(self, *xs):
        it = iter(xs)
        args = [getattr(self, f"p{k}") if kind == "p" else next(it) for kind, k in self.order]
        return self.fn(*args)


def run_case(case: Case, mode: str = "dynamo", outputs: list[str] | None = None) -> Outcome:
    """Compile the case (mode "aten": make_fx + compile_aten; "dynamo": torch.compile, sizes as
    the case says), run it on fresh inputs (twice, the second time at another size where the
    case is dynamic and the program allows) and compare with eager."""
    from tensorforge.graph import Options, compile_aten, decompositions
    from tensorforge.graph.program import CompiledGraph

    fn_source = case.source(outputs)
    fn = compile_source(fn_source)
    values = make_inputs(case, case.seed + 1)
    variable = [v for s, v in zip(case.inputs, values) if not s.constant]
    found: list = []
    if mode == "grad":
        return _run_with_gradients(case, fn, fn_source, values, found, outputs)
    try:
        with torch.no_grad():
            if mode == "aten":
                from torch.fx.experimental.proxy_tensor import make_fx

                gm = make_fx(fn, decomposition_table=decompositions())(*values)
                known = {k: v for k, (s, v) in enumerate(zip(case.inputs, values)) if s.constant}
                compiled = compile_aten(gm, values, known, Options())
                found = [compiled] if isinstance(compiled, CompiledGraph) else []
                got = compiled(list(values))
                expected = _as_list(fn(*values))
                return _judge(
                    got, expected, found, float32_reference(case, outputs, values), fn_source
                )
            module = _Module(fn, case, values)

            torch._dynamo.reset()
            marked = _marked(case)
            if marked is not None:
                torch._dynamo.maybe_mark_dynamic(variable[marked], 0)
            fast = torch.compile(
                module, backend=_counting(found), dynamic=case.dynamic is True or None
            )
            got, expected = _as_list(fast(*variable)), _as_list(module(*variable))
            reference = float32_reference(case, outputs, values)
            verdict = _judge(got, expected, found, reference, fn_source)
            if verdict.kind != "ok" or not case.dynamic:
                return verdict
            resized = _resized(case, module)
            if resized is None:
                return verdict
            got, expected = _as_list(fast(*resized)), _as_list(module(*resized))
            everything = _with_constants(module, resized)
            reference = float32_reference(case, outputs, everything)
            verdict = _judge(got, expected, found, reference, fn_source)
            if verdict.kind != "ok":
                verdict.detail = f"(resized inputs) {verdict.detail}"
            return verdict
    except Exception as err:  # noqa: BLE001 - the fuzzer reports it
        return Outcome("error", f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-6)}")


def _counting(found: list):
    """The backend, keeping each graph it compiles in `found` (for the fallbacks it ran)."""

    def counting(gm, example_inputs, **kwargs):
        from tensorforge.graph import backend

        compiled = backend(gm, example_inputs, **kwargs)
        found.append(compiled)
        return compiled

    return counting


def _run_with_gradients(case: Case, fn, fn_source: str, values, found: list, outputs) -> Outcome:
    """Mode "grad": the case as a training graph (graph/training.py): its floating inputs need
    gradients; the outputs, then the gradients of a random weighing of the floating outputs
    with respect to those inputs, against eager's (gradients held 10x looser: the backward's
    sums run in another order)."""

    try:
        module = _Module(fn, case, values)
        variable = [v for spec, v in zip(case.inputs, values) if not spec.constant]
        ours = [v.detach().clone().requires_grad_(v.is_floating_point()) for v in variable]
        eagers = [v.detach().clone().requires_grad_(v.is_floating_point()) for v in variable]
        torch._dynamo.reset()
        fast = torch.compile(module, backend=_counting(found), dynamic=case.dynamic is True or None)
        got, expected = _as_list(fast(*ours)), _as_list(module(*eagers))
        reference = float32_reference(case, outputs, values)
        detached = [g.detach() for g in got], [e.detach() for e in expected]
        verdict = _judge(*detached, found, reference, fn_source)
        if verdict.kind != "ok":
            return verdict
        wanted = [k for k, e in enumerate(expected) if e.requires_grad and e.is_floating_point()]
        leaves = [k for k, v in enumerate(eagers) if v.requires_grad]
        if not wanted or not leaves:
            return verdict
        rng = torch.Generator().manual_seed(case.seed)
        weights = [
            torch.randn(expected[k].shape, generator=rng).to(expected[k].dtype) for k in wanted
        ]

        def gradients(outputs, inputs):
            total = sum(
                (outputs[k].float() * w.float()).nan_to_num().sum() for k, w in zip(wanted, weights)
            )
            grads = torch.autograd.grad(total, [inputs[k] for k in leaves], allow_unused=True)
            return [torch.zeros_like(inputs[k]) if g is None else g for k, g in zip(leaves, grads)]

        got_grads, expected_grads = gradients(got, ours), gradients(expected, eagers)
        # a program with casts to bfloat16 has them in its backward too, where eager rounds
        # each and a fused kernel does not (in_dtype): its gradients are judged as its outputs
        # are, against the program's in float32
        wide = None
        if reference is not None:
            wide = [
                (v.detach().float() if v.dtype == HALF else v.detach()).requires_grad_(
                    v.requires_grad
                )
                for v in eagers
            ]
            wide = gradients(_float32_run(case, outputs, values, wide), wide)
        why = compare(got_grads, expected_grads, wide, loose=10)
        if why is not None:
            return Outcome("wrong", f"gradient: {why}")
        return verdict
    except Exception as err:  # noqa: BLE001 - the fuzzer reports it
        return Outcome("error", f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-6)}")


def _marked(case: Case) -> int | None:
    """Under "mark": which of the non-constant inputs has its dim 0 marked dynamic."""
    variable = [s for s in case.inputs if not s.constant]
    if case.dynamic != "mark" or not variable or not variable[0].shape:
        return None
    return 0 if variable[0].shape[0] > 1 else None


def resized_shapes(case: Case) -> list[tuple] | None:
    """The inputs' shapes with one size (every dim of it; under "mark" the marked one's)
    changed, or None where the case has no size to change."""
    rng = random.Random(case.seed)
    sizes = sorted({d for s in case.inputs if not s.constant for d in s.shape if d > 2})
    if case.dynamic == "mark":
        variable = [s for s in case.inputs if not s.constant]
        sizes = [variable[0].shape[0]] if _marked(case) is not None else []
    if not sizes:
        return None
    old = rng.choice(sizes)
    new = old + rng.choice([1, 2, 5, -1])
    return [tuple(new if d == old else d for d in s.shape) for s in case.inputs]


def _resized(case: Case, module) -> list | None:
    """Fresh inputs of `resized_shapes`, where eager still accepts them."""
    shapes = resized_shapes(case)
    if shapes is None:
        return None
    values = make_inputs(case, case.seed + 2, shapes)
    for s, v, original in zip(case.inputs, values, make_inputs(case, case.seed + 1)):
        if s.constant:
            v.copy_(original) if v.shape == original.shape else None
    if any(
        v.shape != p.shape
        for (kind, k), v in zip(module.order, values)
        if kind == "p"
        for p in [getattr(module, f"p{k}")]
    ):
        return None
    variable = [v for s, v in zip(case.inputs, values) if not s.constant]
    try:
        module(*variable)
    except Exception:  # noqa: BLE001 - the program does not generalize to that size
        return None
    return variable


# operators whose result jumps: a value a rounding away from a step (float32 sums in another
# order, a chain rounded once) lands on the other side; a few such elements are "suspect";
# and periodic ones, whose error is their argument's absolute error (sin(3 * v) of a float32
# v ~ 3000 summed in another order: 4e-3 off eager, both as far from float64; seed 7903)
_JUMPS = re.compile(
    r"floor|ceil|round|trunc|sign|remainder|fmod|int64|int32|argmax|argmin|\)\[1\]|[<>]|[!=]="
    r"|sin\(|cos\(|tan\("
)  # (`)[1]`: max(d)'s indices)


def _few_differ(got, expected, reference=None) -> bool:
    """At most a few elements (2, or one in 200) of each output differ from eager (and, for
    integers of a bfloat16 program, from the float32 reference too, as compare counts them)."""
    for k, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape or g.dtype != e.dtype:
            return False
        if e.dtype == HALF:
            continue  # (held to the float32 reference by compare, not element by element)
        if e.is_floating_point():
            g, e = g.double().nan_to_num(), e.double().nan_to_num()
            scale = max(e.abs().max().item(), 0.1) if e.numel() else 1.0
            differ = (g - e).abs() > tolerance(expected[0].dtype) * scale
        else:
            differ = g != e
            if reference is not None and reference[k].shape == e.shape:
                differ &= g != reference[k].to(g.dtype)
        if differ.sum().item() > max(2, e.numel() // 200):
            return False
    return True


def _fallbacks_of(compiled, depth=0) -> list:
    program = getattr(compiled, "program", None)
    if program is not None:
        return program.fallbacks
    inner = getattr(compiled, "compiled", None)  # (Checked, WithOutputViews)
    return _fallbacks_of(inner, depth + 1) if inner is not None and depth < 4 else []


def _with_constants(module, variable) -> list:
    it = iter(variable)
    return [getattr(module, f"p{k}") if kind == "p" else next(it) for kind, k in module.order]


def _judge(got, expected, found, reference=None, source="") -> Outcome:
    why = compare(got, expected, reference)
    if why is not None:
        jumps = _JUMPS.search(source)
        if jumps and (
            _few_differ(got, expected, reference) or compare(got, expected, None, 100) is None
        ):
            return Outcome(
                "suspect", f"{why} (a few elements or 1e-2, after an operator that jumps)"
            )
        return Outcome("wrong", why)
    # a node run eagerly inside the compiled graph is correct: an operator with no lowering,
    # or one a lowering declines (Unsupported: its reason); under TENSORFORGE_GRAPH_STRICT a
    # lowering that fails raises instead, so it shows as an error
    fallbacks = [f for c in found for f in _fallbacks_of(c)]
    eager = "; ".join(f"{t}: {r}" for _, t, r in fallbacks)
    return Outcome("ok", f"eager: {eager}" if eager else "")


# -- reporting ----------------------------------------------------------------------------------


def minimize(case: Case, mode: str, outcome: Outcome) -> tuple[list[str], Outcome]:
    """The shortest program prefix (its last value the only output) that still fails as
    `outcome` did, and how it fails."""
    names = [line.split(" = ")[0] for line in case.lines]
    for name in names:
        if len(live(case.lines, [name])) >= len(live(case.lines, case.outputs)):
            continue
        smaller = run_case(case, mode, [name])
        if smaller.kind == outcome.kind:
            return [name], smaller
    return case.outputs, outcome


def reproducer(case: Case, outputs: list[str] | None = None, mode: str = "dynamo") -> str:
    shapes = ", ".join(
        f"({s.shape}, {s.dtype}, {s.kind!r}{', constant' if s.constant else ''})"
        for s in case.inputs
    )
    return (
        f"# seed {case.seed}, mode {mode}, dynamic={case.dynamic}; inputs: {shapes}\n"
        f"{case.source(outputs)}\n"
        f"# python -m tests.graph.graph_fuzz_run --seed {case.seed} --mode {mode}"
    )


if __name__ == "__main__":  # the sweep, each case in a worker process (graph_fuzz_sweep.py)
    import sys

    from tests.graph.graph_fuzz_sweep import main

    sys.exit(main())
