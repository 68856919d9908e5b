"""The CPU backend: a lowered PrimFunc -> LLVM IR text built with llvmlite.ir.

The entry function takes one argument per PrimFunc param, in order: buffers as
`ptr noalias align <element size>` (more with PARAM_ALIGN_ATTR), scalars by value. Statements are
emitted here, expressions in llvm_expr.py (loads in llvm_memory.py, calls in llvm_calls.py,
types in llvm_types.py), math helpers in llvm_math.py. A PARALLEL loop is outlined into an internal function run by libgomp's
`GOMP_parallel`, with the thread count read from the module global `__tf_num_threads` (set by
the runtime; 0 lets libgomp choose).
"""

from __future__ import annotations

import functools

import llvmlite.binding as llvm
from llvmlite import ir

from tensorforge.codegen.base import (
    ALLOC_ERROR_SYMBOL,
    NUM_THREADS_SYMBOL,
    KernelSource,
    generate_checked,
    kernel_params,
)
from tensorforge.codegen.llvm_expr import ExprEmitter
from tensorforge.codegen.llvm_math_builder import mangle
from tensorforge.codegen.llvm_memory import known_mask_pieces, masked_chunks, power_of_two_pieces
from tensorforge.codegen.llvm_types import I1, I32, I64, PTR, element_bytes, memory_type, value_type
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.passes.fold_lane_masks import constant_lanes
from tensorforge.ir.passes.unroll_loops import partial_unroll
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Prefetch,
    PrimFunc,
    Seq,
    Stmt,
    Sync,
    While,
)
from tensorforge.ir.visit import walk
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Expr, Var

# PrimFunc attr: the byte alignment every buffer param is guaranteed to have (default: its element
# size). Set it to 64 only where the caller guarantees it (e.g. NDArray-only entry points).
PARAM_ALIGN_ATTR = "llvm.param_align"
_STACK_LIMIT = 64 * 1024  # constant-size buffers up to this many bytes live on the stack
_VECTORIZE_HINT = ("llvm.loop.vectorize.enable", ir.Constant(I1, 1))


def _loop_hint(loop: For) -> tuple[str, ir.Constant] | None:
    """The loop metadata of `loop`: an `unroll` loop that reaches codegen is one unroll_loops
    left alone (a symbolic extent, or too much code): a bounded unroll count, not "unroll.enable",
    under which LLVM fully unrolled nests of such loops for minutes."""
    if loop.kind is LoopKind.VECTORIZED:
        return _VECTORIZE_HINT
    count = partial_unroll(loop) if loop.kind is LoopKind.UNROLLED else 1
    return ("llvm.loop.unroll.count", ir.Constant(I32, count)) if count > 1 else None


@functools.lru_cache(maxsize=8)
def _triple_and_layout(mcpu: str, features: str) -> tuple[str, str]:
    """The host triple and the data layout of a TargetMachine for (mcpu, features)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    machine = llvm.Target.from_triple(triple).create_target_machine(mcpu, features, opt=3)
    return triple, str(machine.target_data)


class LLVMCodegen:
    """Lowered PrimFunc -> KernelSource(target="llvm", text=LLVM IR)."""

    def generate(self, func: PrimFunc, target) -> KernelSource:
        return generate_checked("llvm", func, target, lambda: self._generate(func, target))

    def _generate(self, func: PrimFunc, target) -> KernelSource:
        module = ir.Module(name=func.name)
        module.triple, module.data_layout = _triple_and_layout(target.mcpu, target.features)
        params = kernel_params(func)
        arg_types = [PTR if isinstance(p, Buffer) else value_type(p.dtype) for p in func.params]
        entry = ir.Function(module, ir.FunctionType(ir.VoidType(), arg_types), name=func.name)
        state = _ModuleState(module, func.name, func.attr(PARAM_ALIGN_ATTR), target.cpu_features)
        emitter = _FunctionEmitter(state, entry, in_parallel=False)
        for param, arg in zip(func.params, entry.args):
            arg.name = param.name
            if isinstance(param, Buffer):
                state.param_buffers.add(param)
                arg.attributes.add("noalias")
                arg.attributes.align = state.align_of(param)
                emitter.buffers[param] = arg
            else:
                emitter.vars[param] = arg
        emitter.stmt(func.body)  # bfloat16 computes in float32 (the pipeline's legalize_bfloat16)
        emitter.builder.ret_void()
        return KernelSource(
            target="llvm",
            entry=func.name,
            text=str(module),
            params=params,
            target_string=str(target),
            num_threads_symbol=NUM_THREADS_SYMBOL if state.parallel_loops else None,
        )


class _ModuleState:
    """What the functions of one module share: the module, the kernel's name, a counter."""

    def __init__(
        self,
        module: ir.Module,
        func_name: str,
        param_align: int | None,
        cpu_features: frozenset[str],
    ):
        self.module, self.func_name = module, func_name
        self.parallel_loops = 0
        self.param_align = param_align
        self.param_buffers: set[Buffer] = set()
        self.cpu_features = cpu_features  # for the math helpers' x86 reciprocal estimates

    def align_of(self, buffer: Buffer) -> int:
        """The alignment a pointer to `buffer` is known to have.

        Our own allocations are 64-byte aligned. Caller-owned buffers are only promised element
        alignment (numpy arrays are used in place, API.md), unless the PrimFunc attr
        PARAM_ALIGN_ATTR says more: claiming 64 for a less aligned array would let LLVM emit
        aligned vector moves that fault.
        """
        if buffer not in self.param_buffers:
            return 64
        return self.param_align or element_bytes(buffer.dtype)

    def num_threads(self) -> ir.GlobalVariable:
        existing = self.module.globals.get(NUM_THREADS_SYMBOL)
        if existing is not None:
            return existing
        gv = ir.GlobalVariable(self.module, I32, NUM_THREADS_SYMBOL)
        gv.initializer = ir.Constant(I32, 0)
        return gv

    def alloc_error_slot(self) -> ir.GlobalVariable:
        """The ALLOC_ERROR_SYMBOL global (codegen/base.py), defined on first use."""
        existing = self.module.globals.get(ALLOC_ERROR_SYMBOL)
        if existing is not None:
            return existing
        ty = ir.LiteralStructType([PTR, I64, I64])
        gv = ir.GlobalVariable(self.module, ty, ALLOC_ERROR_SYMBOL)
        gv.initializer = ir.Constant(ty, None)
        return gv

    def string_constant(self, text: str) -> ir.GlobalVariable:
        """A private NUL-terminated constant holding `text` (UTF-8)."""
        data = bytearray(text.encode() + b"\0")
        ty = ir.ArrayType(ir.IntType(8), len(data))
        gv = ir.GlobalVariable(self.module, ty, self.module.get_unique_name(".str"))
        gv.global_constant = True
        gv.linkage = "private"
        gv.initializer = ir.Constant(ty, data)
        return gv

    def function(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is None:
            existing = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return existing


class _FunctionEmitter(ExprEmitter):
    """Emits statements into one LLVM function (the entry or an outlined parallel body)."""

    def __init__(self, state: _ModuleState, fn: ir.Function, in_parallel: bool):
        self.state, self.module, self.func_name = state, state.module, state.func_name
        self.cpu_features = state.cpu_features
        self.fn, self.in_parallel = fn, in_parallel
        fn.attributes.add("nounwind")
        # NOTE: the entry block holds only allocas and a branch to "start", where code begins, so
        # allocas can be added at any time without disturbing the main builder's position.
        self.entry = fn.append_basic_block("entry")
        start = fn.append_basic_block("start")
        ir.IRBuilder(self.entry).branch(start)
        self.builder = ir.IRBuilder(start)
        self.vars: dict[Var, ir.Value] = {}
        self.buffers: dict[Buffer, ir.Value] = {}

    def alloca(self, ty: ir.Type, name: str = "") -> ir.Value:
        """A stack slot in the entry block, so that mem2reg/SROA can promote it."""
        slot = ir.IRBuilder(self.entry)
        slot.position_before(self.entry.terminator)
        ptr = slot.alloca(ty, name=name)
        ptr.align = 64
        ptr.type = PTR  # an opaque pointer like every other buffer pointer
        return ptr

    # -- statements -------------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        match s:
            case Seq(stmts=stmts):
                for child in stmts:
                    self.stmt(child)
            case BufferStore():
                self._store(s)
            case For():
                self._for(s)
            case While():
                self._while(s)
            case IfThenElse(condition=cond, then_case=then, else_case=other):
                c = self.expr(cond)
                if isinstance(c.type, ir.VectorType):
                    raise self.fail(f"IfThenElse condition {cond} is a vector")
                if other is None:
                    with self.builder.if_then(c):
                        self.stmt(then)
                else:
                    with self.builder.if_else(c) as (then_block, else_block):
                        with then_block:
                            self.stmt(then)
                        with else_block:
                            self.stmt(other)
            case LetStmt(var=var, value=value, body=body):
                with self.bound(var, self.expr(value)):
                    self.stmt(body)
            case Allocate():
                self._allocate(s)
            case Attr(body=body):  # annotations carry nothing the CPU code needs
                self.stmt(body)
            case Evaluate(value=value):
                if not isinstance(value, Const):
                    self.expr(value)
            case Sync():
                raise self.fail("Sync (a GPU barrier) is not valid on a CPU target")
            case Prefetch():
                self._prefetch(s)
            case _:
                raise self.fail(f"cannot generate code for {type(s).__name__}; is the IR lowered?")

    def _prefetch(self, s: Prefetch) -> None:
        (index,) = s.indices
        # not `inbounds`: the address may lie past the buffer, which a prefetch allows
        ptr = self.builder.gep(
            self.buffer_ptr(s.buffer),
            [self.index64(index)],
            source_etype=memory_type(s.buffer.dtype),
        )
        fn = self.state.function("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
        # NOTE: reads are fetched into L2 (prefetcht1), writes into L1 (prefetchw). A row fetched
        # ahead into L1 evicted the lines being worked on: softmax's next row, its exp buffer
        # and its output row are 3 x 16 KiB in a 48 KiB L1 (1 thread: 0.75 -> 0.84 of copy)
        rw, locality = (1, 3) if s.write else (0, 2)
        hint = [ir.Constant(I32, rw), ir.Constant(I32, locality), ir.Constant(I32, 1)]  # 1: data
        self.builder.call(fn, [ptr, *hint])

    def _store(self, s: BufferStore) -> None:
        if len(s.indices) != 1:
            raise self.fail(
                f"store to '{s.buffer.name}' has {len(s.indices)} indices, expected one flat index"
            )
        b, buffer = self.builder, s.buffer
        value = self.expr(s.value)
        if dt.is_bool(buffer.dtype):
            value = b.zext(
                value,
                ir.VectorType(memory_type("bool"), value.type.count)
                if isinstance(value.type, ir.VectorType)
                else memory_type("bool"),
            )
        kind, ptr, lanes = self.access(buffer, s.indices[0])
        if kind == "broadcast":  # every lane to one address: the scatter's lane order decides
            kind, ptr = "gather", self.splat(ptr, lanes)
        if lanes > 1 and not isinstance(value.type, ir.VectorType):
            value = self.splat(value, lanes)
        align = element_bytes(buffer.dtype)
        mask = None if s.predicate is None else self.expr(s.predicate)
        if kind == "scalar" and mask is not None:
            with b.if_then(mask):
                b.store(value, ptr, align=align)
        elif kind == "scalar":
            b.store(value, ptr, align=align)
        elif kind == "contiguous" and mask is None:  # see llvm_memory.power_of_two_pieces
            for start, count in power_of_two_pieces(lanes):
                at = b.gep(ptr, [ir.Constant(I64, start)], source_etype=value.type.element)
                b.store(self.lanes_of(value, start, count), at if start else ptr, align=align)
        elif mask is None:  # scatter as scalar stores
            for lane in range(lanes):
                i = ir.Constant(I32, lane)
                b.store(b.extract_element(value, i), b.extract_element(ptr, i), align=align)
        elif kind == "contiguous" and constant_lanes(s.predicate) is not None:
            for start, count, on in known_mask_pieces(constant_lanes(s.predicate)):
                if on:  # see llvm_memory.known_mask_pieces
                    at = b.gep(ptr, [ir.Constant(I64, start)], source_etype=value.type.element)
                    b.store(self.lanes_of(value, start, count), at if start else ptr, align=align)
        elif kind == "contiguous":  # register-sized pieces: see llvm_memory.masked_chunks
            elem = value.type.element
            for start, count in masked_chunks(lanes, align, self.register_bytes):
                part = self.lanes_of(value, start, count)
                part_mask = self.lanes_of(mask, start, count)
                part_ptr = (
                    b.gep(ptr, [ir.Constant(I64, start)], source_etype=elem) if start else ptr
                )
                fn = self.state.function(
                    f"llvm.masked.store.{mangle(part.type)}.{mangle(ptr.type)}",
                    ir.VoidType(),
                    [part.type, ptr.type, I32, part_mask.type],
                )
                with b.if_then(self.any_lane(part_mask)):
                    b.call(fn, [part, part_ptr, ir.Constant(I32, align), part_mask])
        else:
            fn = self.state.function(
                f"llvm.masked.scatter.{mangle(value.type)}.{mangle(ptr.type)}",
                ir.VoidType(),
                [value.type, ptr.type, I32, mask.type],
            )
            b.call(fn, [value, ptr, ir.Constant(I32, align), mask])

    def _allocate(self, s: Allocate) -> None:
        buffer, b = s.buffer, self.builder
        elem, nbytes = memory_type(buffer.dtype), element_bytes(buffer.dtype)
        extent = s.extent
        # NOTE: on the CPU every scope is plain memory; what matters is size. Small constant-size
        # buffers (register tiles, per-row partials computed at a loop) go on the stack where
        # SROA / mem2reg can keep them in registers; large or symbolic ones on the heap.
        if isinstance(extent, Const) and int(extent.value) * nbytes <= _STACK_LIMIT:
            ptr = self.alloca(ir.ArrayType(elem, max(1, int(extent.value))), name=buffer.name)
            with self.bound_buffer(buffer, ptr):
                self.stmt(s.body)
            return
        # heap: aligned_alloc(64, size rounded up to 64), freed after the body. Where it returns
        # NULL (or the size overflows int64: an "allocation" that would wrap to a few bytes) the
        # body is skipped and the failure recorded in ALLOC_ERROR_SYMBOL for the runtime to raise
        # (no early exit: enclosing allocations are freed after their bodies as always).
        count = self.index64(extent)
        fits = b.icmp_signed("<=", count, ir.Constant(I64, (2**63 - 128) // nbytes))
        size = b.mul(count, ir.Constant(I64, nbytes))
        size = b.and_(b.add(size, ir.Constant(I64, 63)), ir.Constant(I64, -64))
        size = b.select(b.icmp_signed("<", size, ir.Constant(I64, 64)), ir.Constant(I64, 64), size)
        size = b.select(fits, size, ir.Constant(I64, -64))  # 2**64 - 64 bytes: the allocator fails
        if isinstance(extent, Const):
            ptr = self._heap_alloc(size, buffer.name)
            self._run_allocated(buffer, ptr, count, nbytes, s.body, on_heap=None)
            return
        # a size known at run time (a row of a symbolic length, per parallel row): on the stack
        # where it is small, between a stacksave and a stackrestore so a loop around it does
        # not grow the stack; the heap only past _STACK_LIMIT. aligned_alloc + free per row of
        # a 12 x 197 x 197 softmax cost ~150 of its ~550 us
        saved = b.call(self.state.function("llvm.stacksave.p0", PTR, []), [])
        small = b.and_(fits, b.icmp_signed("<=", size, ir.Constant(I64, _STACK_LIMIT)))
        with b.if_else(small) as (stack, heap):
            with stack:
                on_stack = b.alloca(ir.IntType(8), size=size, name=buffer.name)
                on_stack.align = 64
                on_stack.type = PTR
                stack_block = b.block
            with heap:
                on_heap = self._heap_alloc(size, buffer.name)
                heap_block = b.block
        ptr = b.phi(PTR, name=buffer.name)
        ptr.add_incoming(on_stack, stack_block)
        ptr.add_incoming(on_heap, heap_block)
        self._run_allocated(buffer, ptr, count, nbytes, s.body, on_heap=b.not_(small))
        b.call(self.state.function("llvm.stackrestore.p0", ir.VoidType(), [PTR]), [saved])

    def _heap_alloc(self, size: ir.Value, name: str) -> ir.Value:
        return self.builder.call(
            self.state.function("aligned_alloc", PTR, [I64, I64]),
            [ir.Constant(I64, 64), size],
            name=name,
        )

    def _run_allocated(self, buffer, ptr, count, nbytes: int, body: Stmt, on_heap) -> None:
        """`body` with `buffer` at `ptr`, or the allocation failure recorded where `ptr` is
        NULL; `ptr` freed after it where `on_heap` (None: always)."""
        b = self.builder
        with b.if_else(b.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), likely=False) as (
            failed,
            allocated,
        ):
            with failed:
                slot = self.state.alloc_error_slot()
                fields = [self.state.string_constant(buffer.name), count, ir.Constant(I64, nbytes)]
                for i, value in enumerate(fields):
                    at = b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True)
                    b.store(value, at)
            with allocated:
                with self.bound_buffer(buffer, ptr):
                    self.stmt(body)
                free = self.state.function("free", ir.VoidType(), [PTR])
                if on_heap is None:
                    b.call(free, [ptr])
                else:
                    with b.if_then(on_heap):
                        b.call(free, [ptr])

    # -- loops ------------------------------------------------------------------------------------
    def _for(self, loop: For) -> None:
        if loop.kind == LoopKind.THREAD_BINDING:
            raise self.fail(
                f"loop '{loop.var.name}' is bound to {loop.thread_tag or 'a GPU thread'}, "
                f"which a CPU target cannot run"
            )
        begin = self._loop_bound(loop.min, loop.var)
        extent = self._loop_bound(loop.extent, loop.var)
        if loop.kind == LoopKind.PARALLEL and not self.in_parallel:  # nested parallel: serial
            self._parallel_for(loop, begin, extent)
            return
        end = self._arith("add", loop.var.dtype, begin, extent)
        self.serial_loop(loop.var, begin, end, loop.body, _loop_hint(loop))

    def _while(self, loop: While) -> None:
        """while (condition) body: the condition in its own block, read before each step."""
        b = self.builder
        head = b.append_basic_block("while.head")
        body = b.append_basic_block("while.body")
        exit_block = b.append_basic_block("while.end")
        b.branch(head)
        b.position_at_end(head)
        condition = self.expr(loop.condition)
        if isinstance(condition.type, ir.VectorType):
            raise self.fail(f"while condition {loop.condition} is a vector")
        b.cbranch(condition, body, exit_block)
        b.position_at_end(body)
        self.stmt(loop.body)
        b.branch(head)
        b.position_at_end(exit_block)

    def _loop_bound(self, e: Expr, var: Var) -> ir.Value:
        return self.cast(self.expr(e), e.dtype, var.dtype)

    def serial_loop(
        self,
        var: Var,
        begin: ir.Value,
        end: ir.Value,
        body: Stmt,
        hint: tuple[str, ir.Constant] | None,
    ) -> None:
        """for var in [begin, end): body, as a guarded do-while loop (the shape LLVM rotates to)."""
        b = self.builder
        before = b.block
        loop_block = b.append_basic_block(f"for.{var.name}")
        exit_block = b.append_basic_block(f"for.{var.name}.end")
        b.cbranch(self._compare("<", var.dtype, begin, end), loop_block, exit_block)
        b.position_at_end(loop_block)
        index = b.phi(begin.type, name=var.name)
        index.add_incoming(begin, before)
        with self.bound(var, index):
            self.stmt(body)
        step = self._arith("add", var.dtype, index, ir.Constant(begin.type, 1))
        index.add_incoming(step, b.block)
        if hint is _VECTORIZE_HINT and b.block is not loop_block:
            # a body with branches (a math function's slow path): forced, LLVM's vectorizer
            # gives up on it with a warning on stderr; unforced it still vectorizes what pays
            hint = None
        latch = b.cbranch(self._compare("<", var.dtype, step, end), loop_block, exit_block)
        if hint is not None:
            latch.set_metadata("llvm.loop", self._loop_id(hint))
        b.position_at_end(exit_block)

    def _loop_id(self, hint: tuple[str, ir.Constant]) -> ir.MDValue:
        """`!N = distinct !{!N, !{!"<hint>", <value>}}` (llvm.loop ids refer to themselves)."""
        name, value = hint
        option = self.module.add_metadata([ir.MetaDataString(self.module, name), value])
        loop_id = ir.MDValue(self.module, [option], name=str(len(self.module.metadata)))
        loop_id.operands = (loop_id, option)
        return loop_id

    # -- PARALLEL ---------------------------------------------------------------------------------
    def _parallel_for(self, loop: For, begin: ir.Value, extent: ir.Value) -> None:
        """Outline the loop into `trampoline(closure)` and run it on libgomp's team.

        The trampoline unpacks the closure (free vars, buffer pointers, min, extent), takes this
        thread's contiguous share of the iterations and calls `body(...)`, whose buffer arguments
        are `noalias` again, so the loop inside vectorizes as well as the serial one would.
        """
        state, b = self.state, self.builder
        k = state.parallel_loops
        state.parallel_loops += 1
        used = list(walk(loop.body))
        free_vars = [
            v for v in dict.fromkeys(n for n in used if isinstance(n, Var)) if v in self.vars
        ]
        free_buffers = [
            buf
            for buf in dict.fromkeys(
                n.buffer for n in used if isinstance(n, (BufferLoad, BufferStore, Prefetch))
            )
            if buf in self.buffers
        ]
        captured = [self.buffers[buf] for buf in free_buffers] + [self.vars[v] for v in free_vars]
        closure_type = ir.LiteralStructType([c.type for c in captured] + [begin.type, extent.type])
        closure = self.alloca(closure_type, name=f"closure.{loop.var.name}")
        for i, value in enumerate(captured + [begin, extent]):
            b.store(
                value,
                b.gep(
                    closure,
                    [ir.Constant(I32, 0), ir.Constant(I32, i)],
                    inbounds=True,
                    source_etype=closure_type,
                ),
            )
        # body(buffers..., vars..., begin, end)
        body_fn = ir.Function(
            self.module,
            ir.FunctionType(ir.VoidType(), [c.type for c in captured] + [begin.type] * 2),
            name=f"{state.func_name}.parallel{k}.body",
        )
        body_fn.linkage = "internal"
        inner = _FunctionEmitter(state, body_fn, in_parallel=True)
        for i, buf in enumerate(free_buffers):
            arg = body_fn.args[i]
            arg.name = buf.name
            arg.attributes.add("noalias")
            arg.attributes.align = state.align_of(buf)
            inner.buffers[buf] = arg
        for arg, v in zip(body_fn.args[len(free_buffers) :], free_vars):
            arg.name = v.name
            inner.vars[v] = arg
        chunk_begin, chunk_end = body_fn.args[-2], body_fn.args[-1]
        inner.serial_loop(loop.var, chunk_begin, chunk_end, loop.body, None)
        inner.builder.ret_void()
        # trampoline(closure): unpack, take this thread's share [begin + t*n/T, begin + (t+1)*n/T)
        tramp = ir.Function(
            self.module,
            ir.FunctionType(ir.VoidType(), [PTR]),
            name=f"{state.func_name}.parallel{k}",
        )
        tramp.linkage = "internal"
        tramp.attributes.add("nounwind")
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        fields = [
            tb.load(
                tb.gep(
                    tramp.args[0],
                    [ir.Constant(I32, 0), ir.Constant(I32, i)],
                    inbounds=True,
                    source_etype=closure_type,
                ),
                typ=ty,
            )
            for i, ty in enumerate(closure_type.elements)
        ]
        lo, n = fields[-2], fields[-1]
        thread = tb.sext(tb.call(state.function("omp_get_thread_num", I32, []), []), I64)
        threads = tb.sext(tb.call(state.function("omp_get_num_threads", I32, []), []), I64)
        n64 = tb.sext(n, I64) if n.type.width < 64 else n

        def share(t):
            offset = tb.sdiv(tb.mul(t, n64, flags=("nsw",)), threads)
            offset = tb.trunc(offset, lo.type) if lo.type.width < 64 else offset
            return tb.add(lo, offset, flags=("nsw",))

        tb.call(body_fn, fields[:-2] + [share(thread), share(tb.add(thread, ir.Constant(I64, 1)))])
        tb.ret_void()
        # GOMP_parallel(fn, data, num_threads, flags): the calling thread joins as thread 0
        gomp = state.function("GOMP_parallel", ir.VoidType(), [PTR, PTR, I32, I32])
        num_threads = b.load(state.num_threads(), typ=I32)
        b.call(gomp, [tramp, closure, num_threads, ir.Constant(I32, 0)])
