"""The codegen interface: lowered PrimFunc in, KernelSource (printable text + calling metadata) out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tensorforge.errors import BuildError
from tensorforge.ir.expr import Buffer
from tensorforge.ir.stmt import BufferStore
from tensorforge.ir.visit import walk
from tensorforge.te.expr import Const, Var

if TYPE_CHECKING:
    from tensorforge.ir.stmt import PrimFunc
    from tensorforge.target import Target


@dataclass(frozen=True)
class Param:
    """One argument of a compiled kernel, as the runtime sees it.

    kind is "buffer" (a pointer to `dtype` elements of `shape`) or "scalar" (a number of
    `dtype`). A shape entry is an int, or the name of a scalar parameter (a symbolic size) that
    the runtime binds from the array's shape; such scalars have `bound_from_shape=True`.
    `written` marks a buffer the kernel stores to (an output): the call refuses to let it share
    memory with another argument.
    """

    name: str
    kind: str
    dtype: str
    shape: tuple[int | str, ...] = ()
    bound_from_shape: bool = False
    written: bool = False


@dataclass(frozen=True)
class TensorMap:
    """A bulk-tensor-copy (TMA) descriptor a CUDA kernel reads, its address passed ahead of its params:
    buffer param `param` seen as a row-major [rows][cols] matrix of `dtype`, copied in boxes of
    box_rows x box_cols with the 128-byte swizzle. The runtime encodes it from the buffer's
    address at each call."""

    param: str
    dtype: str
    rows: int
    cols: int
    box_rows: int
    box_cols: int = 64


@dataclass(frozen=True)
class Launch:
    """GPU launch geometry: per-axis extents as ints or parameter names (dynamic shapes)."""

    grid: tuple[int | str, int | str, int | str] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    shared_bytes: int = 0


# The int32 global a CPU kernel with PARALLEL loops defines: the runtime stores the thread count
# there before each call (0 lets the thread pool choose).
NUM_THREADS_SYMBOL = "__tf_num_threads"
# The global a CPU kernel with heap-allocated intermediates defines, laid out as the C struct
# `{const char *buffer; int64_t count; int64_t element_bytes;}` (zero at load). Where an allocation
# fails, the kernel stores the buffer's name and the size it asked for there and skips the
# allocation's body; the runtime raises AllocationError after the call and clears the slot.
ALLOC_ERROR_SYMBOL = "__tf_alloc_error"


@dataclass(frozen=True)
class KernelSource:
    """What a backend produces: printable, diffable source text and how to call it."""

    target: str  # the target kind: "llvm" | "c" | "cuda"
    entry: str  # the function's name: `mod[entry]` (and the symbol, unless `symbol` says otherwise)
    text: str  # LLVM IR, C or CUDA C
    params: tuple[Param, ...]
    launch: Launch | None = None  # GPU only
    target_string: str = ""
    # CPU: the global holding the thread count (NUM_THREADS_SYMBOL), None without PARALLEL loops
    num_threads_symbol: str | None = None
    # GPU: (param name, bytes) for each buffer whose pointer vector accesses need that aligned
    vector_alignment: tuple[tuple[str, int], ...] = ()
    # GPU, a function of several kernels: `entry` names the sequence, `kernels` are launched in
    # order (their params named after `params` and `intermediates`, the device buffers the host
    # allocates for them); `text` holds every kernel
    kernels: tuple[KernelSource, ...] = ()
    intermediates: tuple[Param, ...] = ()
    # GPU: the kernel's name in `text` where it differs from `entry` (`f_kernel` for entry `f`)
    symbol: str = ""
    # CUDA: tensor maps the kernel takes first (their device addresses, before `params`)
    tensor_maps: tuple[TensorMap, ...] = ()


def generate_checked(
    kind: str, func: PrimFunc, target: Target, write: Callable[[], KernelSource]
) -> KernelSource:
    """`write()`, the `kind` backend's source of `func`, with its failures as BuildErrors: a
    target of another kind, and an exception of the writer's own on IR it did not expect (named
    after the backend and the function)."""
    if target.kind != kind:
        raise BuildError(
            f"{kind} codegen of '{func.name}': the target is of kind {target.kind!r}, not {kind!r}"
        )
    try:
        return write()
    except BuildError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, AssertionError) as err:
        raise BuildError(
            f"{kind} codegen of '{func.name}' failed: {type(err).__name__}: {err}"
        ) from err


def kernel_params(func: PrimFunc) -> tuple[Param, ...]:
    """The calling metadata: buffers with their shapes, scalars marked when a shape binds them."""
    shape_names = {
        e.name for p in func.params if isinstance(p, Buffer) for e in p.shape if isinstance(e, Var)
    }
    stored = {id(n.buffer) for n in walk(func.body) if isinstance(n, BufferStore)}
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            shape = tuple(
                int(e.value) if isinstance(e, Const) else e.name if isinstance(e, Var) else str(e)
                for e in p.shape
            )
            params.append(Param(p.name, "buffer", p.dtype, shape, written=id(p) in stored))
        else:
            params.append(
                Param(p.name, "scalar", p.dtype, (), bound_from_shape=p.name in shape_names)
            )
    return tuple(params)


class Codegen(Protocol):
    def generate(self, func: PrimFunc, target: Target) -> KernelSource: ...


def codegen_for(kind: str) -> Codegen:
    """The backend registered for a target kind."""
    from tensorforge.codegen import CODEGENS

    try:
        return CODEGENS[kind]
    except KeyError as missing:
        from tensorforge.errors import BuildError

        raise BuildError(
            f"no code generator for target kind {kind!r}; known: {', '.join(CODEGENS)}"
        ) from missing
