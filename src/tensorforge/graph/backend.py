"""The `torch.compile` backend (API.md §9): capture with aot_autograd, lower, build, run.

`torch.compile(model, backend="tensorforge")` finds `backend` through the `torch_dynamo_backends`
entry point. Dynamo hands over a torch-level graph; aot_autograd turns it into core ATen (with
the composites tensorforge fuses better kept whole: layer norm, softmax, SDPA's safe softmax,
log-softmax, GELU, SiLU) for inference, and calls `compile_aten` on it. Parameters and buffers
of the model are constants: their values are read once, at compile time (weights are packed,
batch norms folded), as Inductor's freezing does; a model whose weights change afterwards must
be compiled again. Graphs that need gradients (training, or a call without torch.no_grad()) are
compiled as AOTAutograd's forward and backward graphs, with nothing frozen, on CPU targets
(training.py; on a GPU they run eagerly for now).
Compiled graphs are kept on disk (cache.py): compiling the same graph again, in any process,
lowers it (folding the live weights) and loads its kernels instead of building them; where
Dynamo's graph itself has an entry (front_cache.py), AOTAutograd is skipped too.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings

import torch

from tensorforge.errors import ArgumentError
from tensorforge.graph import cache as graph_cache
from tensorforge.graph import front_cache
from tensorforge.graph.attention_decompositions import ATTENTION_DECOMPOSITIONS
from tensorforge.graph.effects import without_effect_tokens
from tensorforge.graph.lowerer import Lowerer
from tensorforge.graph.mutations import WritesInputs, functional, output_count
from tensorforge.graph.options import Float32Precision, Options
from tensorforge.graph.output_views import WithOutputViews, view_outputs
from tensorforge.graph.product_decompositions import product_decompositions
from tensorforge.graph.program import CompiledGraph, build_kernels
from tensorforge.graph.report import Checked
from tensorforge.graph.training import compile_training
from tensorforge.runtime.native_call import set_default_threads
from tensorforge.target import Target

aten = torch.ops.aten

# torch.set_num_threads(n) limits compiled models as it limits eager torch (and Inductor);
# TF_NUM_THREADS still overrides both
set_default_threads(torch.get_num_threads)

KEPT_WHOLE = (
    aten.native_layer_norm,
    aten.layer_norm,
    aten._softmax,
    aten.softmax,
    aten._safe_softmax,
    aten._log_softmax,
    aten.log_softmax,
    aten.gelu,
    aten.silu,
    aten.hardtanh,
    aten.embedding,
    aten.select_scatter,  # (its decomposition's where promotes to the source's dtype)
    aten.col2im,  # (their decompositions scatter with index_put: lower_fold.py gathers)
    aten.max_unpool2d,
    aten.max_unpool3d,
)


def decompositions() -> dict:
    """Core ATen decompositions, less those of the operators kept whole."""
    from torch._decomp import core_aten_decompositions, decomposition_table

    table = dict(core_aten_decompositions())
    table.update(ATTENTION_DECOMPOSITIONS)  # a GPU's fused attention kernels, as the CPU's
    table.update(product_decompositions())  # addmv, addbmm, masked_scatter
    # batch statistics (F.instance_norm; batch norm in training mode): var_mean, element-wise
    no_stats = aten._native_batch_norm_legit.no_stats
    table[no_stats] = decomposition_table[no_stats]
    kept = set(KEPT_WHOLE)
    return {op: fn for op, fn in table.items() if getattr(op, "overloadpacket", op) not in kept}


def backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None, mode=None):
    """Dynamo's entry: compile `gm` for inference, with the model's weights frozen; a graph that
    needs gradients as a forward and a backward graph (training.py)."""
    opts = Options.of(options)
    target = target_of(example_inputs, opts)
    _check_device(opts, target, example_inputs)
    if torch.is_grad_enabled() and any(
        getattr(x, "requires_grad", False) for x in example_inputs if isinstance(x, torch.Tensor)
    ):
        return compile_training(gm, example_inputs, opts, target, decompositions())
    constants = constant_inputs(gm, example_inputs)
    direct = not (opts.check or opts.report) and front_cache.direct_graph(gm, example_inputs)
    cached = direct and graph_cache.enabled(target)  # (front_key: None for symbolic sizes)
    key = front_cache.front_key(gm, example_inputs, constants, target, opts) if cached else None
    if key is not None:
        compiled = _from_front_entry(key, constants, target, opts)
        if compiled is not None:
            return compiled
    return _through_aot(gm, example_inputs, constants, opts, direct, key)


def _through_aot(gm, example_inputs, constants: dict, opts: Options, direct: bool, front_key):
    """Dynamo's graph -> ATen (aot_autograd) -> compile_aten. Where the ATen graph proves a
    plain function of Dynamo's inputs (front_cache.py; `direct`: Dynamo's graph may be one), the
    compiled graph is returned without AOT's runtime wrappers (they would do nothing but cost
    each call) and, with `front_key`, written as a first-level entry."""
    from torch._dynamo.backends.common import aot_autograd

    count = len(example_inputs)
    unwrapped = []  # the compiled graph as Dynamo's callable, where AOT's wrappers are idle

    def compiler(aten_gm, aten_inputs):
        from torch.utils._python_dispatch import _disable_current_modes

        known = constants if len(aten_inputs) == count else {}
        with _disable_current_modes():  # the weights are real tensors, read now
            compiled = compile_aten(aten_gm, aten_inputs, known, opts)
        if direct and isinstance(compiled, CompiledGraph):
            why = front_cache.unsafe_reason(gm, example_inputs, aten_gm, aten_inputs)
            if why is None:
                unwrapped.append(
                    front_cache.DynamoCallable(compiled, front_cache.returns_tuple(gm))
                )
                if front_key is not None:
                    front_cache.store(front_key, gm, aten_gm, compiled.cache_key)
            else:
                front_cache.STATS.unsafe += 1
                front_cache.STATS.last_reason = why
        return compiled

    wrapped = aot_autograd(fw_compiler=compiler, decompositions=decompositions())
    compiled = wrapped(gm, example_inputs)
    return unwrapped[0] if unwrapped else compiled


def _from_front_entry(key: str, constants: dict, target, opts: Options):
    """Dynamo's graph compiled from its first-level entry, without AOT (None: a miss)."""
    entry = front_cache.load(key)
    if entry is None:
        return None
    try:
        compiled = _compile(entry.aten_gm, constants, target, opts, entry.aten_key)
    except Exception:  # noqa: BLE001 - the AOT path compiles it (and says why, if it fails)
        compiled = None
    if compiled is None:  # its kernels' entry is gone or stale: compile through AOT again
        front_cache.reject(key)
        front_cache.STATS.misses += 1
        return None
    front_cache.STATS.hits += 1
    return front_cache.DynamoCallable(compiled, entry.as_tuple)


def constant_inputs(gm: torch.fx.GraphModule, example_inputs) -> dict[int, torch.Tensor]:
    """Positions of the graph inputs that are the model's parameters and buffers."""
    found = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for k, (node, value) in enumerate(zip(placeholders, example_inputs)):
        grapharg = node.meta.get("grapharg")
        source = getattr(getattr(grapharg, "source", None), "name", "")
        source = source() if callable(source) else str(source)
        is_state = "._parameters[" in source or "._buffers[" in source
        if isinstance(value, torch.Tensor) and (is_state or isinstance(value, torch.nn.Parameter)):
            found[k] = value
    return found


def target_of(example_inputs, opts: Options) -> Target:
    devices = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    kind = opts.target or ("cuda" if "cuda" in devices else "llvm")
    return Target(kind) if isinstance(kind, str) else kind


def _check_device(opts: Options, target: Target, example_inputs) -> None:
    """A CPU target for a model on the GPU: an error naming both (its kernels would read GPU
    memory). A CUDA target for CPU tensors builds (code generation without a GPU, as tests do)
    and its call raises (call_plan.gpu_argument)."""
    devices = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    if opts.target is not None and target.kind != "cuda" and devices and "cpu" not in devices:
        raise ArgumentError(
            f"torch.compile(backend='tensorforge'): options['target'] is {opts.target!r}, a "
            f"CPU target, but the model's tensors are on {', '.join(sorted(devices))}; move the "
            f"model and its inputs to the CPU, or leave the target out"
        )


def compile_aten(gm: torch.fx.GraphModule, example_inputs, constants: dict, opts: Options):
    """An ATen inference graph -> one callable (or the graph itself, run eagerly, if that fails)."""
    original, count = gm, output_count(gm)
    try:
        gm, written = functional(without_effect_tokens(gm), example_inputs)
        target = target_of(example_inputs, opts)
        with _thread_context(target):
            compiled = _compile(gm, constants, target, opts)
    except Exception as err:
        if os.environ.get("TENSORFORGE_GRAPH_STRICT", "") not in ("", "0"):
            raise
        warnings.warn(
            f"tensorforge could not compile this graph and runs it eagerly: "
            f"{type(err).__name__}: {err}",
            stacklevel=2,
        )
        return original.forward
    if opts.check or opts.report:
        compiled = Checked(compiled, gm, opts)
    views = view_outputs(gm)  # (outputs AOT would rebuild from ours with as_strided)
    if views:
        compiled = WithOutputViews(compiled, gm, views)
    return WritesInputs(compiled, count, written) if written else compiled


def _thread_context(target):
    """A CUDA graph compiled on a thread other than the main one (a training graph's backward,
    compiled on autograd's own thread at its first call) loads its kernels under a context
    pushed for the compile and popped after it (cuda_driver.thread_scope)."""
    if target.kind != "cuda" or threading.current_thread() is threading.main_thread():
        return contextlib.nullcontext()
    from tensorforge.runtime import cuda_driver

    return cuda_driver.thread_scope(torch.cuda.current_device())


def _compile(gm, constants: dict, target, opts: Options, cached_key: str | None = None):
    """Lower (folding the live weights), then load the kernels from the graph cache or build
    them. With `cached_key` (a first-level hit), only loading: None where the entry is gone."""
    device = torch.device("cuda" if target.kind == "cuda" else "cpu")
    precision = Float32Precision.of(target)  # torch's TF32 flags, as they are now
    program = Lowerer(gm, constants, target, precision).run()  # (constants: the live weights)
    key = cached_key or graph_cache.graph_key(
        gm, constants, target, opts.tuning_log, opts.schedule, precision
    )
    cached = graph_cache.enabled(target)
    steps = graph_cache.load(key, program, target) if cached else None
    if steps is None:
        if cached_key is not None:
            return None
        with _tuning(opts.tuning_log):
            steps = build_kernels(program, target, opts.tuning_log, opts.schedule)
        if cached:
            graph_cache.store(key, steps, target)
    compiled = CompiledGraph(program, steps, target, device)
    compiled.cache_key = key
    return compiled


def _tuning(log: str | None):
    if not log:
        return contextlib.nullcontext()
    from tensorforge import tune

    return tune.apply_history_best(log)
