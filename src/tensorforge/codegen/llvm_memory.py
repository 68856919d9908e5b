"""Loads from buffers as llvmlite values: scalar, contiguous (in power-of-two pieces), masked
(in register-sized pieces, or plain where the mask is known lane by lane), strided (a few
contiguous loads and one shuffle), windows at constant lane offsets (llvm_windows.py) and
gathers. Stores use the same piece rules (llvm.py)."""

from __future__ import annotations

from llvmlite import ir

from tensorforge.codegen.llvm_math_builder import intrinsic, mangle
from tensorforge.codegen.llvm_types import (
    I32,
    I64,
    PTR,
    concat,
    element_bytes,
    lanes_of,
    load_vector,
    memory_type,
    splat_constant,
)
from tensorforge.codegen.llvm_windows import load_windows, window_plan
from tensorforge.ir.arith.lanes import lane_offsets
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp
from tensorforge.ir.passes.fold_lane_masks import constant_lanes
from tensorforge.target import vector_bits_of
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Expr


def masked_chunks(lanes: int, element_bytes: int, register_bytes: int) -> list[tuple[int, int]]:
    """(first lane, lane count) pieces of at most one register (`register_bytes`: 32 on AVX2,
    64 on AVX-512) for a masked access.

    NOTE: LLVM's x86 lowering of a masked load wider than a register whose mask is all-false
    for a whole register-sized piece loads that piece unmasked (seen with 32 float lanes on
    AVX2: a read past the end of the array). A register-sized piece whose mask the backend
    finds all-false can still come out as a plain load (fuzz seed 8080 #7622), so each piece is
    also skipped when none of its lanes is on (`any_lane`). Pieces of 32 bytes on AVX-512 cut
    every zmm access in two halves, each with its mask test and branch, then joined: a softmax
    row of 197 (a 16-lane tail mask on each reduction step) took 368 us where AVX2 code took
    212 (1182 rows, 1 thread); one zmm piece: 156 us.
    """
    per_chunk = max(1, register_bytes // element_bytes)
    return [(start, min(per_chunk, lanes - start)) for start in range(0, lanes, per_chunk)]


def known_mask_pieces(on: list[bool]) -> list[tuple[int, int, bool]]:
    """(first lane, lane count, on) pieces of an access under a mask known lane by lane: each
    run of lanes on in power-of-two pieces, accessed plainly; each run off whole, not accessed.

    NOTE: a register tile's tail row (`conv.local[ramp(48, 1, 16)] if ramp(48, 1, 16) < 56`)
    as one masked zmm store kept SROA from promoting the tile to registers (a masked intrinsic
    on the stack buffer): conv2d 64 -> 64 at 56², AVX-512, 1.07 -> 2.67 ms. Plain accesses of
    lanes 48..55 keep it in registers.
    """
    pieces, start = [], 0
    while start < len(on):
        end = start
        while end < len(on) and on[end] == on[start]:
            end += 1
        if on[start]:
            pieces += [
                (start + first, count, True) for first, count in power_of_two_pieces(end - start)
            ]
        else:
            pieces.append((start, end - start, False))
        start = end
    return pieces


STRIDED_LOADS = (2, 3, 4)  # ramp strides loaded as contiguous vectors and one shuffle


def _stride_of(index: Expr) -> int | None:
    """The constant stride of a ramp of 2 or more lanes, else None."""
    if isinstance(index, Ramp) and isinstance(index.stride, Const) and index.lanes > 1:
        return int(index.stride.value)
    return None


def power_of_two_pieces(lanes: int) -> list[tuple[int, int]]:
    """(first lane, lane count) pieces of power-of-two sizes, largest first: 48 -> 32 + 16.

    NOTE: a <48 x float> access to a stack buffer (a 6 x 48 register tile) kept SROA from
    promoting the buffer to registers: LLVM rounds such a vector's size up to 256 bytes, which
    no longer tiles the buffer, and the tile went through the stack (12x slower). Power-of-two
    pieces tile it exactly.
    """
    pieces, start = [], 0
    while start < lanes:
        count = 1 << ((lanes - start).bit_length() - 1)
        pieces.append((start, count))
        start += count
    return pieces


class LoadEmitter:
    """The memory half of ExprEmitter (a mixin): pointers, access kinds and loads. Needs the
    emitter's `builder`, `module`, `buffers`, `cpu_features`, `expr`, `splat` and `fail`."""

    def buffer_ptr(self, buffer: Buffer) -> ir.Value:
        if buffer not in self.buffers:
            raise self.fail(
                f"buffer '{buffer.name}' is accessed but is neither a parameter nor allocated"
            )
        return self.buffers[buffer]

    def element_ptr(self, buffer: Buffer, index: ir.Value) -> ir.Value:
        """&buffer[index] for a scalar index (a vector index gives a vector of pointers)."""
        ptr = self.builder.gep(
            self.buffer_ptr(buffer), [index], inbounds=True, source_etype=memory_type(buffer.dtype)
        )
        if isinstance(index.type, ir.VectorType):
            ptr.type = ir.VectorType(PTR, index.type.count)
        return ptr

    def index64(self, index: Expr) -> ir.Value:
        """An index expression as i64 (sign-extended unless unsigned), scalar or vector."""
        v = self.expr(index)
        width = v.type.element.width if isinstance(v.type, ir.VectorType) else v.type.width
        if width == 64:
            return v
        ty = ir.VectorType(I64, v.type.count) if isinstance(v.type, ir.VectorType) else I64
        return self.builder.zext(v, ty) if dt.is_unsigned(index.dtype) else self.builder.sext(v, ty)

    def access(self, buffer: Buffer, index: Expr) -> tuple[str, ir.Value, int]:
        """(kind, pointer, lanes) of an access: kind "scalar", "contiguous", "broadcast" (one
        element for every lane) or "gather" (the pointer is then a vector of pointers)."""
        lanes = dt.lanes_of(index.dtype)
        if lanes == 1:
            return "scalar", self.element_ptr(buffer, self.index64(index)), 1
        if isinstance(index, Broadcast):
            return "broadcast", self.element_ptr(buffer, self.index64(index.value)), lanes
        if isinstance(index, Ramp) and isinstance(index.stride, Const) and index.stride.value == 1:
            return "contiguous", self.element_ptr(buffer, self.index64(index.base)), lanes
        return "gather", self.element_ptr(buffer, self.index64(index)), lanes

    def lanes_of(self, vector: ir.Value, start: int, count: int) -> ir.Value:
        return lanes_of(self.builder, vector, start, count)

    def concat(self, parts: list[ir.Value]) -> ir.Value:
        return concat(self.builder, parts)

    def _load(self, e: BufferLoad) -> ir.Value:
        if len(e.indices) != 1:
            raise self.fail(
                f"load of '{e.buffer.name}' has {len(e.indices)} indices, expected one flat index"
            )
        b, buffer = self.builder, e.buffer
        if isinstance(e.predicate, Broadcast) and not dt.is_bool(buffer.dtype):
            # one lane's condition for all: a branch around the unmasked load (windows, one
            # contiguous load, or a gather) instead of a masked access of every piece
            unmasked = BufferLoad(buffer, e.indices)
            return self._load_if(self.expr(e.predicate.value), lambda: self._load(unmasked))
        if e.predicate is None and _stride_of(e.indices[0]) in STRIDED_LOADS:
            return self._strided_load(e)
        if e.predicate is None:
            windows = self._windowed(buffer, e.indices[0])
            if windows is not None:
                return windows
        kind, ptr, lanes = self.access(buffer, e.indices[0])
        elem, align = memory_type(buffer.dtype), element_bytes(buffer.dtype)
        vty = ir.VectorType(elem, lanes) if lanes > 1 else elem
        mask = None if e.predicate is None else self.expr(e.predicate)
        if kind == "scalar" and mask is not None:  # a guarded scalar load: 0 where masked off
            value = self._load_if(mask, lambda: b.load(ptr, typ=elem, align=align))
        elif kind == "scalar":
            value = b.load(ptr, typ=elem, align=align)
        elif kind == "broadcast" and mask is None:
            value = self.splat(b.load(ptr, typ=elem, align=align), lanes)
        elif kind == "broadcast":  # one guarded scalar load, not a masked gather of one address
            loaded = self._load_if(self.any_lane(mask), lambda: b.load(ptr, typ=elem, align=align))
            value = b.select(mask, self.splat(loaded, lanes), ir.Constant(vty, None))
        elif kind == "contiguous" and mask is None:
            parts = [
                load_vector(
                    b,
                    b.gep(ptr, [ir.Constant(I64, start)], source_etype=elem) if start else ptr,
                    elem,
                    count,
                    align,
                )
                for start, count in power_of_two_pieces(lanes)
            ]
            value = parts[0] if len(parts) == 1 else self.concat(parts)
        elif kind == "contiguous" and constant_lanes(e.predicate) is not None:
            parts = [
                load_vector(
                    b,
                    b.gep(ptr, [ir.Constant(I64, start)], source_etype=elem) if start else ptr,
                    elem,
                    count,
                    align,
                )
                if on
                else ir.Constant(ir.VectorType(elem, count), None)
                for start, count, on in known_mask_pieces(constant_lanes(e.predicate))
            ]
            value = self.concat(parts)
        elif kind == "contiguous":
            parts = []
            for start, count in masked_chunks(lanes, align, self.register_bytes):
                part_ty = ir.VectorType(elem, count)
                fn = intrinsic(
                    self.module,
                    f"llvm.masked.load.{mangle(part_ty)}.p0",
                    part_ty,
                    [PTR, I32, ir.VectorType(ir.IntType(1), count), part_ty],
                )
                part_ptr = (
                    b.gep(ptr, [ir.Constant(I64, start)], source_etype=elem) if start else ptr
                )
                part_mask = self.lanes_of(mask, start, count)
                args = [part_ptr, ir.Constant(I32, align), part_mask, ir.Constant(part_ty, None)]
                parts.append(
                    self._load_if(
                        self.any_lane(part_mask), lambda fn=fn, args=args: b.call(fn, args)
                    )
                )
            value = self.concat(parts)
        elif mask is None:  # gather as scalar loads: cheaper than vgather on most x86 cores
            value = ir.Constant(vty, ir.Undefined)
            for lane in range(lanes):
                lane_ptr = b.extract_element(ptr, ir.Constant(I32, lane))
                value = b.insert_element(
                    value, b.load(lane_ptr, typ=elem, align=align), ir.Constant(I32, lane)
                )
        else:
            fn = intrinsic(
                self.module,
                f"llvm.masked.gather.{mangle(vty)}.{mangle(ptr.type)}",
                vty,
                [ptr.type, I32, mask.type, vty],
            )
            value = b.call(fn, [ptr, ir.Constant(I32, align), mask, ir.Constant(vty, None)])
        if dt.is_bool(buffer.dtype):
            value = b.icmp_unsigned("!=", value, splat_constant(value.type, 0))
        return value

    def _strided_load(self, e: BufferLoad) -> ir.Value:
        """`A[ramp(b, s, n)]` for a small stride s (a window's step: pools): the span's
        elements b .. b + s(n - 1) as s contiguous n-lane loads (the last one ending on the
        span's last element, so nothing past it is touched), then one shuffle of their every
        s-th lane. A gather would load the n lanes one by one."""
        b, index = self.builder, e.indices[0]
        stride, lanes = index.stride.value, index.lanes
        elem, align = memory_type(e.buffer.dtype), element_bytes(e.buffer.dtype)
        span = stride * (lanes - 1) + 1
        starts = [min(k * lanes, span - lanes) for k in range(stride)]
        base = self.element_ptr(e.buffer, self.index64(index.base))
        chunks = [
            b.load(
                b.gep(base, [ir.Constant(I64, start)], source_etype=elem) if start else base,
                typ=ir.VectorType(elem, lanes),
                align=align,
            )
            for start in starts
        ]
        picks = []
        for lane in range(lanes):
            k = min(lane * stride // lanes, len(starts) - 1)
            picks.append(k * lanes + lane * stride - starts[k])
        whole = self.concat(chunks)
        value = b.shuffle_vector(
            whole, ir.Constant(whole.type, None), ir.Constant(ir.VectorType(I32, lanes), picks)
        )
        if dt.is_bool(e.buffer.dtype):
            value = b.icmp_unsigned("!=", value, splat_constant(value.type, 0))
        return value

    def _windowed(self, buffer: Buffer, index: Expr) -> ir.Value | None:
        """An unmasked gather at constant lane offsets from one address, as contiguous window
        loads and a shuffle (llvm_windows.py); None for any other access."""
        if (
            dt.lanes_of(index.dtype) == 1
            or isinstance(index, Broadcast)
            or dt.is_bool(buffer.dtype)
        ):
            return None
        if isinstance(index, Ramp) and isinstance(index.stride, Const) and index.stride.value == 1:
            return None  # contiguous: one load already
        parts = lane_offsets(index)
        plan = None if parts is None else window_plan(parts[1])
        if plan is None:
            return None
        base = self.element_ptr(buffer, self.index64(parts[0]))
        elem, align = memory_type(buffer.dtype), element_bytes(buffer.dtype)
        return load_windows(self.builder, base, elem, align, parts[1], plan, power_of_two_pieces)

    @property
    def register_bytes(self) -> int:
        """Bytes of the target's widest vector register (32 on AVX2, 64 on AVX-512)."""
        return vector_bits_of(self.cpu_features) // 8

    def any_lane(self, mask: ir.Value) -> ir.Value:
        """An i1: is some lane of the vector `mask` on?"""
        reduce_or = intrinsic(
            self.module,
            f"llvm.vector.reduce.or.{mangle(mask.type)}",
            ir.IntType(1),
            [mask.type],
        )
        return self.builder.call(reduce_or, [mask])

    def _load_if(self, condition: ir.Value, load) -> ir.Value:
        """`load()` emitted only where `condition` holds; zero otherwise."""
        b = self.builder
        before = b.block
        with b.if_then(condition):
            loaded, loaded_in = load(), b.block
        value = b.phi(loaded.type)
        value.add_incoming(loaded, loaded_in)
        value.add_incoming(ir.Constant(loaded.type, None), before)
        return value
