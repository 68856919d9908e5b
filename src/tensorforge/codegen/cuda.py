"""The CUDA backend: a lowered PrimFunc becomes one `extern "C" __global__` CUDA C kernel.

The whole PrimFunc body is device code and runs in every thread: a THREAD_BINDING loop becomes
its index (`int tx = (int)threadIdx.x;`), other loops stay loops in each thread. The launch
geometry comes from the bound loops (cuda_launch.py); expressions are printed by cuda_expr.py and
a ThreadAllReduce must have been lowered (lower_thread_allreduce). Shared memory is static (`__shared__ T name[n];`) up to
48 KiB per block and one dynamic `extern __shared__` buffer carved into arrays above that, in
which arrays of lifetimes apart share bytes (cuda_shared.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tensorforge.codegen.base import KernelSource, Launch, Param
from tensorforge.codegen.cuda_expr import ExprPrinter, Names
from tensorforge.codegen.cuda_helpers import FLOOR_HELPERS, MINMAX_NAN_HELPERS
from tensorforge.codegen.cuda_intrin import (
    ASYNC_FILL_CALLS,
    SWIZZLED_CALLS,
    async_copy_lines,
    tensor_maps,
    warp_fragment_size,
)
from tensorforge.codegen.cuda_launch import ThreadExtents, compute_launch, host_expr
from tensorforge.codegen.cuda_pipeline import PipelineWriter, cluster_size
from tensorforge.codegen.cuda_shared import plan_offsets, shared_arrays
from tensorforge.codegen.cuda_types import HALF_TYPES, ctype
from tensorforge.errors import BuildError
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.extern import AddressOf
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    KernelLaunch,
    LetStmt,
    LoopKind,
    Prefetch,
    PrimFunc,
    Realize,
    Seq,
    Stmt,
    ThreadAllReduce,
    While,
    seq,
)
from tensorforge.ir.visit import walk
from tensorforge.target import Target, as_target
from tensorforge.te import dtype as dt
from tensorforge.te import expr as E
from tensorforge.te.extern_call import ExternCall

STATIC_SHARED_LIMIT = 48 * 1024


class CUDACodegen:
    """Lowered PrimFunc -> CUDA C source with its launch geometry (see docs/lowered-ir.md)."""

    def generate(self, func: PrimFunc, target: Target | str | None = None) -> KernelSource:
        target = as_target(target if target is not None else "cuda")
        if any(isinstance(n, KernelLaunch) for n in walk(func.body)):
            return _write_kernels(func, target)
        return _KernelWriter(func, target).write()


def _write_kernels(func: PrimFunc, target: Target) -> KernelSource:
    """A function split into kernels (split_device_kernels): each KernelLaunch becomes kernel
    `{name}_{kernel}` of one CUDA source; the global allocations above them become the
    intermediates the host allocates."""
    body, allocations = func.body, []
    while isinstance(body, Allocate):
        allocations.append(body)
        body = body.body
    launches = list(body.stmts) if isinstance(body, Seq) else [body]
    if not all(isinstance(k, KernelLaunch) for k in launches):
        raise BuildError(
            f"CUDA codegen: '{func.name}' mixes kernels with host statements; every root "
            f"statement must be a KernelLaunch (run split_device_kernels)"
        )
    intermediates = tuple(a.buffer for a in allocations)
    names = [p.name for p in func.params if isinstance(p, (Buffer, E.Var))]
    names += [b.name for b in intermediates]
    clash = next((n for n in names if names.count(n) > 1), None)
    if clash is not None:
        raise BuildError(
            f"'{func.name}': two buffers or scalars are named '{clash}'; a multi-kernel function "
            f"passes them between kernels by name, so give the tensors distinct names"
        )
    kernels, preamble, texts = [], [], []
    for launch in launches:
        used = {id(n) for n in walk(launch.body) if isinstance(n, (E.Var, Buffer))}
        used |= {
            id(n.buffer) for n in walk(launch.body) if isinstance(n, (BufferLoad, BufferStore))
        }
        params = tuple(p for p in (*func.params, *intermediates) if id(p) in used)
        sub = PrimFunc(f"{func.name}_{launch.name}", params, launch.body)
        writer = _KernelWriter(sub, target, entry=sub.name)
        kernels.append(writer.write())
        preamble += [line for line in writer.preamble if line not in preamble or not line]
        texts.append(writer.kernel_text)
    head = f"// tensorforge: CUDA kernels of PrimFunc '{func.name}' ({target}), launched in order"
    text = "\n".join([head, *preamble, "", *texts])
    sequence_params = _KernelWriter(func, target)._params(seq(*(k.body for k in launches)))[1]
    return KernelSource(
        target="cuda",
        entry=func.name,
        text=text,
        params=sequence_params,
        target_string=str(target),
        kernels=tuple(dataclasses.replace(k, text=text) for k in kernels),
        intermediates=tuple(
            Param(a.buffer.name, "buffer", a.buffer.dtype, (_shape_entry(a.extent),))
            for a in allocations
        ),
    )


class _KernelWriter(PipelineWriter):
    def __init__(self, func: PrimFunc, target: Target, entry: str = "") -> None:
        self.func = func
        self.target = target
        self.entry = entry
        self.preamble: list[str] = []
        self.kernel_text = ""
        self.names = Names()
        self.printer = ExprPrinter(self.names)
        self.body_lines: list[str] = []
        self.depth = 1
        self.shared_offsets: dict[Any, int] = {}
        self.shared_aliased: set[Any] = set()  # arrays whose bytes another array shares
        self.dynamic_shared = False
        self.shared_bytes = 0
        self.threads: ThreadExtents
        self.async_buffers: set[str] = set()  # double-buffered shared tiles (cp.async fills)
        self.async_copies = False  # a cp.async was issued: barriers wait for copies first
        self.async_depth = 0  # inside fills of multi-buffered tiles (or loops pragma "async_copy")
        self.async_wait: int | None = None  # the next barrier waits for all but this many groups
        self.async_copy_count = 0  # cp.async statements written so far
        self.mbarriers: dict[str, tuple[str, int]] = {}  # pipeline -> (C array, stages)
        self.tma_pipelines: set[str] = set()  # pipelines filled by bulk tensor copies alone
        self.cluster = 1  # blocks a cluster (pragma cluster_dims)

    # -- output helpers -------------------------------------------
    def line(self, text: str) -> None:
        self.body_lines.append("  " * self.depth + text)

    def lines_(self, texts: list[str]) -> None:
        for text in texts:
            self.line(text)

    def open(self, text: str) -> None:
        self.line(text)
        self.depth += 1

    def close(self, text: str = "}") -> None:
        self.depth -= 1
        self.line(text)

    @contextmanager
    def block(self, head: str) -> Iterator[None]:
        self.open(head)
        yield
        self.close("}")

    def shared_decl(self, key: Any, t: str, name: str, count: int) -> str:
        if self.dynamic_shared:
            offset = self.shared_offsets[key]
            # (an array sharing bytes with another is no __restrict__: that would promise the
            # compiler that no other pointer reaches them; nvcc's code is the same either way)
            restrict = "" if key in self.shared_aliased else " __restrict__"
            return f"{t}*{restrict} {name} = reinterpret_cast<{t}*>(tf_smem + {offset});"
        return f"__shared__ __align__(16) {t} {name}[{count}];"

    # -- the kernel -----------------------------------------------------------------------------
    def write(self) -> KernelSource:
        func = self.func
        scalars = {id(p): p for p in func.params if isinstance(p, E.Var)}
        self.threads = compute_launch(func.body, scalars)
        self.cluster = cluster_size(func.body)
        if self.cluster > 1:
            grid_x = self.threads.launch.grid[0]
            if not isinstance(grid_x, int) or grid_x % self.cluster:
                raise BuildError(
                    f"CUDA codegen: pragma cluster_dims {self.cluster} needs a grid whose x "
                    f"extent is a constant multiple of it, got {grid_x}"
                )
        body = func.body
        symbol = self.names.fresh(self.entry or f"{func.name}_kernel")
        decls, params, c_to_param = self._params(body)
        c_to_name = {p: c for c, p in c_to_param.items()}
        maps = tensor_maps(self.func, body)
        for m in maps:  # first: the runtime puts each in device memory, passes its address
            self.printer.tensor_maps[m.param] = f"{c_to_name[m.param]}_tmap"
        decls = [f"const tf_tensor_map* __restrict__ {self.printer.tensor_maps[m.param]}" for m in maps] + decls  # fmt: skip
        self._plan_shared(body)
        self._stmt(body)

        launch = self.threads.launch
        launch = Launch(launch.grid, launch.block, self.shared_bytes if self.dynamic_shared else 0)
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        bounds = f"{threads}, {min_blocks}" if (min_blocks := _min_blocks(body)) else f"{threads}"
        if self.cluster > 1:  # blocks run in clusters of this many (consecutive along x)
            bounds = f"{bounds}) __cluster_dims__({self.cluster}, 1, 1"
        launch_note = (
            f"// launch: grid=({', '.join(map(str, launch.grid))}) "
            f"block=({', '.join(map(str, launch.block))}); shared memory: {self.shared_bytes} bytes"
            + (" (dynamic)" if self.dynamic_shared else "")
        )
        note = []
        if not self.threads.extents:
            note.append("// NOTE: no loop is bound to a thread axis: one thread runs everything")
        self.preamble = []
        for param in func.params:  # a half parameter needs its header, read or not (a kernel
            # of an empty output stores nothing: the header was left out, nvcc failed)
            if isinstance(param, Buffer) and dt.is_half(param.dtype):
                self.printer.helpers.add(HALF_TYPES[dt.element_of(param.dtype)][4])
        if "half" in self.printer.helpers:
            self.preamble.append("#include <cuda_fp16.h>")
        if "bf16" in self.printer.helpers:
            self.preamble.append("#include <cuda_bf16.h>")
        if "floordiv" in self.printer.helpers:
            self.preamble += ["", FLOOR_HELPERS.rstrip()]
        if "minmax_nan" in self.printer.helpers:
            self.preamble += ["", MINMAX_NAN_HELPERS.rstrip()]
        for source in self.printer.device_sources:  # tensor intrinsics' device functions
            self.preamble += ["", source.rstrip()]
        params_text = ",\n    ".join(decls)
        self.kernel_text = "\n".join(
            [
                f'extern "C" __global__ void __launch_bounds__({bounds}) {symbol}(\n    {params_text}) {{',
                *(
                    [f"  extern __shared__ __align__({self.shared_align}) unsigned char tf_smem[];"]
                    if self.dynamic_shared
                    else []
                ),
                *self.body_lines,
                "}",
                "",
            ]
        )
        head = [f"// tensorforge: CUDA kernel for PrimFunc '{func.name}' ({self.target})"]
        text = "\n".join([*head, launch_note, *note, *self.preamble, "", self.kernel_text])
        self.kernel_text = "\n".join([f"// {symbol}: {launch_note[3:]}", *note, self.kernel_text])
        vector_alignment = {
            c_to_param[name]: align
            for name, align in self.printer.vector_params.items()
            if name in c_to_param
        }
        return KernelSource(
            target="cuda",
            entry=self.entry or func.name,
            text=text,
            params=params,
            launch=launch,
            target_string=str(self.target),
            vector_alignment=tuple(sorted(vector_alignment.items())),
            symbol=symbol,
            tensor_maps=maps,
        )

    def _params(self, body: Stmt) -> tuple[list[str], tuple[Param, ...], dict[str, str]]:
        # a buffer whose address is passed to a call may be written by it
        writes = [n for n in walk(body) if isinstance(n, BufferStore)]
        writes += [n.load for n in walk(body) if isinstance(n, AddressOf)]
        stored = {id(n.buffer) for n in writes}
        stored_names = {n.buffer.name for n in writes}
        shape_vars = {
            id(s)
            for p in self.func.params
            if isinstance(p, Buffer)
            for s in p.shape
            if isinstance(s, E.Var)
        }
        decls, params, c_to_param = [], [], {}
        for p in self.func.params:
            if isinstance(p, Buffer):
                name = self.names.bind_buffer(p)
                const = "" if id(p) in stored or p.name in stored_names else "const "
                decls.append(f"{const}{ctype(p.dtype)}* __restrict__ {name}")
                shape = tuple(_shape_entry(s) for s in p.shape)
                written = id(p) in stored or p.name in stored_names
                params.append(Param(p.name, "buffer", p.dtype, shape, written=written))
            elif isinstance(p, E.Var):
                name = self.names.bind(p)
                assert isinstance(name, str)
                decls.append(f"{ctype(p.dtype)} {name}")
                params.append(
                    Param(p.name, "scalar", p.dtype, (), bound_from_shape=id(p) in shape_vars)
                )
            else:
                raise BuildError(
                    f"CUDA codegen: parameter {p!r} of '{self.func.name}' is neither a Buffer nor a Var"
                )
            c_to_param[name] = p.name
        return decls, tuple(params), c_to_param

    def _plan_shared(self, body: Stmt) -> None:
        """Sizes and offsets of every shared array: static arrays up to STATIC_SHARED_LIMIT
        together, else one dynamic block in which arrays of lifetimes apart share bytes
        (cuda_shared.py). Sharing only past the limit keeps small kernels' code as it was:
        they hold few enough bytes that sharing would not change how many blocks an SM holds
        (registers bound those)."""
        arrays = [
            (id(node), _constant_extent(node) * _elem_bytes(node.buffer.dtype))
            for node in shared_arrays(body)
        ]
        # swizzled tiles (wgmma's) need their 1024-byte pattern to start on a 1024-byte boundary
        self.shared_align = 1024 if any(
            isinstance(n, ExternCall) and n.name.startswith(SWIZZLED_CALLS) for n in walk(body)
        ) else 16  # fmt: skip
        aligned = [-(-size // self.shared_align) * self.shared_align for _, size in arrays]
        self.shared_bytes = sum(aligned)
        self.dynamic_shared = self.shared_bytes > STATIC_SHARED_LIMIT
        if self.dynamic_shared:  # (kernels within the static limit keep their static arrays)
            self.shared_offsets = plan_offsets(body, arrays, self.shared_align)
            spans = [
                (key, self.shared_offsets[key], self.shared_offsets[key] + size)
                for (key, _), size in zip(arrays, aligned)
            ]
            self.shared_bytes = max((end for *_, end in spans), default=0)
            self.shared_aliased = {
                k for k, lo, hi in spans for k2, lo2, hi2 in spans if k != k2 and lo < hi2 and lo2 < hi
            }  # fmt: skip
        limit = self.target.max_shared_memory_opt_in
        if self.shared_bytes > limit:
            raise BuildError(
                f"'{self.func.name}' needs {self.shared_bytes} bytes of shared memory per block, "
                f"more than the {limit} a block may have on {self.target.arch}; use smaller "
                f"shared tiles"
            )

    # -- statements -----------------------------------------------------------------------------
    def _stmt(self, s: Stmt) -> None:
        p = self.printer
        if self._pipeline_stmt(s):
            return
        match s:
            case Seq(stmts=stmts):
                for x in stmts:
                    self._stmt(x)
            case For():
                self._for(s)
            case While(condition=c, body=body):
                with self.block(f"while ({p(c)}) {{"):
                    self._stmt(body)
            case BufferStore():
                self._store(s)
            case Allocate():
                self._allocate(s)
            case IfThenElse(condition=c, then_case=t, else_case=e):
                self.open(f"if ({p(c)}) {{")
                self._stmt(t)
                if e is not None:
                    self.close("} else {")
                    self.depth += 1
                    self._stmt(e)
                self.close("}")
            case LetStmt(var=var, value=value, body=body):
                self._let(var, value)
                self._stmt(body)
                self.names.unbind(var)
            case Evaluate(value=v):
                if not isinstance(v, E.Const):
                    self.line(f"(void)({p(v)});")
                if isinstance(v, ExternCall) and v.name.startswith(ASYNC_FILL_CALLS):
                    self.async_copies = True  # the call issues cp.async copies: a fill's
                    self.async_copy_count += 1  # barrier arrives when they land
            case Prefetch():  # a CPU cache hint; GPU caches are fed by other means
                pass
            case Attr(key="thread_allreduce", value=note, body=body):
                self.line(f"// ThreadAllReduce {note}")
                with self.block("{"):
                    self._stmt(body)
            case Attr(key="double_buffer_managed", value=names, body=body):
                self.async_buffers |= set(names)  # their fills may be asynchronous copies
                self._stmt(body)
            case Attr(key=key, value=value, body=body):
                if key != "double_buffer":
                    self.line(f"// attr {key} = {value}")
                self._stmt(body)
            case ThreadAllReduce():
                raise BuildError(
                    f"CUDA codegen: a ThreadAllReduce over {s.thread_tag} reached codegen; run the "
                    f"pass lower_thread_allreduce first (tf.lower does)"
                )
            case Realize():
                raise BuildError(
                    "CUDA codegen: Realize reached codegen; run storage flattening first"
                )
            case _:
                raise BuildError(
                    f"CUDA codegen: cannot generate code for statement {type(s).__name__}"
                )

    def _for(self, s: For) -> None:
        if any(name == "async_copy" for name, _ in s.pragmas):
            self.async_depth += 1
            try:
                self._for_loop(s)
            finally:
                self.async_depth -= 1
            return
        self._for_loop(s)

    def _for_loop(self, s: For) -> None:
        p = self.printer
        t = ctype(s.var.dtype)
        if p.nonnegative(s.min):  # (from min up: thread and block indices, serial loops)
            p.nonnegative_vars.add(id(s.var))
        if s.kind is LoopKind.THREAD_BINDING:
            name = self.names.bind(s.var)
            index = f"({t}){s.thread_tag}"
            if not (isinstance(s.min, E.Const) and int(s.min.value) == 0):
                index = f"{index} + {p(s.min)}"
            self.line(f"const {t} {name} = {index};")
            self._stmt(s.body)
            self.names.unbind(s.var)
            return
        pragmas = dict(s.pragmas)
        constant = isinstance(s.extent, E.Const)
        if "unroll_explicit" in pragmas and pragmas["unroll_explicit"] in (0, False):
            self.line("#pragma unroll 1")
        elif s.kind is LoopKind.UNROLLED or (s.kind is LoopKind.VECTORIZED and constant):
            self.line("#pragma unroll")
        elif s.kind is LoopKind.PARALLEL:
            self.line("// parallel loop: each GPU thread runs it serially")
        name = self.names.bind(s.var)
        extent = p(s.extent)
        if isinstance(s.min, E.Const) and int(s.min.value) == 0:
            head = f"for ({t} {name} = 0; {name} < {extent}; ++{name}) {{"
        else:
            low = p(s.min)
            head = f"for ({t} {name} = {low}; {name} < {low} + {extent}; ++{name}) {{"
        self.open(head)
        self._stmt(s.body)
        self.close("}")
        self.names.unbind(s.var)

    def _let(self, var: E.Var, value: E.Expr) -> None:
        p = self.printer
        lanes = dt.lanes_of(var.dtype)
        self._hoist_vector_loads(value)
        name = self.names.bind(var)
        t = ctype(var.dtype)
        if lanes == 1:
            self.line(f"const {t} {name} = {p(value)};")
            if dt.is_int(var.dtype):
                p.divisors[id(var)] = p.divisor(value)
                if p.nonnegative(value):
                    p.nonnegative_vars.add(id(var))
        else:
            for i, lane_name in enumerate(name):
                self.line(f"const {t} {lane_name} = {p(value, i)};")
        p.hoisted.clear()

    def _hoist_vector_loads(self, value: E.Expr) -> None:
        p = self.printer
        for key, access in p.plan_vector_loads(value).items():
            lines, temps = p.load_vector(access)
            nbytes = _elem_bytes(access.buffer.dtype) * access.chunk
            self.line(
                f"// {nbytes}-byte load of {access.buffer.name}: the index is a multiple of "
                f"{access.chunk} elements, so the address is {nbytes}-byte aligned"
            )
            self.lines_(lines)
            p.hoisted[key] = temps

    def _store(self, s: BufferStore) -> None:
        p = self.printer
        if len(s.indices) != 1:
            raise BuildError(
                f"CUDA codegen: store to '{s.buffer.name}' has {len(s.indices)} indices; "
                f"the lowered IR must have flat (1-d) buffer accesses"
            )
        if self.async_depth and s.buffer.name in self.async_buffers:
            copies = async_copy_lines(p, s, self.target.arch)
            if copies is not None:
                self.lines_(copies)
                self.async_copies = True
                self.async_copy_count += 1
                return
        if s.buffer.scope == "warp":
            raise BuildError(
                f"CUDA codegen: warp-scope fragment '{s.buffer.name}' is written element by "
                f"element; only tensor intrinsics (tensorize) can write a fragment"
            )
        buf = self.names.buffer(s.buffer)
        (index,) = s.indices
        lanes = max(dt.lanes_of(index.dtype), dt.lanes_of(s.value.dtype))
        self._hoist_vector_loads(s.value)
        if lanes == 1:
            text = f"{buf}[{p(index)}] = {p(s.value)};"
            self.line(text if s.predicate is None else f"if ({p(s.predicate)}) {text}")
            p.hoisted.clear()
            return
        values = [p(s.value, i) for i in range(lanes)]
        access = (
            p.vector_access(s.buffer, index, s.predicate) if dt.lanes_of(index.dtype) > 1 else None
        )
        if access is not None:
            nbytes = _elem_bytes(s.buffer.dtype) * access.chunk
            self.line(
                f"// {nbytes}-byte store to {s.buffer.name}: the index is a multiple of "
                f"{access.chunk} elements, so the address is {nbytes}-byte aligned"
            )
            self.lines_(p.store_vector(access, values))
        else:
            reads_itself = any(
                isinstance(n, BufferLoad) and n.buffer.name == s.buffer.name for n in walk(s.value)
            )
            if reads_itself:  # every lane reads before any lane writes, as one vector store would
                temps = [self.names.fresh(f"{buf}_lane") for _ in range(lanes)]
                t = ctype(s.buffer.dtype)
                self.lines_([f"const {t} {x} = {v};" for x, v in zip(temps, values)])
                values = temps
            for i, value in enumerate(values):
                text = f"{buf}[{p(index, i)}] = {value};"
                self.line(text if s.predicate is None else f"if ({p(s.predicate, i)}) {text}")
        p.hoisted.clear()

    def _allocate(self, s: Allocate) -> None:
        b = s.buffer
        if b.scope == "global":
            raise BuildError(
                f"Allocate of '{b.name}' in scope 'global' inside a CUDA kernel: a kernel cannot "
                f"allocate global memory; use scope 'local' (registers) or 'shared' (s[T].set_scope)"
            )
        if b.scope not in ("shared", "local", "warp"):
            raise BuildError(
                f"Allocate of '{b.name}': unknown scope {b.scope!r} for CUDA (use 'local' or 'shared')"
            )
        count = _constant_extent(s)
        name = self.names.bind_buffer(b)
        t = ctype(b.dtype)
        if b.scope == "shared":
            self.line(self.shared_decl(id(s), t, name, count))
        elif b.scope == "warp":
            size = warp_fragment_size(b.name, count)
            self.line(f"{t} {name}[{size}];  // this lane's part of a {count}-element fragment")
        else:
            self.line(f"{t} {name}[{count}];")
        self._stmt(s.body)


def _constant_extent(s: Allocate) -> int:
    if not isinstance(s.extent, E.Const):
        raise BuildError(
            f"Allocate of '{s.buffer.name}' in scope '{s.buffer.scope}' has extent {s.extent}; "
            f"CUDA {s.buffer.scope} arrays need a constant size (split by a constant factor)"
        )
    return max(1, int(s.extent.value))


def _elem_bytes(dtype: str) -> int:
    return max(1, dt.bits_of(dtype) // 8)


def _shape_entry(e: E.Expr) -> int | str:
    if isinstance(e, E.Const):
        return int(e.value)
    if isinstance(e, E.Var):
        return e.name
    try:
        return host_expr(e)
    except BuildError:
        return str(e)


def _min_blocks(body: Stmt) -> int:
    """The largest `launch_min_blocks` pragma in the kernel (0: none). With it ptxas budgets
    registers for that many resident blocks of the kernel a multiprocessor (1: up to 255 a
    thread, so a tensor-core mainloop can keep its fragments of the next k step in flight)."""
    found = [
        int(value)
        for n in walk(body)
        if isinstance(n, For)
        for name, value in n.pragmas
        if name == "launch_min_blocks"
    ]
    if any(v < 1 for v in found):
        raise BuildError(f"pragma launch_min_blocks must be at least 1, got {min(found)}")
    return max(found, default=0)
