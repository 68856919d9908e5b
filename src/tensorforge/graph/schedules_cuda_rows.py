"""CUDA schedules of row operators (softmax, log-softmax, layer norm, reductions along rows
that the epilogue reads back): a block per row, its threads reducing strided parts of the row and
combining across the block (warp shuffles); or, where few long rows were split in chunks
(graph/lower_split_rows.py), blocks along each row that first combine the row's chunk
statistics."""

from __future__ import annotations

from tensorforge import te

ROW_THREADS = 256  # threads of a row's block
ROW_REDUCTION = 64  # a reduction this long along each row runs across a block (is_row_reduction)
BLOCK_REDUCTION = 512  # terms of an output that a block reduces (is_block_reduction)
BLOCK_REDUCTION_OUTPUTS = 1 << 16  # at most this many outputs (a block each)


def schedule_rows(s, out, anchor) -> None:
    """A block per row: each reduction stage reduced across the block's threads (its result in
    shared memory, for every thread), element-wise stages inlined, the epilogue along the row."""
    *rows, j = s[out].op.axis
    length = getattr(j.dom.extent, "value", None)
    if not rows:  # one row (a 1-d softmax): a block axis of one
        row, j = s[out].split(j, nparts=1)
    else:
        row = s[out].fuse(*rows) if len(rows) > 1 else rows[0]
    terms = [
        static_extent(st.op.reduce_axis[0]) for st in anchor.info["stages"] if st.op.reduce_axis
    ]
    if isinstance(length, int) and all(isinstance(t, int) for t in terms):
        length = max([length, *terms])  # a row of 1 output over 512 terms: 128 threads
    threads = ROW_THREADS if not isinstance(length, int) else _row_threads(length)
    jo, ji = s[out].split(j, factor=threads)
    s[out].reorder(row, ji, jo)
    s[out].bind(row, te.thread_axis("blockIdx.x"))
    s[out].bind(ji, te.thread_axis("threadIdx.x"))
    for stage in reversed(anchor.info["stages"]):
        if not stage.op.reduce_axis:  # softmax's exps: recomputed where they are read
            s[stage].compute_inline()
            continue
        s[stage].set_scope("shared")
        s[stage].compute_at(s[out], row)
        (k,) = s[stage].op.reduce_axis
        _, ki = s[stage].split(k, factor=threads)
        s[stage].bind(ki, te.thread_axis("threadIdx.x"))


def schedule_split_rows(s, out, anchor) -> None:
    """A row operator whose rows were split in chunks (lower_split_rows): blocks of
    `row_block` consecutive elements of a row, each combining its row's chunk statistics once
    (reductions over the chunks across the block's threads, in shared memory), then its
    threads along the row, an element each per step (coalesced)."""
    *rows, j = s[out].op.axis
    jo, ji = s[out].split(j, factor=anchor.info["row_block"])
    step, thread = s[out].split(ji, factor=ROW_THREADS)
    block = s[out].fuse(*rows, jo) if rows else jo
    s[out].bind(block, te.thread_axis("blockIdx.x"))
    s[out].bind(thread, te.thread_axis("threadIdx.x"))
    s[out].unroll(step)  # a thread's loads issue together
    for stage in reversed(anchor.info["stages"]):
        s[stage].set_scope("shared")
        s[stage].compute_at(s[out], block)
        (chunk,) = s[stage].op.reduce_axis
        _, lane = s[stage].split(chunk, factor=min(ROW_THREADS, static_extent(chunk)))
        s[stage].bind(lane, te.thread_axis("threadIdx.x"))


def is_row_reduction(out, anchor) -> bool:
    """A reduction along each row of the output, read back by its epilogue (RMSNorm's mean of
    squares: x * rsqrt(mean(x * x) + eps)): a block per row like layer norm's. A thread per
    output ran each row's sum on one thread, 128 threads in all, for LLaMA's 128 x 512 (H200:
    35 and 68 us, against 1.4-1.7 for Inductor's). Rows of at least ROW_REDUCTION terms."""
    if anchor is None or anchor.kind != "reduce" or len(out.op.axis) < 2:
        return False
    shape = [getattr(e, "value", None) for e in out.shape]
    for stage in anchor.info["stages"]:
        if (
            len(stage.op.reduce_axis) != 1
            or (static_extent(stage.op.reduce_axis[0]) or 0) < ROW_REDUCTION
        ):
            return False
        kept = [getattr(e, "value", None) for e in stage.shape]
        if kept not in (shape[:-1], shape[:-1] + [1]):  # a value per row of the output
            return False
    return True


def is_block_reduction(out, anchor) -> bool:
    """Few outputs, each a reduction of many terms over any axes (batch norm's per-channel sums
    over batch and positions, in training and its backward): a block per output. A thread per
    output summed 4 x 56 x 56 terms one after another, 64 threads in all (slow, and its float32
    error grew with the serial sum: ResNet-18's gradients 1.9e-2 from float64's on an H200,
    eager's 3.3e-4)."""
    if anchor is None or anchor.kind != "reduce":
        return False
    outputs = 1
    for extent in out.shape:
        value = getattr(extent, "value", None)
        if not isinstance(value, int):
            return False
        outputs *= value
    if outputs > BLOCK_REDUCTION_OUTPUTS:
        return False
    for stage in anchor.info["stages"]:
        if not stage.op.reduce_axis or [getattr(e, "value", None) for e in stage.shape] != [
            getattr(e, "value", None) for e in out.shape
        ]:
            return False
        terms = 1
        for axis in stage.op.reduce_axis:
            extent = static_extent(axis)
            if extent is None:
                return False
            terms *= extent
        if terms < BLOCK_REDUCTION:
            return False
    return True


def schedule_block_reduction(s, out, anchor) -> None:
    """A block per output (is_block_reduction): each reduction stage's axes fused into one,
    whose terms the block's threads take in turn (consecutive threads, consecutive terms: the
    innermost axis coalesced), then combined across the block (warp shuffles)."""
    axes = s[out].op.axis
    block = s[out].fuse(*axes) if len(axes) > 1 else axes[0] if axes else None
    if block is None:
        block, _ = s[out].split(s[out].op.reduce_axis[0], nparts=1)  # (a 0-d sum)
    terms = max(_terms(stage) for stage in anchor.info["stages"])
    threads = _row_threads(terms)
    for stage in reversed(anchor.info["stages"]):
        if stage.op is not out.op:
            s[stage].set_scope("shared")
            s[stage].compute_at(s[out], block)
        reduce_axes = s[stage].op.reduce_axis
        k = s[stage].fuse(*reduce_axes) if len(reduce_axes) > 1 else reduce_axes[0]
        _, ki = s[stage].split(k, factor=threads)
        s[stage].bind(ki, te.thread_axis("threadIdx.x"))
    s[out].bind(block, te.thread_axis("blockIdx.x"))


def _terms(stage) -> int:
    terms = 1
    for axis in stage.op.reduce_axis:
        terms *= static_extent(axis) or 1
    return terms


def _row_threads(length: int) -> int:
    """Threads per row: a warp for short rows, up to ROW_THREADS, a few elements each."""
    threads = 32
    while threads < ROW_THREADS and threads * 4 < length:
        threads *= 2
    return threads


def static_extent(axis) -> int | None:
    """The axis's extent where it is a constant, else None."""
    value = getattr(axis.dom.extent, "value", None) if axis.dom is not None else None
    return value if isinstance(value, int) else None
