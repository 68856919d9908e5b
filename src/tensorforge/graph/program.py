"""The compiled callable: kernels built, intermediates planned, one call runs the whole graph.

Inputs and outputs are torch tensors whose memory the kernels read and write directly (their
addresses, as DLPack would share them: no copies). Intermediates live in a few byte arenas
reused by liveness: a buffer's arena is free again after the last step that reads it. Symbolic
sizes are bound from each call's inputs, so a new batch size reuses every kernel; only the
arena plan is made again for it (and kept).
"""

from __future__ import annotations

import contextlib
import operator
import os
import re
import threading
import time
import warnings
from dataclasses import dataclass

import torch

from tensorforge import build as tf_build
from tensorforge import lower as tf_lower
from tensorforge.errors import TensorForgeError
from tensorforge.graph import call_plan, huge_pages, tuning
from tensorforge.graph import symbols as sym
from tensorforge.graph.build_progress import BuildProgress
from tensorforge.graph.cuda_call_plan import GraphLaunchPlan
from tensorforge.graph.eager_call import EagerCall, _shaped
from tensorforge.graph.lower_ws_product import SOURCE as WS_SOURCE
from tensorforge.graph.lower_ws_product import ws_kernel_source
from tensorforge.graph.lowered import BufferArg, EagerSpec, KernelSpec, Program
from tensorforge.graph.lowerer import TE_TO_TORCH
from tensorforge.graph.schedules import schedule_kernel
from tensorforge.runtime import build_workers
from tensorforge.runtime.module import Module
from tensorforge.target import as_target


@dataclass
class BuiltKernel:
    spec: KernelSpec
    call: object  # executable.call(raw_args)
    plan: list  # per kernel parameter: a Buffer, or a symbol name
    source: str  # the schedule rule that made it
    module: object
    executable: object = None  # what `call` belongs to (a CUDA graph reads its launch)
    positions: list | None = None  # per parameter: an index into [*spec.reads, *spec.written]


def build_kernels(
    program: Program, target, tuning_log: str | None = None, schedule: str = "auto"
) -> list:
    """Build every kernel of the program (through the compiled-code caches); a kernel with a
    record in `tuning_log` gets that record's schedule, the others the `schedule` option's
    (schedules.py: the first guess or the rules), falling back to the rules, then the plainest.
    On a GPU the kernels' nvcc runs go side by side once all are generated (cuda_exec.load_all);
    a kernel whose code then fails to compile is built again down the same fallbacks."""
    from tensorforge.runtime import cuda_driver, cuda_exec
    from tensorforge.runtime.cache import EXECUTABLES

    deferred = target.kind == "cuda" and cuda_driver.available()
    with cuda_exec.deferred_loads() if deferred else contextlib.nullcontext([]) as pending:
        built = _build_each(program, target, tuning_log, schedule)
    failed = {id(e) for e, _ in cuda_exec.load_all(pending)} if pending else set()
    if failed:
        redo = [
            k
            for k, b in enumerate(built)
            if isinstance(b, BuiltKernel) and any(id(e) in failed for e in _loads_of(b.executable))
        ]
        for k in redo:  # its cached executable (never loaded) must not come back
            executable = built[k].executable
            EXECUTABLES.forget(executable)
            EXECUTABLES.forget(getattr(executable, "inner", None))
        again = _build_each(program, target, tuning_log, schedule, only=redo, share=False)
        for k, b in zip(redo, again):
            built[k] = b
    return built


def _loads_of(executable) -> list:
    """The CUDAExecutables a built kernel's executable loads (a sequence's steps; where no GPU
    is usable, the one its stand-in holds)."""
    executable = getattr(executable, "inner", None) or executable
    return list(getattr(executable, "steps", None) or [executable])


def _build_each(program, target, tuning_log, schedule, only=None, share=True) -> list:
    """BuiltKernels (and the eager steps as they are) of the program's steps, or of those at
    indices `only`; kernels alike share their code where `share`. On the CPU the distinct
    kernels are built on every core (runtime/build_workers.py), the result the same."""
    names = program.symbols.var_names()
    variables = {v.name: v for v in program.symbols.vars.values()}
    hints = program.symbols.size_hints()
    steps = program.steps if only is None else [program.steps[k] for k in only]
    # which kernels are built (the first of each structure), and which share their code
    jobs: list[tuple[KernelSpec, list]] = []  # (spec, its buffers in the code's order)
    first: dict[str, int] = {}  # structure -> its job
    shapes: list = []  # per step: None (eager), or (job, canonical order)
    for spec in steps:
        if not isinstance(spec, KernelSpec):
            shapes.append(None)
            continue
        tuning.note(spec, target)
        # NOTE: kernels alike share code (and on CUDA a launch configuration: the same shapes
        # give the same grid); a tuning log's records are per kernel name, so none share then
        written = spec.anchor is not None and spec.anchor.kind == "ws_gemm"  # (by hand: built)
        alike = share and not tuning_log and not written
        found = structure_key(spec, schedule, names) if alike else None
        key, canon = found if found is not None else (None, None)
        if key is None or key not in first:
            jobs.append((spec, canon))
            if key is not None:
                first[key] = len(jobs) - 1
        shapes.append((first[key] if key is not None else len(jobs) - 1, canon))

    def arguments(j):
        spec, canon = jobs[j]
        tensors = spec.tensors if canon is None else [spec.tensors[k] for k in canon]
        return tensors + [variables[n] for n in names]

    def build(j):  # (module, rule), compiled here
        spec = jobs[j][0]
        if spec.anchor is not None and spec.anchor.kind == "ws_gemm":
            return Module.from_sources([ws_kernel_source(spec, target)], target), WS_SOURCE
        return _schedule_and_build(spec, target, arguments(j), tuning_log, schedule, hints)

    def generate(j):  # (KernelSource, rule), in a worker
        spec = jobs[j][0]
        if spec.anchor is not None and spec.anchor.kind == "ws_gemm":
            return ws_kernel_source(spec, target), WS_SOURCE
        return _schedule_and_build(
            spec, target, arguments(j), tuning_log, schedule, hints, make=_kernel_source
        )

    def finish(j, generated):  # a worker's source compiled here (else built anew, serially)
        source, rule = generated
        try:
            return Module.from_sources([source], target), rule
        except TensorForgeError:
            return build(j)

    with BuildProgress(len(jobs), target) as progress:
        parallel = target.kind == "llvm"  # (CUDA: nvcc runs side by side already)
        made = build_workers.build_all(
            len(jobs), build, generate, finish, progress.step, None if parallel else 1
        )
    built, slots_of = [], {}
    for spec, shape in zip(steps, shapes):
        if shape is None:
            built.append(spec)
            continue
        j, canon = shape
        module, source = made[j]
        if canon is None:  # (its code its own)
            positions = positions_of(spec, module[module.entry_name].source.params)
        else:  # the code of the first of its structure, bound to these buffers
            if j not in slots_of:  # per parameter, its buffer's rank in the canonical order
                positions = positions_of(jobs[j][0], module[module.entry_name].source.params)
                slots_of[j] = [canon.index(p) if isinstance(p, int) else p for p in positions]
            positions = [canon[p] if isinstance(p, int) else p for p in slots_of[j]]
        executable = module[module.entry_name].executable
        plan = plan_from(spec, positions)
        built.append(
            BuiltKernel(spec, executable.call, plan, source, module, executable, positions)
        )
    return built


def positions_of(spec: KernelSpec, params) -> list:
    """Per kernel parameter, its index in [*spec.reads, *spec.written] (or the size symbol's
    name): what binds the same code to the buffers of another kernel of the same structure."""
    index = {b.name: k for k, b in enumerate(spec.reads)}
    for k, out in enumerate(spec.outputs):
        index[out.name] = len(spec.reads) + k
    return [index.get(p.name, p.name) for p in params]


def plan_from(spec: KernelSpec, positions: list) -> list:
    """Per kernel parameter, the Buffer it is bound to (or the size symbol's name)."""
    buffers = [*spec.reads, *spec.written]
    return [buffers[p] if isinstance(p, int) else p for p in positions]


def structure_key(spec: KernelSpec, schedule: str, symbols: list) -> tuple[str, list] | None:
    """(text, order): a text equal for two kernels that compute the same thing on buffers of
    the same shapes, up to names and the order of their reads (so they get the same schedule
    and code), and the kernel's buffers in the order the text names them (indices into
    [*spec.reads, spec.buffer]: the parameter order of the code they share). None where names
    cannot be told apart from the loop variables."""
    from tensorforge.te.graph import topological_ops
    from tensorforge.te.tensor import ComputeOp, PlaceholderOp

    if spec.more:  # (an extern stage: nothing to share)
        return None
    tensors = spec.tensors
    index = {t.op: k for k, t in enumerate(tensors)}
    ops = topological_ops([spec.out.op])  # from the output: an order the structure decides
    reached = [index[op] for op in ops if isinstance(op, PlaceholderOp) and op in index]
    unread = [k for k in range(len(spec.reads)) if k not in reached]
    canon = [*reached, *unread, len(spec.reads)]
    ops = [tensors[k].op for k in unread] + ops
    rename, variables, lines = {}, set(symbols), []
    for op in [tensors[k].op for k in canon] + ops:
        rename.setdefault(op.name, f"@{len(rename)}")
    for op in ops:
        if isinstance(op, PlaceholderOp):
            lines.append(f"in {op.name} {[str(e) for e in op.shape]} {op.dtype}")
        elif isinstance(op, ComputeOp):
            variables |= {iv.var.name for iv in (*op.axis, *op.reduce_axis)}
            axes = [f"{iv.var.name}:{iv.dom.min}+{iv.dom.extent}" for iv in op.axis]
            reduce = [f"{iv.var.name}:{iv.dom.min}+{iv.dom.extent}" for iv in op.reduce_axis]
            body = "; ".join(str(b) for b in op.body)
            lines.append(f"compute {op.name} {op.tag} {axes} {reduce} {body}")
        else:
            return None
    if len(rename) != len(ops) or variables & set(rename):
        return None
    anchor = spec.anchor
    if anchor is not None:
        info = {k: v for k, v in anchor.info.items() if k != "stages"}
        stages = [s.op.name for s in anchor.info.get("stages", [])]
        lines.append(f"anchor {anchor.kind} {sorted(info.items(), key=str)} {stages}")
    lines.append(f"args {[tensors[k].op.name for k in canon]} {symbols} {schedule}")
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in rename) + r")\b")
    return pattern.sub(lambda m: rename[m.group(0)], "\n".join(lines)), canon


def _schedule_and_build(
    spec, target, args, tuning_log, schedule, size_hints=None, make=tf_build
) -> tuple:
    """(module, source) from the first schedule of the kernel that builds: its tuning record's,
    the `schedule` option's, the rules', and the plainest (a shape that defeats a rule).
    `size_hints`: the size symbols' example values, where the first guess sizes by them.
    `make=_kernel_source`: (KernelSource, source) instead, its code not compiled."""
    choices = [
        lambda: tuning.tuned_schedule(spec, target, tuning_log) if tuning_log else None,
        lambda: schedule_kernel(spec, target, schedule=schedule, size_hints=size_hints),
        lambda: schedule_kernel(spec, target) if schedule != "rules" else None,
    ]
    for choose in choices:
        try:
            chosen = choose()
            if chosen is not None:
                s, source = chosen
                return make(s, args, target=target, name=spec.name), source
        except TensorForgeError:
            pass
    s, source = schedule_kernel(spec, target, simple=True)
    return make(s, args, target=target, name=spec.name), source


def _kernel_source(s, args, target, name):
    """The KernelSource `tf_build(s, args, target, name)` compiles (what a worker sends)."""
    from tensorforge.codegen.base import codegen_for

    target = as_target(target)
    return codegen_for(target.kind).generate(tf_lower(s, args, name=name, target=target), target)


class CompiledGraph:
    """`f(args)` -> list of outputs, for the ATen graph `program` was lowered from."""

    _boxed_call = True  # aot_autograd passes the arguments as one list

    def __init__(self, program: Program, steps: list, target, device: torch.device):
        self.program = program
        self.steps = steps
        self.target = target
        self.device = device
        self._arenas: dict[object, dict] = {}  # `_sizes` -> arenas
        self._last_use = self._liveness()
        # inputs only eager steps read are passed to them as they came: a CPU scalar stays on
        # the CPU (the philox seed and offset of CUDA attention's dropout, which its backward
        # reads on the host: moved to the GPU as a kernel's scalar input is, it segfaulted)
        kernel_reads = {b for st in steps if isinstance(st, BuiltKernel) for b in _reads_of(st)}
        self._eager_inputs = {
            b
            for b in program.inputs
            if b is not None and not isinstance(b, str)
            if b not in kernel_reads
        }
        # each symbol bound once per call: from its own argument where Dynamo passes one (it
        # does for every symbol of dynamic=True), else from the first input size that is it
        self._shape_symbols = []
        symbol_args = [k for k, item in enumerate(program.inputs) if isinstance(item, str)]
        self._symbol_args = symbol_args
        self._symbol_names = [program.inputs[k] for k in symbol_args]
        self._symbol_values = operator.itemgetter(*symbol_args) if symbol_args else None
        bound = {name for name in program.inputs if isinstance(name, str)}
        for k, buf in enumerate(program.inputs):
            if buf is None or isinstance(buf, str):
                continue
            for d, size in enumerate(buf.shape):
                if isinstance(size, sym_var_type()) and size.name not in bound:
                    bound.add(size.name)
                    self._shape_symbols.append((k, d, size.name))
        self.timings: list[float] | None = None
        self.cache_key: str | None = None  # its kernels' entry in the graph cache (cache.py)
        self.reuse = True
        self.lean = True  # calls through a CallPlan where the kernels allow (call_plan.py)
        self._plans: dict[object, call_plan.CallPlan] = {}  # `_sizes` -> plan
        self._eager_calls: dict[int, EagerCall] = {}  # id of an EagerSpec step -> its call
        self._binds = bool(self._shape_symbols) or any(isinstance(b, str) for b in program.inputs)
        self._constants: dict | None = None
        # a CUDA graph of the kernels: where every step is a kernel and the sizes are static
        self._graph = None
        self._graph_calls = 0
        self._graph_plan = None  # the lean call through the graph (cuda_call_plan.py)
        self.use_cuda_graph = (
            device.type == "cuda"
            and not self._binds  # (a symbol passed as an argument is a size too)
            and all(isinstance(s, BuiltKernel) for s in steps)
            and os.environ.get("TENSORFORGE_CUDA_GRAPH", "1") not in ("0", "")
        )

    # -- planning ---------------------------------------------------------------------------
    def _liveness(self) -> dict:
        last = {}
        for t, step in enumerate(self.steps):
            for buf in _reads_of(step):
                if buf.kind == "temp":
                    last[buf] = t
        return last

    def _plan(self, bindings: dict[str, int]) -> dict:
        """A tensor for each temp buffer at these sizes, sharing arenas by liveness."""
        arenas: list[torch.Tensor] = []
        free: list[int] = []
        views = {}
        for t, step in enumerate(self.steps):
            for buf in _writes_of(step):
                if buf.kind != "temp":
                    continue
                shape = [sym.evaluate(s, bindings) for s in buf.shape]
                dtype = TE_TO_TORCH[buf.dtype]
                nbytes = max(1, _numel(shape)) * torch.empty((), dtype=dtype).element_size()
                fits = [a for a in free if arenas[a].numel() >= nbytes] if self.reuse else []
                if fits:
                    a = min(fits, key=lambda k: arenas[k].numel())
                    free.remove(a)
                else:
                    arenas.append(self._arena(nbytes))
                    a = len(arenas) - 1
                count = _numel(shape)  # (an empty temp still takes an element of arena)
                views[buf] = (a, arenas[a][:nbytes].view(dtype)[:count].view(shape))
            for buf in _reads_of(step):
                if self._last_use.get(buf) == t and buf in views:
                    free.append(views[buf][0])
        return {buf: view for buf, (_, view) in views.items()}

    def _arena(self, nbytes: int) -> torch.Tensor:
        if self.device.type == "cpu":
            return huge_pages.empty_bytes(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def _device_constants(self) -> dict:
        """The constants the steps read or the graph returns, on the kernels' device; on the
        CPU in one arena of huge pages (the matmuls stream their weights with fewer TLB
        misses: huge_pages.py).

        The program then keeps only these, placed: the constants folded on the way to them (a
        weight's transpose before its packing) and the copies made before placing are freed.
        A GPT-2 block (27 MB of weights) held 146 MB of constants without this, 28 MB with it.
        """
        used = {b for step in self.steps for b in _reads_of(step) if b.kind == "constant"}
        torch.utils._pytree.tree_map(
            lambda v: used.add(v.buffer) if isinstance(v, BufferArg) else None,
            self.program.outputs,
        )
        constants = {b: t for b, t in self.program.constants.items() if b in used}
        if self.device.type == "cpu":
            placed = huge_pages.packed(constants)
        else:
            placed = {b: call_plan.gpu_input(t.to(self.device)) for b, t in constants.items()}
        self.program.constants.clear()
        self.program.constants.update(placed)
        return placed

    # -- running ----------------------------------------------------------------------------
    def __call__(self, args: list) -> list:
        if self.device.type == "cuda" and threading.current_thread() is not threading.main_thread():
            from tensorforge.runtime import cuda_driver

            with cuda_driver.thread_scope(self.device.index or 0):  # (autograd's own thread)
                return self._call(args)
        return self._call(args)

    def _call(self, args: list) -> list:
        if self._graph_plan is not None and self.timings is None:
            return self._graph_plan(args)
        if self.timings is None and self.lean:
            plan = self._lean_plan(args)
            if plan is not None:
                return plan(self, args)
        args = list(args)
        bindings = self._bind(args)
        cuda = self.device.type == "cuda"
        inputs = {  # (checked before any memory is allocated on the graph's device)
            buf: call_plan.gpu_argument(args[k])
            if cuda and buf not in self._eager_inputs
            else args[k].contiguous()
            for k, buf in enumerate(self.program.inputs)
            if buf is not None and not isinstance(buf, str)
        }
        temps, constants = self._memory(self._sizes(args), bindings)
        tensors = {**temps, **constants, **inputs}
        timings = self.timings
        if self.use_cuda_graph and timings is None and self._launch_graph(tensors, bindings):
            return [self._result(v, tensors, bindings) for v in self.program.outputs]
        for step in self.steps:
            start = time.perf_counter() if timings is not None else 0.0
            if isinstance(step, BuiltKernel):
                for buf in step.spec.written:
                    if buf not in tensors:
                        tensors[buf] = _empty(buf, bindings, self.device)
                step.call(
                    [
                        tensors[p].data_ptr() if not isinstance(p, str) else bindings[p]
                        for p in step.plan
                    ]
                )
            else:
                self._eager(step, tensors, bindings)
            if timings is not None:
                timings.append(time.perf_counter() - start)
        self.last_tensors = tensors if timings is not None else None
        return [self._result(v, tensors, bindings) for v in self.program.outputs]

    def _lean_plan(self, args: list):
        """The CallPlan (call_plan.py) of these arguments' sizes; None where the graph's kernels
        are not CPU kernels (then every call takes the general path)."""
        key = self._sizes(args) if self._binds else ()
        plan = self._plans.get(key)
        if plan is None:
            if not call_plan.usable(self):
                self.lean = False
                return None
            bindings = self._bind(args)
            temps, constants = self._memory(key, bindings)
            plan = self._plans[key] = call_plan.CallPlan(self, bindings, temps, constants)
        return plan

    def _memory(self, key: object, bindings: dict) -> tuple[dict, dict]:
        """(intermediates, constants): the arenas of this set of sizes, made on its first call,
        and the constants on the kernels' device, placed once."""
        temps = self._arenas.get(key)
        if temps is None:
            temps = self._arenas[key] = self._plan(bindings)
        if self._constants is None:
            self._constants = self._device_constants()
        return temps, self._constants

    def _launch_graph(self, tensors: dict, bindings: dict) -> bool:
        """Run the kernels as one CUDA graph (built on the second call, once the kernels are
        loaded); False where it cannot be (then the kernels launch one by one)."""
        from tensorforge.graph import cuda_graph
        from tensorforge.runtime import cuda_driver

        args = []
        for step in self.steps:
            for buf in step.spec.written:
                if buf not in tensors:
                    tensors[buf] = _empty(buf, bindings, self.device)
            args.append(
                [
                    tensors[p].data_ptr() if not isinstance(p, str) else bindings[p]
                    for p in step.plan
                ]
            )
        self._graph_calls += 1
        if self._graph_calls >= 2:
            cuda_driver.activate(self.device.index or 0)
        if self._graph is None:
            if self._graph_calls < 2:
                return False
            try:
                nodes = [cuda_graph.node_of(s.executable, a) for s, a in zip(self.steps, args)]
                if any(n is None for n in nodes):
                    raise TensorForgeError("a kernel is a sequence of kernels")
                self._graph = cuda_graph.CudaGraph(nodes, args)
                temps, constants = self._memory((), bindings)
                self._graph_plan = GraphLaunchPlan(self, self._graph, {**temps, **constants}, args)
            except (TensorForgeError, OSError, AttributeError) as err:
                warnings.warn(
                    f"tensorforge: the kernels launch one by one (no CUDA graph: {err})",
                    stacklevel=3,
                )
                self.use_cuda_graph = False
                return False
        self._graph.launch(args, torch._C._cuda_getCurrentRawStream(self.device.index or 0))
        return True

    def _sizes(self, args: list):
        """The key of a call's sizes (its plan's and its arenas'): the values of the symbols
        passed as arguments (a tuple; the value itself where there is one), with those read
        from input sizes after them. A dynamic=True softmax call's plan lookup 0.80 -> 0.19 us
        (the bindings, a dict, are made only for a new key)."""
        sizes = self._symbol_values(args) if self._symbol_values is not None else ()
        if self._shape_symbols:
            shapes = tuple([args[k].shape[d] for k, d, _ in self._shape_symbols])
            sizes = (sizes, shapes)
        return sizes

    def _bind(self, args: list) -> dict[str, int]:
        bindings = {name: int(args[k]) for name, k in zip(self._symbol_names, self._symbol_args)}
        for k, d, name in self._shape_symbols:
            bindings[name] = int(args[k].shape[d])
        return bindings

    def _eager(self, step: EagerSpec, tensors: dict, bindings: dict) -> None:
        call = self._eager_calls.get(id(step))
        if call is None:
            call = self._eager_calls[id(step)] = EagerCall(step)
        result = step.target(*call.arguments(tensors, bindings), **call.keywords(tensors, bindings))
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        # A result in the storage of a temp it read (a view, an in-place operator's) is copied:
        # the temp's arena is free for later buffers after this step
        temps = {tensors[b].untyped_storage().data_ptr() for b in call.temps}
        for buf, r in zip(step.outputs, results):
            if buf is not None:  # (a view into its input's storage may start anywhere)
                if temps and r.untyped_storage().data_ptr() in temps:
                    r = r.clone(memory_format=torch.contiguous_format)
                cuda = r.device.type == "cuda"
                tensors[buf] = call_plan.gpu_input(r) if cuda else r.contiguous()

    def _result(self, value, tensors: dict, bindings: dict):
        if isinstance(value, BufferArg):
            return _shaped(tensors[value.buffer], value.shape, bindings)
        if sym.is_size_expr(value):
            return sym.evaluate(value, bindings)
        return value


def sym_var_type():
    from tensorforge.te.expr import Var

    return Var


def _empty(buf, bindings: dict, device) -> torch.Tensor:
    shape = [sym.evaluate(s, bindings) for s in buf.shape]
    return torch.empty(shape, dtype=TE_TO_TORCH[buf.dtype], device=device)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _reads_of(step) -> list:
    if isinstance(step, BuiltKernel):
        step = step.spec
    if isinstance(step, KernelSpec):
        return list(step.reads)
    found = []
    torch.utils._pytree.tree_map(
        lambda v: found.append(v.buffer) if isinstance(v, BufferArg) else None,
        (step.args, step.kwargs),
    )
    return found


def _writes_of(step) -> list:
    if isinstance(step, BuiltKernel):
        return step.spec.written
    if isinstance(step, KernelSpec):
        return step.written
    return [b for b in step.outputs if b is not None]
