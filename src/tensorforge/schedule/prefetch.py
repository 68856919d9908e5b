"""Prefetch statements for `Stage.prefetch`: the region a later loop iteration reads, by lines."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tensorforge.ir.arith import Interval, const_bounds, simplify_expr, symbolic_bounds
from tensorforge.ir.expr import Buffer
from tensorforge.ir.stmt import For, Prefetch, Stmt
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Expr, TensorRead, Var, const
from tensorforge.te.substitute import substitute
from tensorforge.te.tensor import Tensor
from tensorforge.te.visit import walk

CACHE_LINE_BYTES = 64


def prefetch_nest(
    buffer_of: Callable[[Tensor], Buffer],
    tensor: Tensor,
    body: tuple[Expr, ...],
    roots: Mapping[Var, Expr],
    shift: Mapping[Var, Expr],
    relax: Mapping[Var, Interval],
    known: Mapping[Var, Interval],
    write: bool = False,
) -> list[Stmt]:
    """Prefetches of every line of `tensor` that `body` reads once the loop var is shifted.

    `roots` gives each root axis var as an expression of the leaf loop vars, `shift` moves the
    prefetching loop ahead, and `relax` ranges the loops inside it (those the region spans).
    A read that cannot be bounded gets no prefetch, nor does a tensor that was inlined (nothing
    reads it any more): it is only a hint.
    """
    out: list[Stmt] = []
    seen: set[str] = set()
    reads = [n for e in body for n in walk(e) if isinstance(n, TensorRead) and n.tensor == tensor]
    for read in reads:
        region = _region(read.indices, roots, shift, relax, known)
        flat = _flat_region(tensor, read.indices, roots, shift, relax, known)
        if region is None and flat is None:
            continue
        if region is None or (flat is not None and _fewer_elements(flat, region)):
            # a fused or flattened loop reads a run of whole rows: its region per dimension
            # (through // and %) spans every row it touches, the flat one only the run
            region = [(const(0), const(1))] * (len(tensor.shape) - 1) + flat
        if _too_large(region, tensor.dtype) or _rereads_resident_lines(
            tensor, read.indices, region, roots, shift, relax, known
        ):
            continue
        stmt = _lines(buffer_of(tensor), region, write)
        if str(stmt) not in seen:  # several reads of one region: prefetch it once
            seen.add(str(stmt))
            out.append(stmt)
    return out


def _bounded(index: Expr, roots, shift, relax, known) -> tuple[Expr, Expr] | None:
    """(min, extent) of `index` once shifted ahead, over the relaxed loops; None if unbounded."""
    ahead = simplify_expr(substitute(substitute(index, roots), shift), {**known, **relax})
    bound = symbolic_bounds(ahead, relax, known)
    if bound.min is None or bound.max is None:
        return None
    return simplify_expr(bound.min), simplify_expr(bound.max - bound.min + 1)


def _region(indices, roots, shift, relax, known) -> list[tuple[Expr, Expr]] | None:
    region = [_bounded(index, roots, shift, relax, known) for index in indices]
    return None if any(r is None for r in region) else region


def _flat_region(
    tensor: Tensor, indices, roots, shift, relax, known
) -> list[tuple[Expr, Expr]] | None:
    """The read as one row-major offset into the tensor: [(min, extent)], or None."""
    flat = indices[0]
    for extent, index in zip(tensor.shape[1:], indices[1:]):
        flat = flat * extent + index
    # i // w * w + i % w folds back to i before the shift and the ranges rewrite the pieces apart
    bounded = _bounded(simplify_expr(substitute(flat, roots)), {}, shift, relax, known)
    return None if bounded is None else [bounded]


def _fewer_elements(flat: list[tuple[Expr, Expr]], region: list[tuple[Expr, Expr]]) -> bool:
    total = const(1)
    for _, extent in region:
        total = total * extent
    total, flat_extent = simplify_expr(total), flat[0][1]
    if not isinstance(flat_extent, Const):
        return False
    return not isinstance(total, Const) or int(flat_extent.value) < int(total.value)


# Prefetching more than twice an L1 data cache per step evicts what it fetches before use. Such a
# region comes from // and % of a fused index that do not fold back into a run: a 4-d batch norm's
# input read on its flat index did until the simplifier folded the digits x // a % b back (it
# spanned every channel: 57,000 lines a step, 1.2 s for 3 MB; now 4 lines); a read that
# transposes the last two dimensions still does (1 x 256 x 56², 1 thread: 1.25 s without the
# cap, 0.9 ms with it), so the cap stays.
MAX_PREFETCH_BYTES = 64 * 1024


def _too_large(region: list[tuple[Expr, Expr]], dtype: str) -> bool:
    """Past the cap by its constant extents alone (a symbolic extent counts as 1)."""
    elements = 1
    for _, extent in region:
        extent = simplify_expr(extent)
        if isinstance(extent, Const):
            elements *= max(1, int(extent.value))
    return elements * _element_bytes(dtype) > MAX_PREFETCH_BYTES


# A step that prefetches more than twice the lines its own reads fill reads a sliver of each (a
# transposing read: 64 outputs a step, one element from each of 56 rows), and the steps after it
# read the rest of those lines. Where the rows the whole loop sweeps, a line each, fit the
# smallest L1 data cache of the CPUs in use, the lines stay there between those reads, and every
# prefetch after the first of a line is an instruction for nothing: the 4-d transposes of
# ops.schedule_elementwise, 1 thread, 1 x 64 x 56^2: 84 -> 177 us with them. Where the rows
# overflow it (a 1024^2 transpose sweeps 1024 rows, 64 KiB), the lines return from L2 and the
# prefetch pays (3.7 ms with it, 4.5 without).
MAX_LINES_PER_LINE_READ = 2
L1_BYTES = 32 * 1024


def _rereads_resident_lines(tensor: Tensor, indices, region, roots, shift, relax, known) -> bool:
    """Are the region's lines mostly ones earlier steps fetched and L1 still holds? Judged by
    extents with a constant bound: anything unbounded keeps the prefetch."""
    read = _points([simplify_expr(span.max - span.min + 1) for span in relax.values()], known)
    if read is None:
        return False
    read_lines = -(-read * _element_bytes(tensor.dtype) // CACHE_LINE_BYTES)
    if _line_count(region, tensor.dtype) <= MAX_LINES_PER_LINE_READ * read_lines:
        return False  # the step reads most of what it fetches: a run, or rows of whole lines
    ((loop, _),) = shift.items()
    row = simplify_expr(tensor.shape[-1])
    if loop not in known or not isinstance(row, Const):
        return False
    # the rows between the first and the last element the whole loop reads: a line of each
    span = _flat_region(tensor, indices, roots, {}, {**relax, loop: known[loop]}, known)
    elements = None if span is None else _points([span[0][1]], known)
    if elements is None:
        return False
    rows = -(-elements // int(row.value)) + 1  # a span that starts inside a row ends in another
    return rows * CACHE_LINE_BYTES <= L1_BYTES


def _points(extents: list[Expr], known: Mapping[Var, Interval]) -> int | None:
    """The most points a box of these extents holds, or None where one has no constant bound."""
    count = 1
    for extent in extents:
        _, most = const_bounds(extent, known)
        if most is None:
            return None
        count *= max(0, most)
    return count


def _line_count(region: list[tuple[Expr, Expr]], dtype: str) -> int:
    """How many prefetches `_lines` makes of the region, by its constant extents (a symbolic
    one counts as 1)."""
    per_line = max(1, CACHE_LINE_BYTES // _element_bytes(dtype))
    count = 1
    for d, (_, extent) in enumerate(region):
        extent = simplify_expr(extent)
        size = max(1, int(extent.value)) if isinstance(extent, Const) else 1
        count *= -(-size // per_line) if d == len(region) - 1 else size
    return count


def _lines(buffer: Buffer, region: list[tuple[Expr, Expr]], write: bool = False) -> Stmt:
    """Loops over the region's outer dimensions, and over its innermost one line at a time."""
    step = max(1, CACHE_LINE_BYTES // _element_bytes(buffer.dtype))
    *outer, (last_min, last_extent) = region
    lines = simplify_expr((last_extent + step - 1) // step)
    # each loop variable is of its extent's type (int64 for a region that can pass 2**31)
    line = Var(f"{buffer.name}.line", lines.dtype)
    loop_vars = [Var(f"{buffer.name}.pf{d}", extent.dtype) for d, (_, extent) in enumerate(outer)]
    indices = [lo + v for (lo, _), v in zip(outer, loop_vars)]
    stmt: Stmt = Prefetch(buffer, (*indices, simplify_expr(last_min + line * step)), write)
    stmt = For(line, const(0, line.dtype), lines, stmt)
    for d in reversed(range(len(outer))):
        stmt = For(loop_vars[d], const(0, loop_vars[d].dtype), outer[d][1], stmt)
    return stmt


def _element_bytes(dtype: str) -> int:
    return max(1, dt.bits_of(dtype) // 8)  # (a bool is stored in a byte)
