"""CPU memory on transparent huge pages for a compiled graph's weights and intermediates.

A GPT-2 block's weights are 28 MB: on 4 KB pages the matmuls that stream them miss the TLB
(its second level covers about 8 MB), on 2 MB pages they do not. Linux gives huge pages to an
anonymous mapping that asks for them (`madvise(MADV_HUGEPAGE)`, the default "madvise" mode of
/sys/kernel/mm/transparent_hugepage/enabled) over its 2 MB-aligned part; torch's allocator does
not ask (unless THP_MEM_ALLOC_ENABLE=1). Measured, GPT-2 block at 1 thread, min thread time of
each kernel, same process, two graphs of each kind: the four matmuls' sum 11.7 / 12.3 ms on
torch's memory, 10.8 / 9.8 ms with the weights on huge pages (load ~1.7).

TENSORFORGE_HUGE_PAGES=0 turns it off. Elsewhere (no madvise, another OS) torch.empty serves.
"""

from __future__ import annotations

import mmap
import os

import torch

HUGE_PAGE = 2 << 20
# smaller than this, torch's allocator serves: a huge page would be mostly empty
MIN_BYTES = 1 << 20
ALIGN = 64  # each tensor packed into an arena starts on a cache line


def enabled() -> bool:
    return (
        hasattr(mmap, "MADV_HUGEPAGE")
        and hasattr(mmap, "MAP_ANONYMOUS")
        and os.environ.get("TENSORFORGE_HUGE_PAGES", "1") not in ("0", "")
    )


def empty_bytes(nbytes: int) -> torch.Tensor:
    """A uint8 CPU tensor of `nbytes`, starting on a 2 MB boundary of a mapping advised to use
    huge pages where `enabled()` and the size is worth it; else torch.empty's."""
    if nbytes < MIN_BYTES or not enabled():
        return torch.empty(nbytes, dtype=torch.uint8)
    try:
        mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        mapping.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, ValueError):
        return torch.empty(nbytes, dtype=torch.uint8)
    whole = torch.frombuffer(mapping, dtype=torch.uint8)  # keeps the mapping alive
    start = -whole.data_ptr() % HUGE_PAGE
    return whole[start : start + nbytes]


def packed(tensors: dict) -> dict:
    """The same tensors (CPU, contiguous copies) laid one after another in one arena of
    `empty_bytes`: key -> tensor of the same shape, dtype and values."""
    offsets, total = {}, 0
    for key, t in tensors.items():
        offsets[key] = total
        total += -(-max(1, t.numel() * t.element_size()) // ALIGN) * ALIGN
    arena = empty_bytes(total)
    out = {}
    for key, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        view = arena[offsets[key] : offsets[key] + nbytes].view(t.dtype).view(t.shape)
        view.copy_(t)
        out[key] = view
    return out
