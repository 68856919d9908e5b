"""`check` and `report`: each kernel against eager torch, and a table of the kernels.

On the first call, the compiled graph runs with every intermediate kept (no arena reuse) and each
step timed; the ATen graph then runs eagerly, node by node. Every kernel output that holds a
graph value is compared with that value: the largest relative error (max abs error / max abs
value) is reported, and the first kernel past the tolerance is named.
"""

from __future__ import annotations

import sys

import torch
import torch.fx

from tensorforge.graph.program import BuiltKernel, CompiledGraph


class KernelCheck:
    def __init__(self, name: str, node: str, error: float):
        self.name, self.node, self.error = name, node, error


class Checked:
    """A CompiledGraph that checks and/or reports on its first call."""

    _boxed_call = True

    def __init__(self, compiled: CompiledGraph, gm: torch.fx.GraphModule, opts):
        self.compiled, self.gm, self.opts = compiled, gm, opts
        self.first = True
        self.checks: list[KernelCheck] = []
        self.worst: KernelCheck | None = None
        self.first_failure: KernelCheck | None = None
        self.tf32 = uses_tf32(compiled)

    def __call__(self, args: list):
        if not self.first:
            return self.compiled(args)
        self.first = False
        args = list(args)
        compiled = self.compiled
        compiled.timings, compiled.reuse = [], False
        compiled._arenas.clear()
        try:
            outputs = compiled(args)
            tensors, timings = compiled.last_tensors, compiled.timings
        finally:
            compiled.timings, compiled.reuse = None, True
            compiled._arenas.clear()
        if self.opts.check:
            self._check(args, tensors)
        if self.opts.report or self.opts.check:
            print(self.table(timings), file=sys.stderr)
        return outputs

    def _check(self, args: list, tensors: dict) -> None:
        values = _eager_values(self.gm, args)
        for step in self.compiled.steps:
            if not isinstance(step, BuiltKernel) or step.spec.buffer.node not in values:
                continue
            expected = values[step.spec.buffer.node]
            got = tensors[step.spec.buffer]
            if not isinstance(expected, torch.Tensor) or expected.shape != got.shape:
                continue
            error = relative_error(got, expected)
            check = KernelCheck(step.spec.name, step.spec.buffer.node, error)
            self.checks.append(check)
            if self.worst is None or error > self.worst.error:
                self.worst = check
            tolerance = _tolerance(self.opts, got.dtype, self.tf32)
            if self.first_failure is None and not error <= tolerance:
                self.first_failure = check

    def table(self, timings: list[float]) -> str:
        lines = ["tensorforge: kernels of this graph"]
        lines.append(f"  {'step':32} {'time us':>9}  schedule / fused operators")
        errors = {c.name: c.error for c in self.checks}
        for step, seconds in zip(self.compiled.steps, timings):
            if isinstance(step, BuiltKernel):
                name, what = step.spec.name, f"{step.source}: {', '.join(step.spec.nodes)}"
                if name in errors:
                    what += f"  (error {errors[name]:.1e})"
            else:
                name, what = step.name, f"EAGER {step.target}: {step.reason}"
            lines.append(f"  {name[:32]:32} {seconds * 1e6:9.1f}  {what}")
        program = self.compiled.program
        if program.folded:
            lines.append(f"  computed at compile time: {', '.join(program.folded)}")
        lines.append(f"  fallbacks: {len(program.fallbacks)}")
        if self.worst is not None:
            lines.append(
                f"  check: largest error {self.worst.error:.2e} in {self.worst.name} "
                f"({self.worst.node})"
            )
            if self.first_failure is not None:
                lines.append(
                    f"  check: FIRST PAST TOLERANCE {self.opts.tolerance:g}: "
                    f"{self.first_failure.name} ({self.first_failure.node}, "
                    f"error {self.first_failure.error:.2e})"
                )
        return "\n".join(lines)


# a half-precision kernel computes in float32 and rounds once where eager rounds after each
# operator: they differ by a few units of the dtype's rounding, not by the float32 tolerance;
# float32 products in TF32 (ours and eager's, each rounding its operands its own way) likewise
HALF_ROUNDINGS = 4
TF32_EPS = 2.0**-10  # TF32 keeps 10 bits of float32's 23-bit mantissa


def _tolerance(opts, dtype: torch.dtype, tf32: bool = False) -> float:
    """`opts.tolerance`, or at least HALF_ROUNDINGS units of a float16 / bfloat16 kernel's eps,
    or of TF32's for the float32 kernels of a graph with TF32 products (their errors carry into
    the kernels after them)."""
    if dtype in (torch.float16, torch.bfloat16):
        return max(opts.tolerance, HALF_ROUNDINGS * torch.finfo(dtype).eps)
    if tf32 and dtype == torch.float32:
        return max(opts.tolerance, HALF_ROUNDINGS * TF32_EPS)
    return opts.tolerance


def uses_tf32(compiled: CompiledGraph) -> bool:
    """Whether any kernel multiplies float32 in TF32 (a tensor-core product of float32 tiles)."""
    for step in compiled.steps:
        anchor = step.spec.anchor if isinstance(step, BuiltKernel) else None
        tiles = anchor.info.get("tensor_core") if anchor is not None else None
        if tiles is not None and tiles.dtype == "float32":
            return True
    return False


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got - expected| / max |expected| (absolute where expected is all zeros)."""
    if got.dtype == torch.bool or not got.dtype.is_floating_point:
        return float((got != expected).any())
    diff = (got.double() - expected.double()).abs().max().item() if got.numel() else 0.0
    scale = expected.double().abs().max().item() if expected.numel() else 0.0
    return diff / scale if scale > 0 else diff


def _eager_values(gm: torch.fx.GraphModule, args: list) -> dict[str, object]:
    values: dict[str, object] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n.name] = result
            if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
                values.setdefault(n.name, result)
            return result

    with torch.no_grad():
        Recorder(gm).run(*args)
    for name, value in list(values.items()):
        if isinstance(value, (tuple, list)):
            values[name] = value[0] if value and isinstance(value[0], torch.Tensor) else None
    return values
