"""Gathers whose lanes sit at constant offsets from one address: a few contiguous loads and a
shuffle instead of one scalar load per lane.

A nearest 2x upsample reads (0, 0, 1, 1, ..., 31, 31) from a row, a pad's left edge reads
(0, 0, 1, ..., 62) (its index clamped into the input), a transposed convolution's read-back
interleaves two rows (0, 4096, 1, 4097, ...). Each is one or two windows of the buffer: every
element of a window lies between two addresses the gather reads, so loading it touches no
memory the gather would not.
"""

from __future__ import annotations

from llvmlite import ir

from tensorforge.codegen.llvm_types import I32, I64, concat, load_vector

MAX_GAP = 8  # elements skipped inside a window before a new window is cheaper


def window_plan(offsets: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """(first offset, element count) of the windows covering `offsets`, or None where loading
    them would not beat a gather: more than max(2, lanes // 4) windows, or more than twice the
    lanes loaded."""
    lanes = len(offsets)
    windows: list[tuple[int, int]] = []
    for offset in sorted(set(offsets)):
        if windows and offset - (windows[-1][0] + windows[-1][1]) < MAX_GAP:
            start = windows[-1][0]
            windows[-1] = (start, offset - start + 1)
        else:
            windows.append((offset, 1))
    loaded = sum(count for _, count in windows)
    if len(windows) > max(2, lanes // 4) or loaded > 2 * lanes:
        return None
    return windows


def load_windows(
    builder: ir.IRBuilder,
    base: ir.Value,
    element: ir.Type,
    align: int,
    offsets: tuple[int, ...],
    windows: list[tuple[int, int]],
    pieces,
) -> ir.Value:
    """The vector whose lane k is the element at `base + offsets[k]`, read window by window
    (each window in `pieces(count)`: (first, count) power-of-two loads) and shuffled once."""
    loads, position = [], {}
    for start, count in windows:
        for first, size in pieces(count):
            ptr = builder.gep(base, [ir.Constant(I64, start + first)], source_etype=element)
            loads.append(load_vector(builder, ptr, element, size, align))
        for k in range(count):
            position[start + k] = len(position)
    whole = concat(builder, loads)
    lanes = [position[offset] for offset in offsets]
    if lanes == list(range(whole.type.count)):
        return whole
    return builder.shuffle_vector(
        whole, ir.Constant(whole.type, None), ir.Constant(ir.VectorType(I32, len(lanes)), lanes)
    )
