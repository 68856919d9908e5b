"""tir.ir_builder: imperative kernels written statement by statement, as TVM programs write them.

    ib = tf.tir.ir_builder.create()
    a, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    with ib.for_range(0, n, name="i", kind="parallel") as i:
        with ib.if_scope(a[i] > 0):
            out[i] = a[i]
        with ib.else_scope():
            out[i] = 0.0
    return ib.get()                      # a te.extern fcompute's result: the stage's body

Statements collect in a stack of scopes; a `with` block's scope becomes the body of its loop,
`if` or `while` when the block ends. `let`, `allocate` and `scope_attr` wrap everything that
follows them in their scope. Every access takes one flat, row-major index (`ptr[i]`) or one
index per dimension (`ptr[i, j]`), which the builder linearizes, as TVM's BufferVar does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tensorforge.errors import ExprError
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.extern import ExternBufferView
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Stmt,
    While,
    seq,
)
from tensorforge.ir.visit import walk
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Cast, Const, Expr, Var, as_expr, const
from tensorforge.te.extern_call import ExternBuffer, ExternCall
from tensorforge.te.tensor import IterKind, IterVar

LOOP_KINDS = {
    "serial": LoopKind.SERIAL,
    "parallel": LoopKind.PARALLEL,
    "vectorize": LoopKind.VECTORIZED,
    "vectorized": LoopKind.VECTORIZED,
    "unroll": LoopKind.UNROLLED,
    "unrolled": LoopKind.UNROLLED,
}
SCOPES = ("local", "shared", "global")

# the builder that allocated each buffer: a buffer allocated by one builder and used in another
# lies outside every allocation of the second
_ALLOCATED_BY: weakref.WeakKeyDictionary[Buffer, IRBuilder] = weakref.WeakKeyDictionary()

Wrapper = Callable[[Stmt], Stmt]  # a let / allocate / attribute: wraps what follows it


class BufferVar:
    """A buffer as an ir_builder program reads and writes it: `ptr[i]` is a load, `ptr[i] = v`
    emits a store into the builder that made the pointer."""

    def __init__(self, builder: IRBuilder, buffer: Buffer, shape: tuple[Expr, ...]) -> None:
        self._builder = builder
        self.buffer = buffer
        self.shape = shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    @property
    def name(self) -> str:
        return self.buffer.name

    def _flat_index(self, index: Any) -> Expr:
        parts = index if isinstance(index, tuple) else (index,)
        exprs = []
        for position, part in enumerate(parts):
            e = as_expr(part)
            if not dt.is_int(e.dtype):
                raise ExprError(
                    f"ir_builder: index {position} of '{self.name}' is {e} ({e.dtype}); "
                    f"indices are integers"
                )
            exprs.append(e)
        if len(exprs) == 1:
            return exprs[0]
        if len(exprs) != len(self.shape):
            raise ExprError(
                f"ir_builder: '{self.name}' has {len(self.shape)} dimensions, indexed with "
                f"{len(exprs)} indices (use one flat index or one per dimension)"
            )
        flat: Expr = exprs[0]
        for e, extent in zip(exprs[1:], self.shape[1:]):
            flat = flat * extent + e
        return flat

    def __getitem__(self, index: Any) -> Expr:
        return BufferLoad(self.buffer, (self._flat_index(index),))

    def __setitem__(self, index: Any, value: Any) -> None:
        self._builder._store(self, self._flat_index(index), value)

    def __repr__(self) -> str:
        return f"BufferVar({self.name})"


class IRBuilder:
    """Builds a statement from emitted statements and `with` scopes; `get()` returns it."""

    def __init__(self) -> None:
        self._scopes: list[list[Stmt | Wrapper]] = [[]]
        self._views: dict[int, BufferVar] = {}  # id(ExternBuffer) -> its pointer
        self._loop_names = 0

    # -- emitting -------------------------------------------------------------------------------
    def emit(self, stmt: Any) -> None:
        """Append a statement, a call (tf.tir.call_extern / call_packed ...), or a function
        that wraps the rest of the scope (`lambda body: LetStmt(v, value, body)`)."""
        if isinstance(stmt, ExternCall):
            stmt = Evaluate(stmt)
        elif isinstance(stmt, Expr):
            raise ExprError(
                f"ir_builder.emit: {stmt} is an expression; emit a statement or a call "
                f"(tf.tir.call_extern / call_packed), or store it: ptr[i] = value"
            )
        elif not isinstance(stmt, Stmt) and not callable(stmt):
            raise ExprError(f"ir_builder.emit: expected a statement or a call, got {stmt!r}")
        self._scopes[-1].append(stmt)

    def _store(self, ptr: BufferVar, index: Expr, value: Any) -> None:
        if ptr._builder is not self:
            raise ExprError(f"ir_builder: '{ptr.name}' belongs to another ir_builder")
        dtype = ptr.dtype
        if isinstance(value, Expr):
            if value.dtype != dtype:
                raise ExprError(
                    f"ir_builder: storing {value} ({value.dtype}) into '{ptr.name}', which holds "
                    f"{dtype}; convert it first: ({value}).astype('{dtype}')"
                )
        else:
            try:
                value = const(value, dtype)
            except Exception as error:
                raise ExprError(
                    f"ir_builder: cannot store {value!r} into '{ptr.name}' ({dtype}): {error}"
                ) from None
        self.emit(BufferStore(ptr.buffer, (index,), value))

    # -- scopes ---------------------------------------------------------------------------------
    @contextmanager
    def _scope(self, close: Callable[[Stmt], None]) -> Iterator[None]:
        self._scopes.append([])
        depth = len(self._scopes)
        yield
        assert len(self._scopes) == depth, "an ir_builder scope closed out of order"
        close(self._pop())

    def _pop(self) -> Stmt:
        return _fold(self._scopes.pop())

    def for_range(
        self, begin: Any, end: Any, name: str = "i", dtype: str | None = None, kind: str = "serial"
    ) -> Any:
        """`with ib.for_range(0, n, name="i", kind="parallel") as i:` (kind: serial, parallel,
        vectorize, unroll). Loops all named "i" are called i, j, k, then i_0, i_1, ..."""
        if kind not in LOOP_KINDS:
            raise ExprError(
                f"ir_builder.for_range '{name}': unknown kind {kind!r}; expected one of "
                f"serial, parallel, vectorize, unroll"
            )
        if name == "i":
            n = self._loop_names
            name = "ijk"[n] if n < 3 else f"i_{n - 3}"
            self._loop_names += 1
        low, high = as_expr(begin), as_expr(end)
        for what, e in (("begin", low), ("end", high)):
            if not dt.is_int(e.dtype):
                raise ExprError(f"ir_builder.for_range '{name}': {what} {e} is not an integer")
        if dtype is None:
            dtype = dt.promote(low.dtype, high.dtype)
        var = Var(name, dt.check_dtype(dtype, f"ir_builder.for_range '{name}'"))
        low = low if low.dtype == var.dtype else Cast(var.dtype, low)
        extent = high if isinstance(low, Const) and low.value == 0 else high - low
        extent = extent if extent.dtype == var.dtype else Cast(var.dtype, extent)

        def close(body: Stmt) -> None:
            self.emit(For(var, low, extent, body, LOOP_KINDS[kind]))

        return _entering(self._scope(close), var)

    def while_loop(self, condition: Any) -> Any:
        """`with ib.while_loop(cond):` repeats its body while `cond` (read before each step)."""
        cond = _condition(condition, "while_loop")
        return self._scope(lambda body: self.emit(While(cond, body)))

    def if_scope(self, condition: Any) -> Any:
        """`with ib.if_scope(cond):` runs its body where `cond` holds."""
        cond = _condition(condition, "if_scope")
        return self._scope(lambda body: self.emit(IfThenElse(cond, body)))

    def else_scope(self) -> Any:
        """`with ib.else_scope():` right after an if_scope: where its condition does not hold."""
        scope = self._scopes[-1]
        last = scope[-1] if scope else None
        if not isinstance(last, IfThenElse) or last.else_case is not None:
            raise ExprError("ir_builder.else_scope must follow an if_scope (with no else yet)")
        scope.pop()
        return self._scope(lambda body: self.emit(IfThenElse(last.condition, last.then_case, body)))

    def new_scope(self) -> Any:
        """`with ib.new_scope():` a block: the lets, allocations and attributes inside it end
        with it."""
        return self._scope(self.emit)

    # -- wrappers: the rest of the scope is their body -------------------------------------------
    def let(self, name: str, value: Any) -> Var:
        """A variable bound to `value` for the rest of the scope."""
        value = as_expr(value)
        var = Var(name, value.dtype)
        self.emit(lambda body: LetStmt(var, value, body))
        return var

    def allocate(
        self, dtype: str, shape: Any, name: str = "buf", scope: str = "local"
    ) -> BufferVar:
        """Storage of `shape` for the rest of the scope: "local" (registers / stack), "shared"
        (a GPU block's shared memory) or "global"."""
        dtype = dt.check_dtype(dtype, f"ir_builder.allocate '{name}'")
        scope = scope or "local"
        if scope not in SCOPES:
            raise ExprError(
                f"ir_builder.allocate '{name}': unknown scope {scope!r}; expected one of "
                f"{', '.join(SCOPES)}"
            )
        extents = tuple(
            as_expr(e) for e in (shape if isinstance(shape, (list, tuple)) else [shape])
        )
        size: Expr = const(1)
        for e in extents:
            size = size * e
        buffer = Buffer(name, (size,), dtype, scope)
        _ALLOCATED_BY[buffer] = self
        self.emit(lambda body: Allocate(buffer, size, body))
        return BufferVar(self, buffer, extents)

    def scope_attr(self, node: Any, key: str, value: Any) -> None:
        """An attribute on the rest of the scope. `scope_attr(te.thread_axis("threadIdx.x"),
        "thread_extent", n)` runs it on n GPU threads, the axis's variable their index."""
        if key == "thread_extent":
            if not isinstance(node, IterVar) or node.kind is not IterKind.THREAD:
                raise ExprError(
                    f"ir_builder.scope_attr: thread_extent needs a te.thread_axis, got {node!r}"
                )
            if node.thread_tag == "vthread":
                raise ExprError("ir_builder.scope_attr: virtual threads are not supported")
            extent = as_expr(value)
            if isinstance(extent, Const):  # (an empty launch is no launch: one block or thread)
                extent = const(max(1, int(extent.value)), extent.dtype)
            var = node.var
            extent = extent if extent.dtype == var.dtype else Cast(var.dtype, extent)
            self.emit(
                lambda body: For(
                    var, const(0, var.dtype), extent, body, LoopKind.THREAD_BINDING, node.thread_tag
                )
            )
            return
        self.emit(lambda body: Attr(key, value, body))

    # -- buffers and helpers --------------------------------------------------------------------
    def buffer_ptr(self, buf: Any, shape: Any = None) -> BufferVar:
        """A pointer to a te.extern input or output buffer (ins[i] / outs[i]) or a buffer
        this builder allocated; `shape` views it with other dimensions."""
        if isinstance(buf, BufferVar):
            if buf._builder is not self:
                raise ExprError(
                    f"ir_builder.buffer_ptr: '{buf.name}' belongs to another ir_builder"
                )
            ptr = buf
        elif isinstance(buf, ExternBuffer):
            ptr = self._views.get(id(buf))
            if ptr is None:
                view = ExternBufferView(buf.name, buf.shape, buf.dtype, buf.scope, extern=buf)
                ptr = self._views[id(buf)] = BufferVar(self, view, tuple(buf.shape))
        elif isinstance(buf, Buffer):
            ptr = BufferVar(self, buf, tuple(buf.shape))
        else:
            raise ExprError(
                f"ir_builder.buffer_ptr: expected a buffer (a te.extern fcompute's ins[i] / "
                f"outs[i]), got {buf!r}"
            )
        if shape is None:
            return ptr
        return BufferVar(self, ptr.buffer, tuple(as_expr(e) for e in shape))

    def likely(self, expr: Any) -> Expr:
        """`expr`, marked as usually true (a hint; the code generators ignore it)."""
        return as_expr(expr)

    def get(self) -> Stmt:
        """The statement built so far (te.extern's fcompute returns it)."""
        if len(self._scopes) != 1:
            raise ExprError("ir_builder.get: called inside a with-scope of the same builder")
        stmt = _fold(list(self._scopes[0]))
        for node in walk(stmt):
            if isinstance(node, (BufferLoad, BufferStore)):
                owner = _ALLOCATED_BY.get(node.buffer)
                if owner is not None and owner is not self:
                    raise ExprError(
                        f"ir_builder: '{node.buffer.name}' was allocated by another ir_builder"
                    )
        return stmt

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        from tensorforge.tvm_names import MissingNameError

        raise MissingNameError(
            f"ir_builder.{name} is not provided (the builder has emit, for_range, while_loop, "
            f"if_scope, else_scope, new_scope, let, allocate, scope_attr, buffer_ptr, likely, get)"
        )


def _fold(items: list[Stmt | Wrapper]) -> Stmt:
    """A scope's statements in order; a wrapper takes everything after it as its body."""
    tail: list[Stmt] = []
    for item in reversed(items):
        if isinstance(item, Stmt):
            tail.append(item)
        else:
            body = item(seq(*reversed(tail)) if tail else Evaluate(const(0)))
            tail = [body]
    return seq(*reversed(tail)) if tail else Evaluate(const(0))


def _condition(value: Any, what: str) -> Expr:
    cond = as_expr(value)
    if not dt.is_bool(cond.dtype):
        raise ExprError(f"ir_builder.{what}: the condition {cond} is {cond.dtype}, not bool")
    return cond


@contextmanager
def _entering(scope: Any, value: Any) -> Iterator[Any]:
    with scope:
        yield value


def create() -> IRBuilder:
    """A new builder (TVM's tvm.tir.ir_builder.create)."""
    return IRBuilder()
