"""Graphs that need gradients: AOTAutograd's joint graph, split into a forward and a backward
graph, each compiled by compile_aten (`torch.compile(model, backend="tensorforge")` on a model
whose parameters require grad, called with grad enabled: a training step, or inference without
torch.no_grad()), for the CPU or a GPU.

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
# NOTE: off, GPU training graphs run eagerly. Session 20 turned them off after a segfault (the
# philox seed of CUDA attention's dropout, a CPU scalar its backward reads on the host, was
# moved to the GPU: program.py now passes inputs only eager steps read as they came) and
# ResNet-18 gradients 1.2e-2 from float64's (batch norm's per-channel sums ran a thread per
# channel, serially: schedules_cuda_rows.is_block_reduction); both fixed in session 21
GPU_TRAINING = True

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
    if target.kind == "cuda" and not GPU_TRAINING:
        warnings.warn(
            "tensorforge: training graphs on a GPU are switched off (training.GPU_TRAINING); "
            "this one runs eagerly",
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
