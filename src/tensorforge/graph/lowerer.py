"""ATen graph -> a program of kernels and eager steps: walk the nodes, compose lazies, decide
what to materialize.

Each node's value is a `Lazy` (values.py) until something needs it in memory: a graph output, an
operand a schedule wants contiguous (matmul, convolution), a reduction reading an unscheduled
anchor, an eager fallback, or a value whose recomputation in every consumer would cost more than
writing it once and reading it back (`worth_materializing`). Materializing makes one kernel:
the value's index function as one te compute, its anchor (if any) scheduled inside it.
"""

from __future__ import annotations

import dataclasses
import operator
import os

import torch
import torch.fx

from tensorforge import te
from tensorforge.graph import symbols as sym
from tensorforge.graph.constant_folding import ConstantFolding
from tensorforge.graph.lowered import BufferArg, EagerSpec, KernelSpec, Program
from tensorforge.graph.options import Float32Precision
from tensorforge.graph.registry import eager_on_cpu_reason, lowering_for
from tensorforge.graph.values import (
    Buffer,
    Lazy,
    NeedsEagerGraph,
    Unsupported,
    broadcast_index,
    in_dtype,
    is_static,
    opmath_dtype,
    read_buffer,
    rounded,
)
from tensorforge.te import dtype as dt
from tensorforge.te.intrin import LIBM_UNARY
from tensorforge.te.visit import children

aten = torch.ops.aten

TORCH_TO_TE = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
TE_TO_TORCH = {v: k for k, v in TORCH_TO_TE.items()}

# A value read by several consumers is recomputed in each while it costs at most this many
# operations (a few adds and multiplies): cheaper than a store and a load per element. Past it, or
# with a transcendental inside (exp, erf count 8), it is written once (see worth_materializing).
# operators computed by the C library per element (CUDA's per thread): where their operands
# derive from constants alone (rotary embeddings' cos and sin of `arange` positions), they are
# computed once at compile time rather than in each call's kernels (and again by each consumer)
LIBRARY_CALLS = {getattr(torch.ops.aten, name) for name in (*LIBM_UNARY, "atan2", "hypot")}
INLINE_COST = 6
MAX_COST = 96  # any value past this is materialized, so kernels stay a readable size
NATIVE = "native"  # pointwise(compute=NATIVE): operands keep their dtypes (where, masked_fill)


def te_dtype(dtype: torch.dtype) -> str:
    try:
        return TORCH_TO_TE[dtype]
    except KeyError:
        raise Unsupported(f"dtype {dtype}") from None


class Lowerer(ConstantFolding):
    """Lowers one ATen FX graph; `constants` maps placeholder positions to the tensors they hold;
    `precision`: where float32 products may run in TF32 (default: nowhere)."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        constants: dict[int, torch.Tensor],
        target,
        precision: Float32Precision | None = None,
    ):
        self.gm = gm
        self.constant_inputs = constants
        self.target = target
        self.precision = precision or Float32Precision()
        self.program = Program()
        self.env: dict[torch.fx.Node, object] = {}
        self._names: set[str] = set()
        self.strict = os.environ.get("TENSORFORGE_GRAPH_STRICT", "") not in ("", "0")
        self.node: torch.fx.Node | None = None
        self.replaced: dict[torch.fx.Node, object] = {}  # nodes a neighbour's lowering absorbed
        self._derived: dict[torch.fx.Node, object] = {}  # node -> its value, if constant-derived

    # -- the walk ---------------------------------------------------------------------------
    def run(self) -> Program:
        placeholders = 0
        for node in self.gm.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                self._derived[node] = self.constant_inputs.get(placeholders)
                self.env[node] = self._placeholder(node, placeholders)
                placeholders += 1
            elif node.op == "get_attr":
                tensor = getattr(self.gm, node.target)
                self.env[node] = self.add_constant(tensor, node.name)
            elif node.op == "call_function" and node.users:  # (a functional graph: dead is dead)
                self.env[node] = self._call(node)
            elif node.op == "output":
                self.program.outputs = [
                    self._output(v) for v in _as_list(self._values(node.args[0]))
                ]
        return self.program

    def _placeholder(self, node: torch.fx.Node, position: int):
        val = node.meta.get("val")
        if position in self.constant_inputs:
            self.program.inputs.append(None)
            return self.add_constant(self.constant_inputs[position], node.name)
        if isinstance(val, torch.Tensor) and not node.users:
            self.program.inputs.append(None)  # (an effect token: None at run time, effects.py)
            return None
        if isinstance(val, torch.Tensor):
            shape = self.program.symbols.shape(val.shape)
            buf = Buffer(self.unique(node.name), shape, te_dtype(val.dtype), "input", node.name)
            self.program.inputs.append(buf)
            return read_buffer(buf)
        if sym.is_symbolic(val):
            size = self.program.symbols.size(val)
            self.program.inputs.append(size.name if isinstance(size, te.Var) else None)
            return size
        self.program.inputs.append(None)
        return val

    def _call(self, node: torch.fx.Node):
        if node.target is operator.getitem:  # one result of a multi-result node
            return self._settle(node, self.env[node.args[0]][node.args[1]])
        if node in self.replaced:
            return self.replaced[node]
        val = node.meta.get("val")
        if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
            return self.program.symbols.size(val)
        if isinstance(val, torch.SymFloat):  # SDPA's 1 / sqrt(E) of a run-time E
            return self.program.symbols.size(val)
        args, kwargs = self._values(node.args), self._values(node.kwargs)
        folded = self._fold_constants(node, args, kwargs)
        if folded is not None:
            return folded
        if getattr(node.target, "overloadpacket", None) in LIBRARY_CALLS:
            folded = self._fold_derived(node)  # (a table of positions: once, not each call)
            if folded is not None:
                return folded
        lowering = lowering_for(node.target)
        if lowering is None:
            return self._fold_or_eager(node, args, kwargs, "no lowering for this operator")
        slower = eager_on_cpu_reason(node.target, node) if self.target.kind == "llvm" else None
        if slower is not None:
            return self._fold_or_eager(node, args, kwargs, slower)
        try:
            value = lowering(self, node, *args, **kwargs)
        except Unsupported as why:
            return self._fold_or_eager(node, args, kwargs, str(why))
        except NeedsEagerGraph:
            raise
        except Exception as err:  # a lowering bug must not break the user's model
            if self.strict:
                raise
            return self.eager(node, args, kwargs, f"lowering failed: {type(err).__name__}: {err}")
        return self._settle(node, value)

    def _values(self, tree):
        return torch.fx.node.map_arg(tree, lambda n: self.env[n])

    def _settle(self, node: torch.fx.Node, value):
        """Materialize what the node's consumers should read from memory."""
        if not isinstance(value, Lazy):
            return value
        users = len(node.users)
        if value.name is None:
            value = dataclasses.replace(value, name=node.name)
        if worth_materializing(value, users):
            return self.materialize(value, node=node.name)
        return value

    # -- materializing ----------------------------------------------------------------------
    def unique(self, name: str) -> str:
        base = "".join(c if c.isalnum() else "_" for c in name) or "t"
        candidate, k = base, 1
        while candidate in self._names:
            candidate, k = f"{base}_{k}", k + 1
        self._names.add(candidate)
        return candidate

    def materialize(self, value: Lazy, kind: str = "temp", node: str | None = None) -> Lazy:
        """The value in memory: a kernel writes it into a new buffer (nothing if it is one)."""
        if value.source is not None and value.anchor is None:
            return value
        if value.anchor is not None:
            shape, at = value.anchor.info["shape"], value.at_anchor
        else:
            shape, at = value.shape, value.at
        if not shape:  # a scalar is computed as one element: a kernel needs a loop to bind
            shape, scalar_at = (1,), at
            at = lambda idx: scalar_at(())  # noqa: E731
        node = node or value.name
        name = self.unique(node or (value.nodes[-1] if value.nodes else "t"))
        buf = Buffer(name, shape, value.dtype, kind, node if _same(shape, value.shape) else None)
        dtype = value.dtype
        out = te.compute(shape, lambda *i: _typed(at(tuple(i)), dtype), name=f"{name}_out")
        reads = set(value.reads)
        if value.anchor is not None:
            reads |= value.anchor.reads
        spec = KernelSpec(
            name=f"k{len(self.program.steps)}_{name}",
            out=out,
            buffer=buf,
            reads=sorted(reads, key=lambda b: b.name),
            anchor=value.anchor,
            nodes=tuple(dict.fromkeys(value.nodes + (value.anchor.nodes if value.anchor else ()))),
        )
        self.program.steps.append(spec)
        return read_buffer(buf, value.shape)

    def lazy(self, value) -> Lazy:
        if not isinstance(value, Lazy):
            raise Unsupported(f"expected a tensor, got {type(value).__name__}")
        return value

    def buffer(self, value) -> Lazy:
        """The value in memory (a matmul or conv operand): its buffer, reshaped or not."""
        return self.materialize(self.lazy(value))

    def view_of_memory(self, value) -> Lazy:
        """The value as a pure index view of buffers (no arithmetic), else materialized: an
        operand read once per use, such as a matmul's left matrix (a transpose of it costs a
        strided scalar load per multiply-add, less than a copy kernel)."""
        value = self.lazy(value)
        if value.anchor is None and value.cost <= 1 and len(value.reads) == 1:
            return value
        return self.materialize(value)

    def no_anchor(self, value) -> Lazy:
        """The value without an unscheduled anchor (reductions read their inputs this way)."""
        value = self.lazy(value)
        return self.materialize(value) if value.anchor is not None else value

    def add_constant(self, tensor: torch.Tensor, name: str) -> Lazy:
        tensor = tensor.detach().contiguous()
        shape = tuple(int(s) for s in tensor.shape)
        buf = Buffer(self.unique(name), shape, te_dtype(tensor.dtype), "constant", name)
        self.program.constants[buf] = tensor
        return read_buffer(buf)

    def constant(self, value) -> torch.Tensor | None:
        """The tensor a constant value holds (None if it is not a constant)."""
        if not isinstance(value, Lazy) or value.source is None or value.anchor is not None:
            return None
        if value.source.kind != "constant":
            return None
        return self.program.constants[value.source].reshape(
            tuple(int(s) for s in value.shape) if is_static(value.shape) else (-1,)
        )

    def _fold_or_eager(self, node: torch.fx.Node, args, kwargs, reason: str):
        """An operator with no kernel: computed once now where its value derives from constants
        alone (rotary embeddings' cos/sin of `arange` positions), else run eagerly each call."""
        folded = self._fold_derived(node)
        return folded if folded is not None else self.eager(node, args, kwargs, reason)

    def _fold_derived(self, node: torch.fx.Node):
        """The node's value as a constant where it derives from constants alone, else None."""
        value = self._derived_constant(node)
        if isinstance(value, torch.Tensor) and value.dtype in TORCH_TO_TE:
            self.program.folded.append(node.name)
            return self.add_constant(value, node.name)
        return None

    # -- element-wise -----------------------------------------------------------------------
    def pointwise(
        self,
        fn,
        operands,
        shape=None,
        dtype: str | None = None,
        compute=None,
        jumps: bool = False,
    ) -> Lazy:
        """`fn(*exprs)` per element over operands broadcast to `shape` (the node's by default);
        Python numbers and size expressions enter as constants of the `compute` dtype (the
        result's by default; float32 for a half type, rounded once where the value is stored).
        An operand reading an anchor makes this its epilogue.

        `jumps`: `fn` is not continuous (floor, ceil, a rounding division). Then, and for an
        integer or bool result (a comparison, a conversion), half operands are read as stored,
        rounded, as eager reads them: unrounded, x * y = 2.9993 (3.0 in float16) floors to 2."""
        node = self.node
        shape = self.shape_of(node) if shape is None else tuple(shape)
        dtype = dtype or self.dtype_of(node)
        compute = opmath_dtype(compute or dtype) if compute != NATIVE else compute
        anchored = None
        ops = []
        for op in operands:
            if isinstance(op, Lazy) and op.anchor is not None:
                if anchored is None and _same(op.shape, shape):
                    anchored = op
                elif anchored is None or op.anchor is not anchored.anchor:
                    op = self.materialize(op)
            ops.append(op)
        uses = _uses_of_operands(fn, ops, compute)
        for k, (n, op) in enumerate(zip(uses, ops)):  # an operand fn repeats, read from memory
            if isinstance(op, Lazy) and op.anchor is None and n > 1 and n * op.cost > MAX_COST:
                ops[k] = self.materialize(op)  # (else each use inlines it: fmod's 7 of a chain)
        cost = 1 + sum(n * op.cost for n, op in zip(uses, ops) if isinstance(op, Lazy))
        reads = frozenset().union(*[op.reads for op in ops if isinstance(op, Lazy)])
        nodes = tuple(dict.fromkeys(n for op in ops if isinstance(op, Lazy) for n in op.nodes))
        nodes = nodes + (node.name,) if node is not None else nodes

        native = compute == NATIVE  # each operand keeps its own dtype
        as_stored = jumps or not dt.is_float(dtype)

        def cast(e):
            if native:
                return e
            if as_stored and dt.is_half(e.dtype):
                return e.astype(compute)  # float32(float16(x32)): the rounding stays
            return _typed(e, compute)

        def scalar(op):
            return cast(op if isinstance(op, te.Expr) else te.const(op, compute))

        def at(idx):
            exprs = [
                cast(op.at(broadcast_index(idx, op.shape, shape)))
                if isinstance(op, Lazy)
                else scalar(op)
                for op in ops
            ]
            return _typed(fn(*exprs), dtype)

        if anchored is None:
            return Lazy(shape, dtype, at, reads, nodes, cost)
        anchor, to_logical = anchored.anchor, anchored.to_logical

        def at_anchor(ia):
            logical = to_logical(ia)
            exprs = []
            for op in ops:
                if isinstance(op, Lazy) and op.anchor is anchor:
                    exprs.append(cast(op.at_anchor(ia)))
                elif isinstance(op, Lazy):
                    exprs.append(cast(op.at(broadcast_index(logical, op.shape, shape))))
                else:
                    exprs.append(scalar(op))
            return _typed(fn(*exprs), dtype)

        return Lazy(
            shape, dtype, _no_logical, reads, nodes, cost, anchor, at_anchor, to_logical, None
        )

    def anchored(
        self, anchor, at_anchor, dtype: str, nodes=(), shape=None, to_logical=None
    ) -> Lazy:
        """A value computed in `anchor`'s space (its `info["shape"]`): a value of `shape` (the
        anchor's by default), onto which `to_logical` maps an anchor index (the same index by
        default). `at_anchor` may give it in float32 where `dtype` is a half type (see
        `rounded`)."""
        return Lazy(
            anchor.info["shape"] if shape is None else tuple(shape),
            dtype,
            _no_logical,
            frozenset(),
            tuple(nodes) + anchor.nodes,
            4,
            anchor,
            rounded(at_anchor, dtype),
            (lambda ia: tuple(ia)) if to_logical is None else to_logical,
            None,
        )

    # -- facts about nodes ------------------------------------------------------------------
    def shape_of(self, node: torch.fx.Node, index: int | None = None) -> tuple:
        val = node.meta["val"]
        if index is not None:
            val = val[index]
        return self.program.symbols.shape(val.shape)

    def dtype_of(self, node: torch.fx.Node, index: int | None = None) -> str:
        val = node.meta["val"]
        if index is not None:
            val = val[index]
        return te_dtype(val.dtype)

    # -- eager fallback ---------------------------------------------------------------------
    def eager(self, node: torch.fx.Node, args, kwargs, reason: str):
        """Run the node in torch inside the compiled graph; its results become buffers."""

        views = self._permuted_buffers(node)

        def arg(v):
            if isinstance(v, Lazy):
                if id(v) in views:
                    return views[id(v)]
                v = self.materialize(v)
                return BufferArg(v.source, tuple(v.shape))
            return v

        args, kwargs = torch.utils._pytree.tree_map(arg, (args, kwargs))
        val = node.meta.get("val")
        flat = list(val) if isinstance(val, (tuple, list)) else [val]
        outputs, values = [], []
        for k, v in enumerate(flat):
            if isinstance(v, torch.Tensor) and v.dtype not in TORCH_TO_TE:
                # (a complex FFT's result: no buffer holds it, so no later step could read it)
                raise NeedsEagerGraph(
                    f"{node.name}: {node.target} gives {v.dtype} values, which no kernel reads"
                )
            if isinstance(v, torch.Tensor) and v.dtype in TORCH_TO_TE:
                shape = self.program.symbols.shape(v.shape)
                name = self.unique(node.name if len(flat) == 1 else f"{node.name}_{k}")
                buf = Buffer(name, shape, TORCH_TO_TE[v.dtype], "eager", node.name)
                outputs.append(buf)
                values.append(read_buffer(buf))
            else:
                outputs.append(None)
                values.append(None)
        spec = EagerSpec(node.name, node.target, args, kwargs, outputs, reason)
        self.program.steps.append(spec)
        self.program.fallbacks.append((node.name, str(node.target), reason))
        return tuple(values) if isinstance(val, (tuple, list)) else values[0]

    _PERMUTES = {
        aten.permute.default: lambda n, rank: tuple(d % rank for d in n.args[1]),
        aten.t.default: lambda n, rank: (1, 0)[:rank],
        aten.transpose.int: lambda n, rank: _swapped(rank, n.args[1] % rank, n.args[2] % rank),
    }

    def _permuted_buffers(self, node: torch.fx.Node) -> dict:
        """id(value) -> BufferArg for the arguments of `node` that are a permute of a value in
        memory: torch reads them as views (a training graph's W^T, no transposing copy)."""
        found = {}
        for arg in node.all_input_nodes:
            permutation = self._PERMUTES.get(arg.target)
            value, base = self.env.get(arg), self.env.get(arg.args[0]) if arg.args else None
            if permutation is None or not isinstance(value, Lazy) or not isinstance(base, Lazy):
                continue
            if base.source is None or base.anchor is not None:
                continue
            found[id(value)] = BufferArg(
                base.source, tuple(base.shape), permutation(arg, len(base.shape))
            )
        return found

    def _output(self, value):
        if isinstance(value, Lazy):
            if value.source is not None and value.anchor is None:
                if value.source.kind == "temp":
                    value.source.kind = (
                        "output"  # written by its kernel straight into a fresh tensor
                    )
                return BufferArg(value.source, tuple(value.shape))
            value = self.materialize(
                value, kind="output", node=value.nodes[-1] if value.nodes else None
            )
            return BufferArg(value.source, tuple(value.shape))
        return value


def _uses_of_operands(fn, ops, compute) -> list[int]:
    """How many times `fn`'s expression holds each operand (fmod's holds x three times, a
    rounding division's quotient twice): a value is inlined that many times into its consumer,
    so its cost counts so many times; counted as 1 alone, chains of such operators grew
    expressions exponentially past MAX_COST (fmod of a trunc division of a lerp: a hang)."""
    dtypes = [compute if compute != NATIVE else op.dtype for op in ops if isinstance(op, Lazy)]
    leaves = iter(te.Var(f"_operand{k}", d) for k, d in enumerate(dtypes))
    args = [
        next(leaves)
        if isinstance(op, Lazy)
        else (
            op
            if isinstance(op, te.Expr)
            else te.const(op, compute if compute != NATIVE else "float32")
        )  # fmt: skip
        for op in ops
    ]
    try:
        expr = fn(*args)
    except Exception:  # noqa: BLE001 - an fn that needs real operands: count each once
        return [1] * len(ops)
    counts: dict[int, int] = {}
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, te.Var):
            counts[id(node)] = counts.get(id(node), 0) + 1
        stack.extend(children(node))
    return [counts.get(id(a), 0) if isinstance(op, Lazy) else 0 for a, op in zip(args, ops)]


def worth_materializing(value: Lazy, users: int) -> bool:
    """Write a value to memory rather than recompute it in each of its `users`?

    Inlining saves a store and a load per element (8 bytes for float32) and costs `users - 1`
    recomputations of the value. An anchor (a reduction) is never recomputed; a cheap element-wise
    value (cost <= INLINE_COST) is; anything bigger than MAX_COST is written out regardless.
    """
    if value.source is not None and value.anchor is None:
        return False
    if value.cost > MAX_COST:
        return True
    if users <= 1:
        return False
    return value.anchor is not None or value.cost > INLINE_COST


def _typed(e, dtype: str):
    e = te.const(e, dtype) if not isinstance(e, te.Expr) else e
    return in_dtype(e, dtype)


def _no_logical(idx):
    raise AssertionError("an anchored value is read in its anchor's space")


def _same(a, b) -> bool:
    from tensorforge.graph.values import same_shape

    return same_shape(a, b)


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _swapped(rank: int, a: int, b: int) -> tuple:
    order = list(range(rank))
    order[a], order[b] = order[b], order[a]
    return tuple(order)
