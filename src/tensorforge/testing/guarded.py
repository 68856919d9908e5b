"""Arrays that sit against a PROT_NONE guard page, so an out-of-bounds access faults loudly.

`guarded_empty(shape, dtype)` maps fresh pages for one array and makes the page right after its
data inaccessible (`side="end"`; with `side="start"` the page right before it, to catch accesses
below index 0). A kernel that reads or writes one element past the array then dies with SIGSEGV
instead of passing by luck, so run such calls in a child process (`tensorforge.testing.fuzz_run`).

The data's start keeps `align`-byte alignment (64 by default), which leaves a gap of under
`align` bytes between the data and the guard page; every byte of the mapping that is not data
is filled with a sentinel pattern, and `check()` says if a kernel wrote there. Outputs start
filled with NaN (floats) or a sentinel value (integers), so an element left unwritten fails the
comparison. Pass `align=dtype.itemsize` to put the data flush against the guard page.
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Sequence

import numpy as np

PAGE = mmap.PAGESIZE
SENTINEL_BYTE = 0xA5  # 0xA5A5A5A5 as a float32 is -2.9e-16: no kernel writes that by accident
INT_FILL = -0x5A5A5A5B  # integer outputs start as this (truncated to the dtype)
_PROT_NONE = 0

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int


class GuardError(AssertionError):
    """A kernel wrote outside an array: into the sentinel bytes beside it, or into an input."""


class GuardedArray:
    """One numpy array (`.array`) in its own mapping, with a guard page on one side."""

    def __init__(
        self, shape: Sequence[int], dtype: str, side: str = "end", align: int = 64, name: str = ""
    ):
        if side not in ("end", "start"):
            raise ValueError(f"guarded array: side must be 'end' or 'start', not {side!r}")
        dtype = np.dtype(dtype)
        if align < dtype.itemsize or PAGE % align or align % dtype.itemsize:
            raise ValueError(
                f"guarded array: align={align} must divide the page and be a multiple of the element size"
            )
        self.shape, self.dtype, self.side, self.name = (
            tuple(int(d) for d in shape),
            dtype,
            side,
            name,
        )
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * dtype.itemsize
        padded = -(-self.nbytes // align) * align
        data_pages = max(1, -(-padded // PAGE)) * PAGE
        self._map = mmap.mmap(-1, data_pages + PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        everything = np.frombuffer(self._map, dtype=np.uint8)
        base = everything.ctypes.data
        if side == "end":  # [sentinel | data | sentinel gap < align][guard page]
            self.offset, guard = data_pages - padded, base + data_pages
            self._accessible = (0, data_pages)
        else:  # [guard page][data | sentinel up to the page end]
            self.offset, guard = PAGE, base
            self._accessible = (PAGE, PAGE + data_pages)
        lo, hi = self._accessible
        everything[lo:hi] = SENTINEL_BYTE
        if _libc.mprotect(ctypes.c_void_p(guard), PAGE, _PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect of the guard page failed")
        self._bytes = everything
        self.array = (
            everything[self.offset : self.offset + self.nbytes].view(dtype).reshape(self.shape)
        )
        self._snapshot: np.ndarray | None = None

    @property
    def address(self) -> int:
        return self._bytes.ctypes.data + self.offset

    def fill_unwritten(self) -> GuardedArray:
        """NaN for floats, a sentinel for integers and bools: what an unwritten element reads as."""
        if self.dtype.kind in "fc":
            self.array.fill(np.nan)
        elif self.dtype.kind == "b":
            self.array.view(np.uint8).fill(SENTINEL_BYTE)
        else:
            self.array.fill(np.array(INT_FILL).astype(self.dtype))
        return self

    def freeze(self) -> GuardedArray:
        """Remember the data now: `check()` then also says if a kernel changed it (an input)."""
        self._snapshot = self.array.copy()
        return self

    def problems(self) -> list[str]:
        """What a kernel broke: sentinel bytes beside the data, or a frozen input's values."""
        out = []
        lo, hi = self._accessible
        label = f"'{self.name}'" if self.name else "the array"
        for start, stop, where in (
            (lo, self.offset, "before"),
            (self.offset + self.nbytes, hi, "after"),
        ):
            region = self._bytes[start:stop]
            bad = np.flatnonzero(region != SENTINEL_BYTE)
            if bad.size:
                first = start + int(bad[0]) - self.offset
                out.append(
                    f"{bad.size} sentinel byte(s) {where} {label} were overwritten "
                    f"(first at byte offset {first} from its start, size {self.nbytes} bytes)"
                )
        if self._snapshot is not None and not _same(self._snapshot, self.array):
            changed = int(np.count_nonzero(~_equal_mask(self._snapshot, self.array)))
            out.append(f"input {label} was modified by the kernel ({changed} element(s) changed)")
        return out

    def check(self) -> None:
        """Raise GuardError if the kernel wrote outside the array or into a frozen input."""
        found = self.problems()
        if found:
            raise GuardError("; ".join(found))


def _equal_mask(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "fc":
        return (a == b) | (np.isnan(a) & np.isnan(b))
    return a == b


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(_equal_mask(a, b)))


def guarded_empty(
    shape: Sequence[int],
    dtype: str = "float32",
    *,
    side: str = "end",
    align: int = 64,
    name: str = "",
) -> GuardedArray:
    """An output array against a guard page, pre-filled with NaN / a sentinel."""
    return GuardedArray(shape, dtype, side, align, name).fill_unwritten()


def guarded_copy(
    values: np.ndarray, *, side: str = "end", align: int = 64, name: str = ""
) -> GuardedArray:
    """An input array against a guard page holding `values`; `check()` also says if it changed."""
    values = np.asarray(values)
    g = GuardedArray(values.shape, values.dtype.str, side, align, name)
    g.array[...] = values
    return g.freeze()


def check_all(arrays: Sequence[GuardedArray]) -> None:
    """Raise one GuardError listing every array a kernel wrote around."""
    found = [p for g in arrays for p in g.problems()]
    if found:
        raise GuardError("; ".join(found))
