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
# op -> which of its nodes run eagerly (the rest take the kernel), where only some are slower
EAGER_ON_CPU_WHEN: dict[object, Callable] = {}


def eager_on_cpu(*ops, when: Callable | None = None, what: str = "") -> None:
    """Run `ops` eagerly on CPU targets; with `when(node)`, only the nodes it accepts (`what`
    names them in the reason)."""
    for op in ops:
        EAGER_ON_CPU[op] = f"{op}{' ' + what if what else ''} on the CPU (eager torch's is faster)"
        if when is not None:
            EAGER_ON_CPU_WHEN[op] = when


def eager_on_cpu_reason(target, node=None) -> str | None:
    reason = EAGER_ON_CPU.get(target)
    when = EAGER_ON_CPU_WHEN.get(target)
    if reason is None or when is None or node is None:
        return reason
    return reason if when(node) else None


def lowering_for(target) -> Callable | None:
    """The lowering of an OpOverload, or of its packet (all overloads) when only that is listed."""
    fn = LOWERINGS.get(target)
    if fn is None:
        fn = LOWERINGS.get(getattr(target, "overloadpacket", None))
    return fn
