"""TVM names tensorforge does not provide, and what to use instead (API.md §7).

A program ported from TVM by changing `tvm` to `tf` reaches these through a module's
`__getattr__`; each raises MissingNameError, which says the name is not part of tensorforge and
names the tensorforge way, instead of a bare AttributeError. A name that is neither provided nor
listed gets the same error with the closest provided names.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from tensorforge.errors import TensorForgeError


class MissingNameError(TensorForgeError, AttributeError):
    """A TVM name (or a misspelt one) that tensorforge does not provide; the message says what
    to use instead. An AttributeError too, so `hasattr` and `getattr(m, x, default)` work."""


_NO_GRAPH = (
    "tensorforge has no graph-level IR: write each operator with te.compute (or take one from "
    "tensorforge.ops), or compile a PyTorch model with torch.compile(model, backend='tensorforge')"
)
_ONE_PIPELINE = (
    "tensorforge runs its passes in one fixed order (tensorforge.ir.pipeline.passes_for); "
    "tf.lower(s, args, trace=True) prints the IR after each pass"
)
_ONLY_TARGETS = "tensorforge targets 'llvm' (the CPU, tf.cpu(0)) and 'cuda' (tf.cuda(0)) only"

# tvm.X
TOP_LEVEL = {
    "relay": _NO_GRAPH,
    "relax": _NO_GRAPH,
    "IRModule": "tf.lower(s, args) returns one PrimFunc; tf.build takes a schedule or a PrimFunc",
    "transform": _ONE_PIPELINE,
    "instrument": _ONE_PIPELINE,
    "rpc": "there is no RPC: tuning builds and measures in local worker processes "
    "(tune.LocalBuilder / tune.LocalRunner)",
    "contrib": "tvm.contrib is not provided: Module.export_library(path) writes a shared library "
    "and tf.runtime.load_module(path) loads it; tf.register_func registers a Python packed "
    "function; use Python's tempfile for utils.tempdir",
    "autotvm": "AutoTVM is tensorforge.tune (tune.template, tune.task.create, tune.tuner.XGBTuner, "
    "tune.measure_option, tune.apply_history_best)",
    "auto_scheduler": "the auto-scheduler is tensorforge.tune.auto (auto.register_workload, "
    "auto.SearchTask)",
    "meta_schedule": "use tensorforge.tune.auto (auto-scheduling) or tensorforge.tune (templates)",
    "dlight": "use tensorforge.ops (operators with default schedules) or tensorforge.tune.auto",
    "topi": "operators live in tensorforge.ops (matmul, conv2d, softmax, ...)",
    "driver": "tf.lower and tf.build",
    "build_module": "tf.lower and tf.build",
    "micro": _ONLY_TARGETS,
    "script": "TVMScript is not provided: declare with te.compute and schedule with "
    "te.create_schedule; print(tf.lower(s, args)) shows the loop IR",
    "parser": "TVMScript is not provided: declare with te.compute; tf.lower prints the IR",
    "arith": "tensorforge.ir.arith (simplify_expr, symbolic_bounds, prove)",
    "error": "tensorforge.errors (TensorForgeError, ScheduleError, BuildError, ...)",
    "gpu": "tf.cuda(0)",
    "context": "tf.device('cpu' | 'cuda', 0)",
    "opencl": _ONLY_TARGETS,
    "vulkan": _ONLY_TARGETS,
    "metal": _ONLY_TARGETS,
    "rocm": _ONLY_TARGETS,
    "vpi": _ONLY_TARGETS,
    "ext_dev": _ONLY_TARGETS,
    "hexagon": _ONLY_TARGETS,
    # pre-0.7 TVM spelled the tensor-expression builders at top level
    **{
        old: f"te.{old}"
        for old in (
            "placeholder",
            "compute",
            "var",
            "reduce_axis",
            "sum",
            "thread_axis",
            "create_schedule",
            "const",
            "extern",
            "scan",
            "decl_tensor_intrin",
        )
    },
    "decl_buffer": "tf.tir.decl_buffer",
    "call_packed": "tf.tir.call_packed",
    "call_extern": "tf.tir.call_extern",
}

# tvm.te.X
TE = {
    "hybrid": "hybrid scripts are not provided: write the loop body with te.compute "
    "(te.if_then_else for branches, te.scan for recurrences)",
    "create_prim_func": "tf.lower(s, args) (a PrimFunc of the scheduled loops)",
    "gradient": "automatic differentiation is not provided: write the gradient with te.compute",
    "trace": "not provided: print(tf.lower(s, args)) shows every expression of the kernel",
    "extern_primfunc": "te.extern with tf.tir.call_packed / tf.tir.call_extern",
    "tag_scope": "pass tag= to te.compute",
    "Schedule": "te.create_schedule(ops) returns tensorforge.schedule.Schedule",
    "Stage": "s[T] returns a tensorforge.schedule.Stage",
    "TensorSlice": "index a tensor fully (T[i, j]); slices are not provided",
    "truncdiv": "'//' (te.floordiv); it equals truncdiv for non-negative operands",
    "truncmod": "'%' (te.floormod); it equals truncmod for non-negative operands",
    **{
        name: "not provided; te offers exp, exp2, expm1, log, log2, log10, log1p, sqrt, rsqrt, "
        "sin, cos, tan, asin, acos, atan, atan2, sinh, cosh, tanh, asinh, acosh, atanh, sigmoid, "
        "erf, erfc, floor, ceil, round, abs, power, fmod, hypot, copysign, nextafter, "
        "bitwise_and / or / xor, shift_left / right (or "
        "tf.tir.call_pure_extern('float32', 'ldexpf', x, n) for a libm function on the CPU)"
        for name in (
            "exp10",
            "trunc",
            "nearbyint",
            "ldexp",
            "isnan",
            "isinf",
            "isfinite",
            "popcount",
            "clz",
            "q_multiply_shift",
        )
    },
}

# tvm.tir.X
TIR = {
    "transform": _ONE_PIPELINE,
    "analysis": "tensorforge.ir.passes.verify checks the lowered IR",
    "stmt_functor": "tensorforge.ir.visit (rewrite, walk, map_children)",
    "Schedule": "TensorIR schedules are not provided: te.create_schedule(ops) and s[T].split, "
    "reorder, tensorize, ...",
    "schedule": "te.create_schedule(ops) and the stage primitives s[T].split, reorder, ...",
    "prim_func": "TVMScript is not provided: declare with te.compute",
    "Block": "TensorIR blocks are not provided: declare with te.compute",
    "BlockRealize": "TensorIR blocks are not provided: declare with te.compute",
    "call_intrin": "tf.tir.call_pure_extern(dtype, name, ...) for a C function, or "
    "tf.tir.call_llvm_pure_intrin(dtype, 'llvm.name', ...) for an LLVM intrinsic",
    "StringImm": "pass Python strings straight to tf.tir.call_packed / call_extern",
    "ptx_mma": "CUDA tensor-core intrinsics are planned (issue 17); use tensorize with "
    "te.decl_tensor_intrin",
    "ptx_ldmatrix": "CUDA tensor-core intrinsics are planned (issue 17)",
    "truncdiv": TE["truncdiv"],
    "truncmod": TE["truncmod"],
}

# tvm.autotvm.X
TUNE = {
    "RPCRunner": "there is no RPC: measure with tune.LocalRunner(number, repeat, min_repeat_ms, "
    "timeout)",
    "graph_tuner": _NO_GRAPH,
    "tophub": "there are no pre-tuned logs to download: tune with tune.tuner.XGBTuner into a log "
    "and use tune.apply_history_best(log)",
    "record": "tune.load_records(path) (Record objects: .config, .result, .cost) and "
    "tune.apply_history_best(path)",
    "env": "not provided",
    "feature": "tensorforge.tune.tuner.features",
    "database": "records are JSON lines: tune.load_records(path)",
    "FallbackContext": "outside apply_history_best a template runs with its default config",
    "ApplyHistoryBest": "tune.apply_history_best(path)",
    "ApplyConfig": "tune.get_config() inside a template; task.instantiate(config) outside",
    "extract_from_program": _NO_GRAPH + "; tune each operator with tune.task.create",
}

# tvm.autotvm.tuner.X
TUNER = {
    "GATuner": "tune.tuner.XGBTuner (model-guided) or tune.tuner.RandomTuner",
    "DropoutTuner": "tune.tuner.XGBTuner or tune.tuner.RandomTuner",
    "PSOTuner": "tune.tuner.XGBTuner or tune.tuner.RandomTuner",
    "ModelBasedTuner": "tune.tuner.XGBTuner",
}

# tvm.autotvm.task.X
TASK = {
    "extract_from_program": TUNE["extract_from_program"],
    "relay_integration": _NO_GRAPH,
    "topi_integration": "templates are registered with tune.template(name)",
    "register_topi_compute": "templates are registered with tune.template(name)",
    "register_topi_schedule": "templates are registered with tune.template(name)",
    "DispatchContext": "tune.apply_history_best(path) is the dispatch context",
}


def missing(module: str, name: str, table: dict[str, str], provided: Iterable[str]) -> Exception:
    """The error for `module.name` (raise it): the table's advice for a TVM name, otherwise
    an unknown attribute with the closest provided names. Dunder names get a plain
    AttributeError, as Python's machinery (copy, pickle, inspect) expects."""
    if name.startswith("__") and name.endswith("__"):
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    if name in table:
        return MissingNameError(
            f"{module}.{name} is a TVM name that tensorforge does not provide; use instead: "
            f"{table[name]}"
        )
    known = sorted({n for n in provided if not n.startswith("_")} | set())
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return MissingNameError(f"module {module!r} has no attribute {name!r}{hint}")
