"""The lean call path of a compiled CPU graph: everything that does not change between calls at
one set of sizes worked out once.

Per set of sizes (the symbols' bindings), a `CallPlan` holds the intermediates (arenas reused
by liveness), the constants, each output's shape, and for each run of consecutive kernels a
slot array: one int64 per kernel parameter, the weights' and intermediates' addresses and the
sizes written once. A call writes only the slots of the buffers that are new each call (the
inputs, the outputs, what an eager fallback returned) and runs the kernels through one native
sequence (runtime/native_sequence.py); without one (a scalar it cannot pass, or no llvmlite)
through ctypes one by one with the argument lists made once. Eager fallback steps split the
kernels into several such runs.

NOTE: one call at a time per compiled graph: two threads calling it at once would share its slot
arrays, as they share its intermediates' arenas (each would read the other's results).

Measured (thread CPU time of the graph layer's own call, kernels included, tiny models so the
kernels cost little; 1 thread): an MLP of 2 kernels 8.2 -> 4.8 us, a GPT-2 block of 11 kernels
24.1 -> 8.7 us. (At full size that is within the noise: Dynamo's own call path, the same for
every backend, costs 20 us warm and about 90 us after the weights streamed through the cache.)
"""

from __future__ import annotations

import ctypes

import torch

from tensorforge.errors import ArgumentError, TensorForgeError
from tensorforge.graph import symbols as sym
from tensorforge.graph.lowered import BufferArg
from tensorforge.graph.lowerer import TE_TO_TORCH
from tensorforge.runtime.native_call import NativeKernel, num_threads


class _Segment:
    """Consecutive kernels: their slots, which of them change per call, how they run."""

    def __init__(self, steps: list, fixed: dict, bindings: dict):
        self.steps = steps
        self.allocate = []  # (buffer, shape, dtype) of the outputs made per call
        self.patches = []  # (slot index, buffer) written per call
        values, indices = [], []
        for step in steps:
            own = []
            for p in step.plan:
                own.append(len(values))
                if isinstance(p, str):
                    values.append(int(bindings[p]))
                elif p in fixed:
                    values.append(fixed[p].data_ptr())
                else:
                    values.append(0)
                    self.patches.append((len(values) - 1, p))
            indices.append(own)
            for buf in step.spec.written:
                if buf not in fixed:
                    shape = [sym.evaluate(s, bindings) for s in buf.shape]
                    self.allocate.append((buf, shape, TE_TO_TORCH[buf.dtype]))
        self.slots = (ctypes.c_int64 * max(1, len(values)))(*values)
        self.address = ctypes.addressof(self.slots)
        self.sequence = _sequence([s.executable for s in steps], indices)
        # without a sequence: each kernel's argument list, refreshed from the slots per call
        self.indices = indices

    def run(self, tensors: dict, device) -> None:
        for buf, shape, dtype in self.allocate:
            if buf not in tensors:
                tensors[buf] = torch.empty(shape, dtype=dtype, device=device)
        slots = self.slots
        for index, buf in self.patches:
            slots[index] = tensors[buf].data_ptr()
        if self.sequence is not None:
            self.sequence.run(self.address)
            self.sequence.raise_alloc_errors()
            return
        for step, own in zip(self.steps, self.indices):
            step.executable._function(*[slots[k] for k in own])
            step.executable.check_allocation()


def _sequence(kernels: list, indices: list):
    """A NativeSequence of the kernels, or None where one cannot be made (then ctypes)."""
    try:
        from tensorforge.runtime.native_sequence import NativeSequence

        return NativeSequence(kernels, indices)
    except (ImportError, TensorForgeError, OSError):
        return None


class CallPlan:
    """The compiled graph's call at one set of sizes (see the module's docstring)."""

    def __init__(self, graph, bindings: dict, temps: dict, constants: dict):
        from tensorforge.graph.program import BuiltKernel

        self.bindings = bindings
        self.device = graph.device
        # NOTE: what an eager step returns is a new tensor each call, never fixed (its result
        # replaces the buffer's tensor rather than filling it)
        eager = {
            b for step in graph.steps if not isinstance(step, BuiltKernel) for b in step.outputs
        }
        self.fixed = {b: t for b, t in {**temps, **constants}.items() if b not in eager}
        self.runs = []  # _Segment or an EagerSpec, in order
        pending = []
        for step in graph.steps:
            if isinstance(step, BuiltKernel):
                pending.append(step)
                continue
            if pending:
                self.runs.append(_Segment(pending, self.fixed, bindings))
                pending = []
            self.runs.append(step)
        if pending:
            self.runs.append(_Segment(pending, self.fixed, bindings))
        threads = {}
        for step in graph.steps:
            if isinstance(step, BuiltKernel) and step.executable._threads is not None:
                threads[id(step.executable._threads)] = step.executable._threads
        self.threads = list(threads.values())
        self.inputs = [
            (k, buf)
            for k, buf in enumerate(graph.program.inputs)
            if buf is not None and not isinstance(buf, str)
        ]
        self.outputs = [output_of(v, bindings) for v in graph.program.outputs]

    def __call__(self, graph, args: list) -> list:
        tensors = dict(self.fixed)
        for k, buf in self.inputs:
            tensors[buf] = args[k].contiguous()
        if self.threads:
            n = num_threads()
            for t in self.threads:
                t.value = n
        for run in self.runs:
            if isinstance(run, _Segment):
                run.run(tensors, self.device)
            else:
                graph._eager(run, tensors, self.bindings)
        return results(self.outputs, tensors)


GPU_INPUT_ALIGN = 16  # bytes: CUDA kernels read inputs by 16-byte (cp.async, vector) copies


def gpu_argument(tensor: torch.Tensor) -> torch.Tensor:
    """A graph argument of a CUDA graph, as its kernels read it (gpu_input): on the GPU (a CPU
    scalar beside CUDA tensors is copied there, as torch allows; any other CPU tensor is the
    caller's error, which the kernels would read as a bad address)."""
    if not tensor.is_cuda and tensor.dim() == 0:
        return tensor.to("cuda")
    if not tensor.is_cuda:
        raise ArgumentError(
            f"a graph compiled for CUDA (torch.compile(backend='tensorforge'), its target or "
            f"its example inputs) called with a tensor on {tensor.device}: move the model and "
            f"its inputs to the GPU, or compile for the CPU"
        )
    return gpu_input(tensor)


def gpu_input(tensor: torch.Tensor) -> torch.Tensor:
    """A graph input (a constant, an eager step's result) as CUDA kernels read it: contiguous,
    and starting on a 16-byte boundary (a view that starts inside its storage, e.g.
    x.view(-1)[3:], is copied: its kernels' 16-byte copies would otherwise fault, or in a CUDA
    graph read the wrong bytes)."""
    tensor = tensor.contiguous()
    return tensor if tensor.data_ptr() % GPU_INPUT_ALIGN == 0 else tensor.clone()


def results(outputs: list[tuple], tensors: dict) -> list:
    """The graph's outputs of a call: each (buffer, shape) of `output_of` as its tensor viewed
    to that shape, sizes and literals as they are."""
    return [_view(tensors[v], shape) if shape is not None else v for v, shape in outputs]


def _view(tensor: torch.Tensor, shape: list) -> torch.Tensor:
    return tensor if list(tensor.shape) == shape else tensor.view(shape)


def output_of(value, bindings: dict) -> tuple:
    """(buffer, its view's shape) of a tensor output; (value, None) of a size or literal."""
    if isinstance(value, BufferArg):
        return value.buffer, [sym.evaluate(s, bindings) for s in value.shape]
    if sym.is_size_expr(value):
        return sym.evaluate(value, bindings), None
    return value, None


def usable(graph) -> bool:
    """Whether the graph's kernels are CPU kernels a plan can call (not CUDA)."""
    from tensorforge.graph.program import BuiltKernel

    return graph.device.type == "cpu" and all(
        isinstance(s.executable, NativeKernel) for s in graph.steps if isinstance(s, BuiltKernel)
    )
