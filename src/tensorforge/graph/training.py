"""Graphs that need gradients: AOTAutograd's joint graph, split into a forward and a backward
graph, each compiled by compile_aten (`torch.compile(model, backend="tensorforge")` on a model
whose parameters require grad, called with grad enabled: a training step, or inference without
torch.no_grad()). On CPU targets: on a GPU such a graph runs eagerly, with a warning (see
compile_training).

What differs from inference graphs (backend.py):
- Nothing is frozen: parameters and buffers are graph inputs read on every call, so an optimizer
  step, or a change the user makes to a weight, is seen by the next call.
- The partition is Inductor's min-cut rematerialization (cheap element-wise values are recomputed
  in the backward graph rather than saved), so the forward graph writes fewer activations.
- Normalizations are decomposed whole (layer, group and batch norm, batch norm's running
  statistics included): the forward graph must output the mean and reciprocal deviation that
  their backward formulas read, and the decomposed forms give them as fused reductions.
- Attention keeps torch's own operators (forward and backward: the fused kernels and their saved
  log-sum-exp), where inference decomposes it (attention_decompositions.py, whose forms return no
  log-sum-exp for a backward to read). Operators tensorforge does not lower (convolution_backward,
  dropout's random mask, ...) run eagerly inside the compiled graphs, as in inference graphs.
"""

from __future__ import annotations

import warnings

import torch

from tensorforge.graph.options import Options

aten = torch.ops.aten

# decomposed in training graphs: their statistic outputs feed the backward graph
_NORMALIZATIONS = (
    aten.native_layer_norm,
    aten.native_group_norm,
    aten.native_batch_norm,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional,
    aten._native_batch_norm_legit_no_training,
)
_ATTENTION = (
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_cudnn_attention,
    aten._scaled_dot_product_flash_attention_for_cpu,
)


def training_decompositions(inference: dict) -> dict:
    """The inference table (backend.decompositions) with normalizations decomposed and attention
    left to torch."""
    from torch._decomp import decomposition_table

    table = {op: fn for op, fn in inference.items() if op.overloadpacket not in _ATTENTION}
    for packet in _NORMALIZATIONS:
        for name in packet.overloads():
            op = getattr(packet, name)
            if op in decomposition_table:
                table[op] = decomposition_table[op]
    return table


def compile_training(gm: torch.fx.GraphModule, example_inputs, opts: Options, target, inference):
    """Dynamo's graph -> a callable whose forward and backward run tensorforge's kernels
    (`inference`: backend.decompositions(), which training_decompositions adapts)."""
    if target.kind == "cuda":
        # NOTE: on the H200 a training step of MLPs and a GPT-2 block compiled right (gradients
        # 8e-7 from eager's) and faster (GPT-2 block 1.62x eager), but ResNet-18's gradients
        # were 1.2e-2 from float64's (eager's 2.9e-5) and a graph with a group norm and an
        # eager step in its backward crashed in that step; until both are found, training
        # graphs on a GPU run as eager torch runs them
        warnings.warn(
            "tensorforge compiles training graphs for the CPU; on a GPU this one runs eagerly "
            "(call the model under torch.no_grad() for compiled GPU inference)",
            stacklevel=3,
        )
        return gm.forward
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from tensorforge.graph.backend import compile_aten

    def forward_compiler(aten_gm, aten_inputs):
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():  # (real tensors: nothing is folded, but shapes are read)
            return compile_aten(aten_gm, aten_inputs, {}, opts)

    def backward_compiler(aten_gm, aten_inputs):
        compiled = forward_compiler(aten_gm, aten_inputs)
        if not getattr(compiled, "_boxed_call", False):
            return compiled

        # Dynamo wraps the backward in `disable`, whose wrapper copies a function's attributes
        # (so AOTAutograd still sees `_boxed_call`) but not an object's class attributes
        def run_boxed(args):
            return compiled(args)

        run_boxed._boxed_call = True
        return run_boxed

    wrapped = aot_autograd(
        fw_compiler=forward_compiler,
        bw_compiler=backward_compiler,
        decompositions=training_decompositions(inference),
        partition_fn=min_cut_rematerialization_partition,
    )
    return wrapped(gm, example_inputs)
