"""The table of ATen lowerings: `@lowers(aten.relu.default, ...)` registers `fn(ctx, node, *args)`.

`ctx` is the `Lowerer` (lowerer.py): it turns values into what a lowering needs (`ctx.lazy`,
`ctx.buffer`, `ctx.constant`), combines element-wise operands (`ctx.pointwise`) and sizes
(`ctx.shape_of(node)`, from the node's fake tensor). Arguments arrive with graph nodes replaced by
their values; a lowering returns a `Lazy` (or a tuple of them) or raises `Unsupported`.
"""

from __future__ import annotations

from collections.abc import Callable

LOWERINGS: dict[object, Callable] = {}


def lowers(*ops) -> Callable:
    def register(fn: Callable) -> Callable:
        for op in ops:
            LOWERINGS[op] = fn
        return fn

    return register


# operators whose kernels are slower than eager torch's on CPU targets (measured: each module's
# note): the lowerer runs them eagerly there, GPU targets take the kernels
EAGER_ON_CPU: dict[object, str] = {}


def eager_on_cpu(*ops) -> None:
    for op in ops:
        EAGER_ON_CPU[op] = f"{op} on the CPU (eager torch's is faster)"


def eager_on_cpu_reason(target) -> str | None:
    return EAGER_ON_CPU.get(target)


def lowering_for(target) -> Callable | None:
    """The lowering of an OpOverload, or of its packet (all overloads) when only that is listed."""
    fn = LOWERINGS.get(target)
    if fn is None:
        fn = LOWERINGS.get(getattr(target, "overloadpacket", None))
    return fn
