"""CUDA C types and literals: element types, the built-in vector types, packed 16-bit float
pairs, and literals of exactly a dtype."""

from __future__ import annotations

import math
from typing import Any

from tensorforge.errors import BuildError
from tensorforge.te import dtype as dt

CTYPES = {
    "bool": "bool",
    "int8": "signed char",
    "int16": "short",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "uint16": "unsigned short",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
    "float16": "half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
}

# 32-bit element types that have CUDA's built-in 2- and 4-lane vector types (8 and 16 bytes)
VECTOR_CTYPES = {"float32": "float", "int32": "int", "uint32": "uint"}
LANE_FIELDS = "xyzw"
# 16-bit floats: (to float, from float, packed pair type, pair from two halves, header helper)
HALF_TYPES = {
    "float16": ("__half2float", "__float2half", "half2", "__halves2half2", "half"),
    "bfloat16": (
        "__bfloat162float",
        "__float2bfloat16",
        "__nv_bfloat162",
        "__halves2bfloat162",
        "bf16",
    ),
}
# raw words that move 2, 4 or 8 packed 16-bit lanes in one access (4, 8 and 16 bytes)
_RAW_WORDS = {2: "unsigned int", 4: "uint2", 8: "uint4"}


def ctype(dtype: str) -> str:
    """The C type of one element of `dtype` ('float32x4' -> 'float')."""
    try:
        return CTYPES[dt.element_of(dtype)]
    except KeyError:
        raise BuildError(f"CUDA codegen: unsupported dtype {dtype!r}") from None


def vector_ctype(dtype: str, lanes: int) -> str | None:
    """'float4' for (float32, 4): the built-in vector type, or None where there is none."""
    base = VECTOR_CTYPES.get(dt.element_of(dtype))
    return f"{base}{lanes}" if base is not None and lanes in (2, 4) else None


def literal(value: Any, dtype: str) -> str:
    """A C literal of exactly `dtype`."""
    dtype = dt.element_of(dtype)
    if dtype == "bool":
        return "true" if value else "false"
    if dt.is_float(dtype):
        value = float(value)
        if dtype == "float64":
            if math.isnan(value):
                return "__longlong_as_double(0x7ff8000000000000LL)"
            if math.isinf(value):
                return f"{'-' if value < 0 else ''}__longlong_as_double(0x7ff0000000000000LL)"
            return repr(value)
        if math.isnan(value):
            text = "__uint_as_float(0x7fc00000u)"
        elif math.isinf(value) or abs(value) > 3.4028234663852886e38:
            text = f"{'-' if value < 0 else ''}__uint_as_float(0x7f800000u)"
        else:
            text = repr(value) + "f"
        return text if dtype == "float32" else f"{HALF_TYPES[dtype][1]}({text})"
    value = int(value)
    if dtype == "int32":
        return f"({value + 1} - 1)" if value == -(2**31) else str(value)
    if dtype == "int64":
        return f"({value + 1}LL - 1LL)" if value == -(2**63) else f"{value}LL"
    if dtype == "uint32":
        return f"{value}u"
    if dtype == "uint64":
        return f"{value}ull"
    return f"(({CTYPES[dtype]}){value})"


def strip_parens(text: str) -> str:
    """'(a + b)' -> 'a + b' where the outer pair encloses everything; '(a) + (b)' is kept."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1]
    return text


def _elem_bytes(dtype: str) -> int:
    return max(1, dt.bits_of(dtype) // 8)
