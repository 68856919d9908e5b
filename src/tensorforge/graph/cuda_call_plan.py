"""The lean call of a compiled graph run as one CUDA graph (cuda_graph.py): what does not change
between calls worked out once, as call_plan.py does for CPU kernels.

The sizes are static (a CUDA graph is made only then), so the intermediates, the constants and
each node's argument list are fixed; a call allocates the outputs, writes the addresses of the
buffers that are new each call (inputs, outputs) into the argument lists of the nodes that read
or write them, and launches the graph on torch's current stream, taken as a raw handle.

Measured on an H200 (host time of a call, Dynamo's frame included): the general path spent
~30% of an MLP's call in `torch.cuda.current_stream(device)` and another ~20% rebuilding every
node's argument list.
"""

from __future__ import annotations

import torch

from tensorforge.graph import symbols as sym
from tensorforge.graph.call_plan import gpu_input, output_of, results
from tensorforge.graph.lowerer import TE_TO_TORCH


class GraphLaunchPlan:
    """One CompiledGraph's call through its CUDA graph (see the module's docstring)."""

    def __init__(self, graph, cuda_graph, fixed: dict, args: list[list]):
        self.cuda_graph = cuda_graph
        self.device = graph.device
        self.device_index = graph.device.index or 0
        self.fixed = fixed
        self.inputs = [
            (k, buf)
            for k, buf in enumerate(graph.program.inputs)
            if buf is not None and not isinstance(buf, str)
        ]
        self.allocate = []  # (buffer, shape, dtype) of the outputs made per call
        self.patches = []  # (node, slot, buffer) written per call
        self.args = [list(a) for a in args]
        for n, step in enumerate(graph.steps):
            for slot, p in enumerate(step.plan):
                if not isinstance(p, str) and p not in fixed:
                    self.patches.append((n, slot, p))
            for buf in step.spec.written:
                if buf not in fixed and all(buf is not b for _, b in self.inputs):
                    shape = [sym.evaluate(s, {}) for s in buf.shape]
                    self.allocate.append((buf, shape, TE_TO_TORCH[buf.dtype]))
        self.nodes = sorted({n for n, _, _ in self.patches})
        self.outputs = [output_of(v, {}) for v in graph.program.outputs]

    def __call__(self, args: list) -> list:
        from tensorforge.runtime import cuda_driver

        tensors = self.bind(args)
        cuda_driver.activate(self.device_index)
        stream = torch._C._cuda_getCurrentRawStream(self.device_index)
        self.cuda_graph.launch(self.args, stream, self.nodes)
        return results(self.outputs, tensors)

    def bind(self, args: list) -> dict:
        """This call's tensors (the inputs, new outputs), their addresses in the nodes'
        argument lists."""
        tensors = dict(self.fixed)
        for k, buf in self.inputs:
            tensors[buf] = gpu_input(args[k])
        for buf, shape, dtype in self.allocate:
            tensors[buf] = torch.empty(shape, dtype=dtype, device=self.device)
        values = self.args
        for n, slot, buf in self.patches:
            values[n][slot] = tensors[buf].data_ptr()
        return tensors
