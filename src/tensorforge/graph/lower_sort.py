"""Sorts as ir_builder kernels writing values and indices together: sort (stable or not,
descending, any dimension; argsort and msort are sorts), topk, kthvalue and median (of a
dimension, and of the whole tensor).

Each line along the dimension is one task (CPU: lines in parallel; CUDA: a thread a line, of
at most CUDA_LINE elements, in its local memory). The order is torch's: NaN greatest (last
ascending, first descending), -0.0 equal to 0.0; half types compare as float32, bools as
integers.
- sort: the line copied into scratch (keys and positions), insertion-sorted in runs of RUN,
  then merged bottom-up, two scratch copies taking turns; a merge takes the right element
  first only where it is strictly before the left one, so the sort is stable (torch's stable
  order; a sort that need not be stable gives it too).
- topk of k up to SELECT_K: one pass keeping the k best in order; an element enters only where
  it is strictly before the k-th best, tested a block of elements at a time (mostly none).
  Larger k sort the line.
- kthvalue, median: a quickselect of the line's copy (Hoare's partition in Wirth's loop); the
  median of a line with a NaN is its first NaN, as torch's.
Among equal values, topk, kthvalue and median may take another index than torch (unspecified
there; theirs point at equal values).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tensorforge import te
from tensorforge.graph.extern_kernels import Lines, each, extern_kernel_outputs, numel, wide
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.values import Lazy, Unsupported, is_one
from tensorforge.te import dtype as dt

aten = torch.ops.aten

RUN = 16  # a sort's runs, insertion-sorted before the merges
SELECT_K = 16  # topk up to this k keeps the k best in one pass; larger k sort
BLOCK = 8  # elements a selection tests at once for one that enters
CUDA_LINE = 256  # longest line a CUDA thread sorts (its scratch in local memory)

Before = Callable[[te.Expr, te.Expr], te.Expr]


def _order(descending: bool, floats: bool) -> Before:
    """`before(a, b)`: a goes strictly before b (NaN greatest, equal to NaN)."""

    def ascending(a, b):
        return (a < b) | ((b != b) & (a == a)) if floats else a < b

    def descending_(a, b):
        return (a > b) | ((a != a) & (b == b)) if floats else a > b

    return descending_ if descending else ascending


def _key_dtype(dtype: str) -> str:
    if dtype in ("float16", "bfloat16"):
        return "float32"
    return "int32" if dt.is_bool(dtype) else dtype


class _Line:
    """One task's line: its keys read from the source, its results written."""

    def __init__(self, ib, source, lines: Lines, r, key: str):
        self.ib, self.source, self.lines, self.key = ib, source, lines, key
        self.start = ib.let("start", lines.start(r))
        self.r = r
        self.step = 1 if is_one(lines.inner) else wide(lines.inner)
        self.m = lines.extent

    def at(self, j) -> te.Expr:
        v = self.source[self.start + j * self.step]
        return v if v.dtype == self.key else v.astype(self.key)

    def clamped_at(self, j) -> te.Expr:  # (a condition's read: both sides of `&` are read)
        return self.at(te.min(te.max(j, 0), wide(self.m) - 1))

    def write(self, outs, t, value, position, extent) -> None:
        out = self.lines.start(self.r, extent) + t * self.step
        values, indices = outs
        values[out] = value if value.dtype == values.dtype else value.astype(values.dtype)
        indices[out] = wide(position)

    def write_sorted(self, outs, sorted_: _Sorted, extent) -> None:
        """The first `extent` elements of the sorted line."""
        with self.ib.for_range(0, wide(extent), name="t") as t:
            place = self.ib.let("place", sorted_.at(t))
            self.write(outs, t, sorted_.keys[place], sorted_.positions[place], extent)


def _local(ib, dtype: str, value, name: str):
    """A variable of the task (a cell in registers) holding `value`."""
    cell = ib.allocate(dtype, 1, name=name, scope="local")
    value = value if isinstance(value, te.Expr) else te.const(value, dtype)
    cell[0] = value if value.dtype == dtype else value.astype(dtype)
    return cell


class _Sorted:
    """A line sorted in scratch: `keys` and `positions`, the `count` ordered elements first
    (sorted by value), the NaNs after them in line order; `at(t)` is the place of the t-th
    element in the line's order (ascending: NaNs last; descending: first)."""

    def __init__(self, keys, positions, count, m, descending: bool):
        self.keys, self.positions, self.count = keys, positions, count
        self.m, self.descending = wide(m), descending

    def at(self, t) -> te.Expr:
        if not self.descending:
            return t
        nans = self.m - self.count
        return te.if_then_else(t < nans, self.count + t, t - nans)


class _Padded:
    """Scratch of a line with an element before it and one after: a read one past either end
    (a merge's, an insertion's, whose result its condition drops) stays in the scratch."""

    def __init__(self, ib, dtype: str, m, name: str):
        self.cells = ib.allocate(dtype, m + 2, name=name, scope="local")
        zero = te.const(0, dtype)
        self.cells[0], self.cells[wide(m) + 1] = zero, zero

    def __getitem__(self, position) -> te.Expr:
        return self.cells[position + 1]

    def __setitem__(self, position, value) -> None:
        self.cells[position + 1] = value


def _set_apart(ib, line: _Line, position: str):
    """(keys, positions, count): scratch of the line with its ordered elements first (in line
    order, `count` of them), then its NaNs (so that the sort compares with `<` alone)."""
    m = wide(line.m)
    keys = _Padded(ib, line.key, line.m, "keys")
    positions = _Padded(ib, position, line.m, "positions")
    if not dt.is_float(line.key):
        with ib.for_range(0, m, name="j") as j:
            keys[j], positions[j] = line.at(j), j.astype(position)
        return keys, positions, m
    count = _local(ib, "int64", 0, "count")
    with ib.for_range(0, m, name="j") as j:
        v = ib.let("v", line.at(j))
        with ib.if_scope(v == v):
            keys[count[0]], positions[count[0]] = v, j.astype(position)
            count[0] = count[0] + 1
    ordered = ib.let("ordered", count[0])
    with ib.if_scope(ordered < m):  # (a line with NaNs: those after)
        with ib.for_range(0, m, name="j") as j:
            v = ib.let("v", line.at(j))
            with ib.if_scope(v != v):
                keys[count[0]], positions[count[0]] = v, j.astype(position)
                count[0] = count[0] + 1
    return keys, positions, ordered


def _sort_line(ib, line: _Line, descending: bool, position: str) -> _Sorted:
    """The line sorted in scratch (stable)."""
    keys, positions, count = _set_apart(ib, line, position)
    before = (lambda a, b: a > b) if descending else (lambda a, b: a < b)
    with ib.for_range(0, count, name="j") as j:  # runs of RUN, each insertion-sorted
        v, at = ib.let("v", keys[j]), ib.let("at", positions[j])
        p = _local(ib, "int64", j, "p")
        first = j - j % RUN
        with ib.while_loop((p[0] > first) & before(v, keys[p[0] - 1])):
            keys[p[0]], positions[p[0]] = keys[p[0] - 1], positions[p[0] - 1]
            p[0] = p[0] - 1
        keys[p[0]], positions[p[0]] = v, at
    sorted_ = _Sorted(keys, positions, count, line.m, descending)
    if isinstance(line.m, int) and line.m <= RUN:
        return sorted_
    other_keys = _Padded(ib, line.key, line.m, "other_keys")
    other_positions = _Padded(ib, position, line.m, "other_positions")
    width = _local(ib, "int64", RUN, "width")
    with ib.while_loop(width[0] < count):  # two passes a turn: the line back in `keys`
        _merge_pass(ib, (keys, positions), (other_keys, other_positions), width[0], count, before)
        width[0] = width[0] * 2
        _merge_pass(ib, (other_keys, other_positions), (keys, positions), width[0], count, before)
        width[0] = width[0] * 2
    return sorted_


def _merge_pass(ib, source, target, width, count, before: Before) -> None:
    """Each pair of neighbouring runs of `width` in `source`'s first `count` merged into
    `target` (a run without a neighbour copied), from both ends at once: the smallest forward
    and the largest backward, two chains of loads and compares side by side; branch-free, a
    select an element. Stable: forward the right element goes first only where it is strictly
    before the left one, backward the left one last only where it is strictly after."""
    keys, positions = source
    out_keys, out_positions = target
    pairs = (count + 2 * width - 1) // (2 * width)
    with ib.for_range(0, pairs, name="s") as s:
        low = ib.let("low", s * 2 * width)
        middle = ib.let("middle", te.min(low + width, count))
        high = ib.let("high", te.min(low + 2 * width, count))
        i, j = _local(ib, "int64", low, "i"), _local(ib, "int64", middle, "j")
        back_i = _local(ib, "int64", middle - 1, "back_i")
        back_j = _local(ib, "int64", high - 1, "back_j")

        def forward(t) -> None:
            a, b = ib.let("a", keys[i[0]]), ib.let("b", keys[j[0]])
            right = ib.let("right", (j[0] < high) & ((i[0] >= middle) | before(b, a)))
            out_keys[t] = te.if_then_else(right, b, a)
            out_positions[t] = te.if_then_else(right, positions[j[0]], positions[i[0]])
            step = right.astype("int64")
            j[0], i[0] = j[0] + step, i[0] + (1 - step)

        def backward(t) -> None:
            a, b = ib.let("a", keys[back_i[0]]), ib.let("b", keys[back_j[0]])
            left = ib.let("left", (back_i[0] >= low) & ((back_j[0] < middle) | before(b, a)))
            out_keys[t] = te.if_then_else(left, a, b)
            out_positions[t] = te.if_then_else(left, positions[back_i[0]], positions[back_j[0]])
            step = left.astype("int64")
            back_i[0], back_j[0] = back_i[0] - step, back_j[0] - (1 - step)

        half = ib.let("half", (high - low) // 2)
        with ib.for_range(0, half, name="q") as q:
            forward(low + q)
            backward(high - 1 - q)
        with ib.if_scope((high - low) % 2 == 1):
            forward(low + half)


def _select_line(ib, line: _Line, k: int, before: Before, position: str):
    """(best, positions): the line's k first elements in `before`'s order, one pass."""
    m = line.m
    best = ib.allocate(line.key, k, name="best", scope="local")
    positions = ib.allocate(position, k, name="positions", scope="local")

    def enter(v, j, slot) -> None:  # v into the sorted best[:slot + 1], slot's element dropped
        p = _local(ib, "int64", slot, "p")
        with ib.while_loop((p[0] > 0) & before(v, best[te.max(p[0] - 1, 0)])):
            best[p[0]], positions[p[0]] = best[p[0] - 1], positions[p[0] - 1]
            p[0] = p[0] - 1
        best[p[0]], positions[p[0]] = v, j.astype(position)

    with ib.for_range(0, k, name="j") as j:
        enter(ib.let("v", line.at(j)), j, j)
    j = _local(ib, "int64", k, "j")
    with ib.while_loop(j[0] < wide(m)):
        worst = ib.let("worst", best[k - 1])
        if not (isinstance(m, int) and m < k + BLOCK):
            first = te.min(j[0], wide(m) - BLOCK)
            block = [before(line.clamped_at(first + c), worst) for c in range(BLOCK)]
            with ib.while_loop((j[0] + BLOCK <= wide(m)) & ~_any(block)):
                j[0] = j[0] + BLOCK
        with ib.while_loop((j[0] < wide(m)) & ~before(line.clamped_at(j[0]), worst)):
            j[0] = j[0] + 1
        with ib.if_scope(j[0] < wide(m)):
            enter(ib.let("v", line.at(j[0])), j[0], k - 1)
            j[0] = j[0] + 1
    return best, positions


def _any(terms: list) -> te.Expr:
    while len(terms) > 1:
        terms = [a | b for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) // 2 * 2 :]
    return terms[0]


def _select_kth(ib, line: _Line, kth, position: str):
    """(keys, positions, count): scratch of the line (_set_apart's) whose kth element (0-based,
    ascending; NaNs last, in line order) is where the sorted line has it: Wirth's quickselect
    of the ordered elements (Hoare's partition, then the side holding kth), with `<` alone."""
    keys, positions, count = _set_apart(ib, line, position)
    low, high = _local(ib, "int64", 0, "low"), _local(ib, "int64", count - 1, "high")
    i, j = _local(ib, "int64", 0, "i"), _local(ib, "int64", 0, "j")
    with ib.while_loop((low[0] < high[0]) & (kth < count)):
        # the pivot: the median of the part's ends and middle (one of its elements, as the
        # partition's inner loops need to stop); the element at kth took 20% longer (4096)
        a, b, c = keys[low[0]], keys[(low[0] + high[0]) // 2], keys[high[0]]
        pivot = ib.let("pivot", te.max(te.min(a, b), te.min(te.max(a, b), c)))
        i[0], j[0] = low[0], high[0]
        with ib.while_loop(i[0] <= j[0]):
            # (neither runs past the part: an element not before the pivot stops each)
            with ib.while_loop(keys[i[0]] < pivot):
                i[0] = i[0] + 1
            with ib.while_loop(pivot < keys[j[0]]):
                j[0] = j[0] - 1
            with ib.if_scope(i[0] <= j[0]):
                a, pa = ib.let("a", keys[i[0]]), ib.let("pa", positions[i[0]])
                keys[i[0]], positions[i[0]] = keys[j[0]], positions[j[0]]
                keys[j[0]], positions[j[0]] = a, pa
                i[0], j[0] = i[0] + 1, j[0] - 1
        with ib.if_scope(j[0] < kth):
            low[0] = i[0]
        with ib.if_scope(kth < i[0]):
            high[0] = j[0]
    return keys, positions, count


# -- the operators -------------------------------------------------------------------------

# On the CPU, 1 thread (Zen 4), float32 (benchmarks/sorts.py, eager ms against the kernels'):
# sort of 64 x 4096 15.5 against 9.9, of 4096 x 50 5.4 against 3.7, of 4096 x 16 0.91 against
# 0.92; topk 5 of 64 x 4096 0.33 against 0.29, 16 of 16 x 65536 1.27 against 1.03, 100 of 64 x
# 4096 2.4 against 12.4 (a sort: eager's partial sort does less); median of 64 x 4096 4.1
# against 3.3, of 4096 x 16 1.07 against 1.10, of a whole 1024 x 1024 9.7 against 11.6 (one
# line: one thread either way; eager's nth_element partitions faster). Those that lose stay
# eager there: topk past SELECT_K, the whole tensor's median, lines of at most SHORT_LINE.
SHORT_LINE = 16


def _short_lines(node) -> bool:
    """Are the node's lines static and at most SHORT_LINE long?"""
    shape = tuple(node.args[0].meta["val"].shape)
    position = DIM_POSITION[node.target]
    dim = node.args[position] if position and len(node.args) > position else None
    dim = node.kwargs.get("dim", -1) if dim is None else dim
    m = shape[dim % len(shape)] if shape else 1
    return isinstance(m, int) and m <= SHORT_LINE


DIM_POSITION = {  # where the dimension is among the positional arguments (sort.stable: none)
    aten.sort.default: 1,
    aten.sort.stable: None,
    aten.topk.default: 2,
    aten.kthvalue.default: 2,
    aten.median.dim: 1,
}


def _large_k(node) -> bool:
    return node.args[1] > SELECT_K or _short_lines(node)


eager_on_cpu(aten.median.default)
eager_on_cpu(aten.topk.default, when=_large_k, what=f"of k past {SELECT_K} or short lines")
eager_on_cpu(
    aten.sort.default,
    aten.sort.stable,
    aten.kthvalue.default,
    aten.median.dim,
    when=_short_lines,
    what=f"of lines of at most {SHORT_LINE}",
)


def _lines_of(ctx, x: Lazy, dim: int, what: str) -> tuple[Lazy, Lines, int]:
    x = ctx.no_anchor(x)
    if x.ndim == 0:
        raise Unsupported(f"{what} of a 0-d tensor")
    if any(isinstance(s, int) and s == 0 for s in x.shape):
        raise Unsupported(f"{what} of an empty tensor")
    if x.dtype not in _ORDERED:
        raise Unsupported(f"{what} of {x.dtype}")
    d = dim % x.ndim
    lines = Lines(x.shape, d)
    if ctx.target.kind == "cuda" and not (
        isinstance(lines.extent, int) and lines.extent <= CUDA_LINE
    ):
        raise Unsupported(f"{what} of lines longer than {CUDA_LINE} on a GPU")
    return x, lines, d


_ORDERED = (
    "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool"
)  # fmt: skip


def _position_dtype(m) -> str:
    return "int32" if isinstance(m, int) and m < 2**31 else "int64"


def _kernel(ctx, node, x: Lazy, lines: Lines, shape: tuple, per_line, view=None):
    """(values, indices) in buffers of `shape`: `per_line(ib, line, outs)` for each line of x."""
    cuda = ctx.target.kind == "cuda"
    key = _key_dtype(x.dtype)

    def program(ib, ins, outs):
        with each(ib, lines.count, cuda, "r", parallel=not is_one(lines.count)) as r:
            per_line(ib, _Line(ib, ins[0], lines, r, key), outs)

    return extern_kernel_outputs(ctx, node, [x], shape, (x.dtype, "int64"), program, view)


@lowers(aten.sort.default, aten.sort.stable)
def sort(ctx, node, x, *args, stable=False, dim=-1, descending=False):
    if node.target is aten.sort.default:  # (self, dim=-1, descending=False)
        dim = args[0] if len(args) > 0 else dim
        descending = args[1] if len(args) > 1 else descending
    x, lines, d = _lines_of(ctx, x, dim, "sort")
    position = _position_dtype(lines.extent)

    def per_line(ib, line, outs):
        line.write_sorted(outs, _sort_line(ib, line, bool(descending), position), line.m)

    return _kernel(ctx, node, x, lines, x.shape, per_line)


@lowers(aten.topk.default)
def topk(ctx, node, x, k, dim=-1, largest=True, sorted=True):
    x, lines, d = _lines_of(ctx, x, dim, "topk")
    if not isinstance(k, int):
        raise Unsupported("topk of a run-time k")
    m = lines.extent
    if k == 0 or (isinstance(m, int) and k > m):
        raise Unsupported(f"topk of k = {k} in lines of {m}")  # (eager's error, or nothing)
    before = _order(bool(largest), dt.is_float(x.dtype))
    position = _position_dtype(m)
    selects = k <= SELECT_K

    def per_line(ib, line, outs):
        if not selects:
            line.write_sorted(outs, _sort_line(ib, line, bool(largest), position), k)
            return
        best, positions = _select_line(ib, line, k, before, position)
        with ib.for_range(0, k, name="t") as t:
            line.write(outs, t, best[t], positions[t], k)

    return _kernel(ctx, node, x, lines, _along(x, d, k), per_line)


@lowers(aten.mode.default)
def mode(ctx, node, x, dim=-1, keepdim=False):
    """The most frequent value of each line (the smallest of those as frequent) and its last
    position: the line sorted, then its runs of equal values counted (NaNs each their own;
    torch's order of NaNs is unspecified there)."""
    x, lines, d = _lines_of(ctx, x, dim, "mode")
    position = _position_dtype(lines.extent)

    def per_line(ib, line, outs):
        sorted_ = _sort_line(ib, line, False, position)
        keys, positions = sorted_.keys, sorted_.positions
        best_count, best_end = (
            _local(ib, "int64", 0, "best_count"),
            _local(ib, "int64", 0, "best_end"),
        )
        run = _local(ib, "int64", 0, "run")
        with ib.for_range(0, wide(line.m), name="t") as t:
            same = (t > 0) & (keys[t] == keys[t - 1])  # (keys[-1]: the scratch's padding)
            run[0] = te.if_then_else(same, run[0] + 1, te.const(1, "int64"))
            with ib.if_scope(run[0] > best_count[0]):  # (an equal count later: a larger value)
                best_count[0], best_end[0] = run[0], t
        # (a run's positions rise, the sort being stable: its end holds the last of them)
        end = ib.let("end", best_end[0])
        line.write(outs, 0, keys[end], positions[end], 1)

    return _kernel(ctx, node, x, lines, _along(x, d, 1), per_line, _kept(x, d, keepdim))


@lowers(aten.kthvalue.default)
def kthvalue(ctx, node, x, k, dim=-1, keepdim=False):
    x, lines, d = _lines_of(ctx, x, dim, "kthvalue")
    m = lines.extent
    if not isinstance(k, int) or not (isinstance(m, int) and 1 <= k <= m):
        raise Unsupported(f"kthvalue of k = {k} in lines of {m}")  # (eager raises)
    return _kth(ctx, node, x, lines, _along(x, d, 1), k - 1, False, _kept(x, d, keepdim))


@lowers(aten.median.dim)
def median_dim(ctx, node, x, dim, keepdim=False):
    x, lines, d = _lines_of(ctx, x, dim, "median")
    kth = (wide(lines.extent) - 1) // 2
    return _kth(ctx, node, x, lines, _along(x, d, 1), kth, True, _kept(x, d, keepdim))


def _along(x: Lazy, d: int, extent) -> tuple:
    return (*x.shape[:d], extent, *x.shape[d + 1 :])


def _kept(x: Lazy, d: int, keepdim: bool) -> tuple | None:
    """The shape a reduced dimension's results are read in (None: as written, of extent 1)."""
    return None if keepdim else (*x.shape[:d], *x.shape[d + 1 :])


@lowers(aten.median.default)
def median(ctx, node, x):
    """The whole tensor's median: its buffer (contiguous) read as one line."""
    x = ctx.no_anchor(x)
    if x.ndim == 0:
        raise Unsupported("median of a 0-d tensor")
    whole, _, _ = _lines_of(ctx, x, 0, "median")
    lines = Lines((numel(whole.shape),), 0)
    if ctx.target.kind == "cuda" and not (
        isinstance(lines.extent, int) and lines.extent <= CUDA_LINE
    ):
        raise Unsupported(f"median of more than {CUDA_LINE} elements on a GPU")
    kth = (wide(lines.extent) - 1) // 2
    values, _ = _kth(ctx, node, whole, lines, (1,), kth, median=True, view=())
    return values


def _kth(ctx, node, x, lines: Lines, shape: tuple, kth, median: bool, view=None):
    """(values, indices) of the line's kth element (0-based) in ascending order; a median's
    line with a NaN gives its first NaN."""
    position = _position_dtype(lines.extent)

    def per_line(ib, line, outs):
        keys, positions, count = _select_kth(ib, line, kth, position)
        # a median's line with a NaN: its first NaN (the first past the ordered elements)
        place = te.if_then_else(count < wide(line.m), count, kth) if median else kth
        place = ib.let("place", place)
        line.write(outs, 0, keys[place], positions[place], 1)

    return _kernel(ctx, node, x, lines, shape, per_line, view)
