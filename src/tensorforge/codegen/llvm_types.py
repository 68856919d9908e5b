"""LLVM types of tensorforge dtypes, the constants the llvm code generator shares, and the
shuffles that take vectors apart and put them together."""

from __future__ import annotations

from llvmlite import ir

from tensorforge.te import dtype as dt

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
FLOAT = ("contract",)  # lets a*b + c become an FMA; every other IEEE rule stays

_SCALAR = {
    "bool": I1,
    "int8": I8,
    "int16": ir.IntType(16),
    "int32": I32,
    "int64": I64,
    "uint8": I8,
    "uint16": ir.IntType(16),
    "uint32": I32,
    "uint64": I64,
    "float16": ir.HalfType(),
    "bfloat16": ir.IntType(16),  # bit patterns: legalize_bfloat16 computes in float32
    "float32": ir.FloatType(),
    "float64": ir.DoubleType(),
}


def value_type(dtype: str) -> ir.Type:
    """The register type of a dtype: 'float32x8' -> <8 x float>, 'bool' -> i1."""
    scalar = _SCALAR[dt.element_of(dtype)]
    lanes = dt.lanes_of(dtype)
    return ir.VectorType(scalar, lanes) if lanes > 1 else scalar


def memory_type(dtype: str) -> ir.Type:
    """The in-memory element type: as value_type, but bool is a byte."""
    return I8 if dt.is_bool(dtype) else _SCALAR[dt.element_of(dtype)]


def element_bytes(dtype: str) -> int:
    return 1 if dt.is_bool(dtype) else dt.bits_of(dtype) // 8


def splat_constant(ty: ir.Type, value) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return vector_constant(ty, (value,) * ty.count)
    return ir.Constant(ty, value)


_VECTORS: dict[tuple, ir.Constant] = {}
_MAX_VECTORS = 4096


def vector_constant(ty: ir.VectorType, values: tuple) -> ir.Constant:
    """`ir.Constant(ty, list(values))`, made once: kernels repeat splats, ramps' offsets and
    shuffle masks thousands of times, and llvmlite makes and prints a constant per lane (9% of
    RegNetY-400MF's code generation). A constant is a value with no place in a module, so one
    serves every use. Lanes are keyed by their repr (-0.0 is not 0.0, True not 1); NaN (whose
    sign repr loses) is never shared."""
    key = (str(ty.element), *[v if type(v) is int else (type(v), repr(v)) for v in values])
    hit = _VECTORS.get(key)
    if hit is None:
        hit = ir.Constant(ty, list(values))
        if not any(isinstance(v, float) and v != v for v in values):
            if len(_VECTORS) >= _MAX_VECTORS:
                _VECTORS.clear()
            _VECTORS[key] = hit
    return hit


def lanes_of(builder: ir.IRBuilder, vector: ir.Value, start: int, count: int) -> ir.Value:
    """Lanes [start, start + count) of `vector` (the vector itself when that is all of it)."""
    if start == 0 and count == vector.type.count:
        return vector
    mask = vector_constant(ir.VectorType(I32, count), tuple(range(start, start + count)))
    return builder.shuffle_vector(vector, ir.Constant(vector.type, None), mask)


def load_vector(builder: ir.IRBuilder, ptr, element: ir.Type, count: int, align: int) -> ir.Value:
    """A `count`-lane vector load; one lane as a scalar load put into a 1-lane vector.

    NOTE: LLVM 22's O3 pipeline aborts on a `load <1 x float>` whose value is shuffled into a
    wider vector ("getSplatValue ... Only valid for vectors!"): the 1-lane tail of a 3-lane
    bfloat16 store's float32 operand (a max over a dimension of 1, fuzz seed 2017).
    """
    if count == 1:
        scalar = builder.load(ptr, typ=element, align=align)
        one = ir.VectorType(element, 1)
        return builder.insert_element(ir.Constant(one, None), scalar, ir.Constant(I32, 0))
    return builder.load(ptr, typ=ir.VectorType(element, count), align=align)


def concat(builder: ir.IRBuilder, parts: list[ir.Value]) -> ir.Value:
    """One vector of all lanes of `parts`, in order (the parts may differ in width)."""
    value = parts[0]
    for part in parts[1:]:
        width = max(value.type.count, part.type.count)
        a, c = _widen(builder, value, width), _widen(builder, part, width)
        lanes = list(range(value.type.count)) + [width + k for k in range(part.type.count)]
        value = builder.shuffle_vector(a, c, ir.Constant(ir.VectorType(I32, len(lanes)), lanes))
    return value


def _widen(builder: ir.IRBuilder, vector: ir.Value, width: int) -> ir.Value:
    if vector.type.count == width:
        return vector
    if vector.type.count == 1:  # its lane inserted: LLVM 22's O3 pipeline aborted (assertion
        # in getSplatValue) on a <1 x float> shuffled wider (a bfloat16 pool of 1 x 1 windows
        # over rows of 9: 8 lanes and 1 concatenated, fuzz seed 17244)
        lane = builder.extract_element(vector, ir.Constant(I32, 0))
        wide = ir.Constant(ir.VectorType(vector.type.element, width), None)
        return builder.insert_element(wide, lane, ir.Constant(I32, 0))
    lanes = list(range(vector.type.count)) + [vector.type.count] * (width - vector.type.count)
    return builder.shuffle_vector(
        vector, ir.Constant(vector.type, None), ir.Constant(ir.VectorType(I32, width), lanes)
    )
