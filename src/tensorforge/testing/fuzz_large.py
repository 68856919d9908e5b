"""Fuzz draws with extents too large to run: lowered only, and checked for int64 index arithmetic.

A computation over shapes of 2**31 elements or more (constant, like (65536, 65536), or symbolic,
like (n, m)) under a random schedule (fuse, split, vectorize, compute_at) must lower without
error, and every offset into a buffer that can reach 2**31 elements, and every loop whose extent
can pass int32, must be computed in int64 (ir/arith/index_dtype.py): with int32 they would wrap.

    from tensorforge.testing.fuzz_large import draw_large, check_large
    problems = check_large(draw_large(RandomChooser(random.Random(seed))))
"""

from __future__ import annotations

from tensorforge.testing.fuzz_choice import Chooser

# shapes whose element count passes int32: constant, symbolic, mixed
_SHAPES = (
    "(65536, 65536)",
    "(2**31 + 5,)",
    "(n, m)",
    "(n, 4096)",
    "(46341, 46341)",
    "(3, 1 << 30)",
)
_BODIES = ("A[{idx}] * 2.0", "A[{idx}] + B[{last}]", "te.exp(A[{idx}])")


def draw_large(ch: Chooser) -> str:
    """Source text defining `s` (a schedule) and `args`, with huge extents."""
    shape = ch.choice(_SHAPES)
    rank = shape.count(",") + (0 if shape.endswith(",)") else 1)
    axes = "ijl"[:rank]
    idx = ", ".join(axes)
    body = ch.choice(_BODIES).format(idx=idx, last=axes[-1])
    last = shape.strip("()").split(",")[rank - 1].strip() if rank > 1 else shape.strip("(,)")
    lines = ['n, m = te.var("n"), te.var("m")', f'A = te.placeholder({shape}, name="A")']
    lines.append(f'B = te.placeholder(({last},), name="B")')
    lines.append(f'T = te.compute({shape}, lambda {idx}: {body}, name="T")')
    chain = ch.chance(0.5)
    out = "T"
    if chain:  # an intermediate of the same huge size
        lines.append(f'C = te.compute({shape}, lambda {idx}: T[{idx}] - 1.0, name="C")')
        out = "C"
    lines.append(f"s = te.create_schedule({out}.op)")
    lines.append(f"leaf = list(s[{out}].op.axis)")
    if rank > 1 and ch.chance(0.6):
        lines.append(f"leaf = [s[{out}].fuse(*leaf)]")
    if ch.chance(0.6):
        factor = ch.choice((4, 8, 64, 1000))
        lines.append(f"leaf = list(s[{out}].split(leaf[-1], factor={factor}))")
        if ch.chance(0.5):
            lines.append(f"s[{out}].vectorize(leaf[-1])")
    if ch.chance(0.3):
        lines.append(f"s[{out}].parallel(leaf[0])")
    if chain and ch.chance(0.5):
        lines.append(f"s[T].compute_at(s[{out}], leaf[0])")
    uses_b = "B[" in body
    args = ["A"] + (["B"] if uses_b else []) + [out]
    lines.append(f"args = [{', '.join(args)}]")
    return "\n".join(lines) + "\n"


def check_large(source: str) -> list[str]:
    """Lower `source` (from draw_large); the index arithmetic that would wrap in int32."""
    import tensorforge as tf
    from tensorforge import te
    from tensorforge.ir.arith.index_dtype import INT32_MAX, max_value, offset_dtype
    from tensorforge.ir.expr import BufferLoad
    from tensorforge.ir.stmt import Allocate, BufferStore, For
    from tensorforge.ir.visit import walk

    scope: dict = {"te": te, "tf": tf}
    exec(source, scope)  # noqa: S102 - the fuzzer's own generated source
    func = tf.lower(scope["s"], scope["args"])
    problems = []
    small = {  # an intermediate realized over a small region (compute_at) needs no int64
        id(n.buffer)
        for n in walk(func.body)
        if isinstance(n, Allocate) and max_value(n.extent) <= INT32_MAX
    }
    for node in walk(func.body):
        if isinstance(node, (BufferLoad, BufferStore)) and id(node.buffer) not in small:
            buf = node.buffer
            wanted = offset_dtype(buf.shape, buf.strides)
            got = node.indices[0].dtype.split("x")[0]
            if wanted == "int64" and got != "int64":
                problems.append(f"{buf.name}[{node.indices[0]}] is {got}, needs int64")
        elif isinstance(node, For):
            if max_value(node.extent) > INT32_MAX and node.var.dtype != "int64":
                problems.append(f"loop {node.var.name} over {node.extent} is {node.var.dtype}")
    return problems
