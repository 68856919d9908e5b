"""Programs that sort one line of a tensor inside an ir_builder kernel (lower_sort.py's
operators, a task a line): the line's scratch copy, a stable merge sort of it, a one-pass
selection of its k first elements (two kinds), a quickselect of its kth.

The order is torch's: NaN greatest (last ascending, first descending), -0.0 equal to 0.0;
half types compare as float32, bools as integers. Sorts and quickselects set a line's NaNs
apart first (its ordered elements first, in line order, then its NaNs), so that they compare
with `<` alone.
- sort_line: insertion sort in runs of RUN, then bottom-up merges, two scratch copies taking
  turns, each pair of runs merged from both ends at once (two chains of loads and compares
  side by side, a select an element); a merge takes the right element first only where it is
  strictly before the left one, so the sort is stable.
- select_line: one pass keeping the k first in order; an element enters only where it is
  strictly before the k-th, tested BLOCK elements at a time (mostly none enters).
- gather_select_line (large k): one pass gathering the elements strictly before a threshold
  (the k-th of those gathered), a block at a time, branch-free; when the scratch fills, a
  quickselect keeps k and tightens the threshold; the k kept then sorted.
- select_kth: Wirth's quickselect (Hoare's partition, then the side holding kth), its pivot
  the median of the part's ends and middle.
"""

from __future__ import annotations

from collections.abc import Callable

from tensorforge import te
from tensorforge.graph.extern_kernels import Lines, wide
from tensorforge.graph.values import is_one
from tensorforge.te import dtype as dt

RUN = 16  # a sort's runs, insertion-sorted before the merges
BLOCK = 8  # elements a selection tests at once for one that enters
GATHER = 2  # a large-k selection gathers up to GATHER * k (+ 64) elements, then keeps k

Before = Callable[[te.Expr, te.Expr], te.Expr]


def order(descending: bool, floats: bool) -> Before:
    """`before(a, b)`: a goes strictly before b (NaN greatest, equal to NaN)."""

    def ascending(a, b):
        return (a < b) | ((b != b) & (a == a)) if floats else a < b

    def descending_(a, b):
        return (a > b) | ((a != a) & (b == b)) if floats else a > b

    return descending_ if descending else ascending


def key_dtype(dtype: str) -> str:
    if dtype in ("float16", "bfloat16"):
        return "float32"
    return "int32" if dt.is_bool(dtype) else dtype


class Line:
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

    def write_sorted(self, outs, sorted_: Sorted, extent) -> None:
        """The first `extent` elements of the sorted line."""
        with self.ib.for_range(0, wide(extent), name="t") as t:
            place = self.ib.let("place", sorted_.at(t))
            self.write(outs, t, sorted_.keys[place], sorted_.positions[place], extent)


def local(ib, dtype: str, value, name: str):
    """A variable of the task (a cell in registers) holding `value`."""
    cell = ib.allocate(dtype, 1, name=name, scope="local")
    value = value if isinstance(value, te.Expr) else te.const(value, dtype)
    cell[0] = value if value.dtype == dtype else value.astype(dtype)
    return cell


class Sorted:
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


class Padded:
    """Scratch of a line with an element before it and one after: a read one past either end
    (a merge's, an insertion's, whose result its condition drops) stays in the scratch."""

    def __init__(self, ib, dtype: str, m, name: str):
        self.cells = ib.allocate(dtype, m + 2, name=name, scope="local")
        self.dtype = dtype
        zero = te.const(0, dtype)
        self.cells[0], self.cells[wide(m) + 1] = zero, zero

    def __getitem__(self, position) -> te.Expr:
        return self.cells[position + 1]

    def __setitem__(self, position, value) -> None:
        self.cells[position + 1] = value


def set_apart(ib, line: Line, position: str):
    """(keys, positions, count): scratch of the line with its ordered elements first (in line
    order, `count` of them), then its NaNs (so that the sort compares with `<` alone)."""
    m = wide(line.m)
    keys = Padded(ib, line.key, line.m, "keys")
    positions = Padded(ib, position, line.m, "positions")
    if not dt.is_float(line.key):
        with ib.for_range(0, m, name="j") as j:
            keys[j], positions[j] = line.at(j), j.astype(position)
        return keys, positions, m
    count = local(ib, "int64", 0, "count")
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


def sort_line(ib, line: Line, descending: bool, position: str) -> Sorted:
    """The line sorted in scratch (stable)."""
    keys, positions, count = set_apart(ib, line, position)
    before = (lambda a, b: a > b) if descending else (lambda a, b: a < b)
    sort_scratch(ib, (keys, positions), count, line.m, before)
    return Sorted(keys, positions, count, line.m, descending)


def sort_scratch(ib, scratch: tuple[Padded, Padded], count, size, before: Before) -> None:
    """Sort (stable) the first `count` of scratch (keys, positions) holding `size` elements:
    insertion sort in runs of RUN, then merges taking turns with a second scratch."""
    keys, positions = scratch
    with ib.for_range(0, count, name="j") as j:  # runs of RUN, each insertion-sorted
        v, at = ib.let("v", keys[j]), ib.let("at", positions[j])
        p = local(ib, "int64", j, "p")
        first = j - j % RUN
        with ib.while_loop((p[0] > first) & before(v, keys[p[0] - 1])):
            keys[p[0]], positions[p[0]] = keys[p[0] - 1], positions[p[0] - 1]
            p[0] = p[0] - 1
        keys[p[0]], positions[p[0]] = v, at
    if isinstance(size, int) and size <= RUN:
        return
    other_keys = Padded(ib, keys.dtype, size, "other_keys")
    other_positions = Padded(ib, positions.dtype, size, "other_positions")
    width = local(ib, "int64", RUN, "width")
    with ib.while_loop(width[0] < count):  # two passes a turn: the line back in `keys`
        _merge_pass(ib, (keys, positions), (other_keys, other_positions), width[0], count, before)
        width[0] = width[0] * 2
        _merge_pass(ib, (other_keys, other_positions), (keys, positions), width[0], count, before)
        width[0] = width[0] * 2


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
        i, j = local(ib, "int64", low, "i"), local(ib, "int64", middle, "j")
        back_i = local(ib, "int64", middle - 1, "back_i")
        back_j = local(ib, "int64", high - 1, "back_j")

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


def select_line(ib, line: Line, k: int, before: Before, position: str):
    """(best, positions): the line's k first elements in `before`'s order, one pass keeping
    them sorted (an element enters by insertion: for small k)."""
    best = ib.allocate(line.key, k, name="best", scope="local")
    positions = ib.allocate(position, k, name="positions", scope="local")

    def enter(v, j, slot) -> None:  # v into the sorted best[:slot + 1], slot's element dropped
        p = local(ib, "int64", slot, "p")
        with ib.while_loop((p[0] > 0) & before(v, best[te.max(p[0] - 1, 0)])):
            best[p[0]], positions[p[0]] = best[p[0] - 1], positions[p[0] - 1]
            p[0] = p[0] - 1
        best[p[0]], positions[p[0]] = v, j.astype(position)

    with ib.for_range(0, k, name="j") as j:
        enter(ib.let("v", line.at(j)), j, j)
    _scan(ib, line, k, before, lambda: best[k - 1], lambda v, j: enter(v, j, k - 1))
    return best, positions


def gather_select_line(ib, line: Line, k: int, before: Before, position: str):
    """(keys, positions): scratch whose first k are the line's k first elements in `before`'s
    order, sorted (for large k). One pass gathers, after the first k, the elements strictly
    before a threshold (the k-th of those gathered so far) into scratch of GATHER * k + 64;
    when it fills, a quickselect keeps its k first and the threshold tightens. The elements
    are tested BLOCK at a time: a block where one passes is stored whole, branch-free, each
    element counted where it passes (a heap took 85 ns an entry, as slow as eager: 100 of
    4096; a branch an element lost to eager on lines of 256, where many enter)."""
    m = line.m
    full = GATHER * k + 64
    if isinstance(m, int):
        full = min(full, m)
    keys = Padded(ib, line.key, full + BLOCK, "keys")
    positions = Padded(ib, position, full + BLOCK, "positions")
    with ib.for_range(0, wide(k), name="j") as j:
        keys[j], positions[j] = line.at(j), j.astype(position)
    threshold = local(ib, line.key, keys[0], "threshold")  # the last of the first k
    with ib.for_range(1, wide(k), name="j") as j:
        last = ib.let("last", threshold[0])
        threshold[0] = te.if_then_else(before(last, keys[j]), keys[j], last)
    n = local(ib, "int64", k, "n")

    def keep_k_first() -> None:
        quickselect(ib, (keys, positions), n[0], k - 1, before)
        threshold[0], n[0] = keys[k - 1], te.const(k, "int64")

    def gather(j, worst) -> None:  # the element stored, kept where it passes
        v = ib.let("v", line.at(j))
        keys[n[0]], positions[n[0]] = v, j.astype(position)
        n[0] = n[0] + before(v, worst).astype("int64")

    blocks = (wide(m) - k) // BLOCK
    with ib.for_range(0, blocks, name="b") as b:
        first = ib.let("first", k + b * BLOCK)
        worst = ib.let("worst", threshold[0])
        with ib.if_scope(_any([before(line.at(first + c), worst) for c in range(BLOCK)])):
            for c in range(BLOCK):
                gather(first + c, worst)
            with ib.if_scope(n[0] >= full):
                keep_k_first()
    with ib.for_range(k + blocks * BLOCK, wide(m), name="j") as j:  # the tail
        gather(j, threshold[0])
    with ib.if_scope(n[0] > k):
        keep_k_first()
    sort_scratch(ib, (keys, positions), k, k, before)
    return keys, positions


def quickselect(ib, scratch: tuple[Padded, Padded], count, kth, before: Before) -> None:
    """Reorder the first `count` of scratch (keys, positions) so that its kth (0-based) in
    `before`'s order is at kth, those before it or equal below, the rest above: Wirth's
    quickselect (Hoare's partition, then the side holding kth), its pivot the median of the
    part's ends and middle (one of its elements, which stops the partition's inner loops)."""
    keys, positions = scratch
    low, high = local(ib, "int64", 0, "low"), local(ib, "int64", count - 1, "high")
    i, j = local(ib, "int64", 0, "i"), local(ib, "int64", 0, "j")
    with ib.while_loop(low[0] < high[0]):
        a = ib.let("a", keys[low[0]])
        b = ib.let("b", keys[(low[0] + high[0]) // 2])
        c = ib.let("c", keys[high[0]])
        low_ab, high_ab = te.if_then_else(before(b, a), b, a), te.if_then_else(before(b, a), a, b)
        pivot = ib.let(
            "pivot",
            te.if_then_else(
                before(c, low_ab), low_ab, te.if_then_else(before(c, high_ab), c, high_ab)
            ),
        )
        i[0], j[0] = low[0], high[0]
        with ib.while_loop(i[0] <= j[0]):
            with ib.while_loop(before(keys[i[0]], pivot)):
                i[0] = i[0] + 1
            with ib.while_loop(before(pivot, keys[j[0]])):
                j[0] = j[0] - 1
            with ib.if_scope(i[0] <= j[0]):
                v, at = ib.let("v", keys[i[0]]), ib.let("at", positions[i[0]])
                keys[i[0]], positions[i[0]] = keys[j[0]], positions[j[0]]
                keys[j[0]], positions[j[0]] = v, at
                i[0], j[0] = i[0] + 1, j[0] - 1
        with ib.if_scope(j[0] < kth):
            low[0] = i[0]
        with ib.if_scope(kth < i[0]):
            high[0] = j[0]


def _scan(ib, line: Line, k: int, before: Before, last, enter) -> None:
    """For each element of the line past its first k strictly before `last()` (the k-th kept):
    `enter(v, j)`; the elements are tested BLOCK at a time (mostly none enters)."""
    m = line.m
    j = local(ib, "int64", k, "j")
    with ib.while_loop(j[0] < wide(m)):
        worst = ib.let("worst", last())
        if not (isinstance(m, int) and m < k + BLOCK):
            first = te.min(j[0], wide(m) - BLOCK)
            block = [before(line.clamped_at(first + c), worst) for c in range(BLOCK)]
            with ib.while_loop((j[0] + BLOCK <= wide(m)) & ~_any(block)):
                j[0] = j[0] + BLOCK
        with ib.while_loop((j[0] < wide(m)) & ~before(line.clamped_at(j[0]), worst)):
            j[0] = j[0] + 1
        with ib.if_scope(j[0] < wide(m)):
            enter(ib.let("v", line.at(j[0])), j[0])
            j[0] = j[0] + 1


def _any(terms: list) -> te.Expr:
    while len(terms) > 1:
        terms = [a | b for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) // 2 * 2 :]
    return terms[0]


def select_kth(ib, line: Line, kth, position: str):
    """(keys, positions, count): scratch of the line (set_apart's) whose kth element (0-based,
    ascending; NaNs last, in line order) is where the sorted line has it: Wirth's quickselect
    of the ordered elements (Hoare's partition, then the side holding kth), with `<` alone.
    `kth` may be a function of the count of ordered elements (a nanmedian's middle)."""
    keys, positions, count = set_apart(ib, line, position)
    if callable(kth):
        kth = ib.let("kth", kth(count))
    low, high = local(ib, "int64", 0, "low"), local(ib, "int64", count - 1, "high")
    i, j = local(ib, "int64", 0, "i"), local(ib, "int64", 0, "j")
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
