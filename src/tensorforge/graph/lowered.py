"""What lowering produces (lowerer.py) and the builder runs (program.py): a `Program` of steps,
each a kernel to build (`KernelSpec`) or a node torch runs (`EagerSpec`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorforge import te
from tensorforge.graph import symbols as sym
from tensorforge.graph.values import Buffer


@dataclass
class KernelSpec:
    """One kernel to build: `out` (a te compute) written into `buffer`, reading `reads`; an
    extern stage of several outputs (values and indices) writes the others into `more`'s
    buffers, one (te.Tensor, Buffer) pair each."""

    name: str
    out: te.Tensor
    buffer: Buffer
    reads: list[Buffer]
    anchor: object
    nodes: tuple[str, ...]
    more: tuple[tuple[te.Tensor, Buffer], ...] = ()

    @property
    def outputs(self) -> list[te.Tensor]:
        return [self.out, *(t for t, _ in self.more)]

    @property
    def written(self) -> list[Buffer]:
        return [self.buffer, *(b for _, b in self.more)]

    @property
    def tensors(self) -> list[te.Tensor]:
        """The kernel's arguments: what it reads (placeholders), then what it writes."""
        return [b.placeholder for b in self.reads] + self.outputs


@dataclass
class EagerSpec:
    """One node run by torch: `args`/`kwargs` hold `BufferArg`s, sizes (ints or te exprs) and
    literals; the results land in `outputs` (None where a result is not a tensor kept)."""

    name: str
    target: object
    args: tuple
    kwargs: dict
    outputs: list
    reason: str


@dataclass(frozen=True)
class BufferArg:
    """A buffer as a tensor of `shape`; with `permutation`, that tensor's permuted view (an
    eager step reads a transposed weight in place instead of a copy a kernel would make)."""

    buffer: Buffer
    shape: tuple
    permutation: tuple | None = None


@dataclass
class Program:
    """What lowering produced: steps in order, the graph's inputs, outputs and constants."""

    steps: list = field(default_factory=list)
    inputs: list = field(default_factory=list)  # per graph input: Buffer, a symbol name, or None
    outputs: list = field(default_factory=list)  # per graph output: BufferArg, size, or literal
    constants: dict = field(default_factory=dict)  # Buffer -> torch.Tensor
    symbols: sym.Symbols = field(default_factory=sym.Symbols)
    fallbacks: list = field(default_factory=list)  # (node name, reason)
    folded: list = field(default_factory=list)  # nodes computed once at compile time
