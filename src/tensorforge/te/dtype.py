"""Dtype strings and the promotion rules for mixing them.

A dtype is a string: a scalar type ("float32", "int32", "bool", ...) optionally followed by
"x<lanes>" for a vector ("float32x8"). Vectors only appear after the vectorize pass.

bfloat16 has no numpy type: its arrays are stored as uint16 bit patterns (`storage_dtype`), and
`to_bfloat16` / `from_bfloat16` convert float arrays to and from those bits.
"""

from __future__ import annotations

import functools

import numpy as np

from tensorforge.errors import ExprError

SCALAR_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)


def check_dtype(dtype: object, what: str = "dtype") -> str:
    """Normalize a user-given dtype (string, numpy dtype or type) and reject unknown ones."""
    try:
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    except TypeError:
        name = str(dtype)
    if name not in SCALAR_DTYPES:
        raise ExprError(
            f"{what}: unknown dtype {dtype!r}; expected one of {', '.join(SCALAR_DTYPES)}"
        )
    return name


def element_of(dtype: str) -> str:
    """'float32x8' -> 'float32'."""
    return dtype.split("x")[0] if "x" in dtype else dtype


def lanes_of(dtype: str) -> int:
    """'float32x8' -> 8, 'float32' -> 1."""
    return int(dtype.split("x")[1]) if "x" in dtype else 1


@functools.cache  # (pure, and asked about the same few dtypes a million times a model)
def with_lanes(dtype: str, lanes: int) -> str:
    base = element_of(dtype)
    return base if lanes == 1 else f"{base}x{lanes}"


def is_float(dtype: str) -> bool:
    base = element_of(dtype)
    return base.startswith("float") or base == "bfloat16"


def is_half(dtype: str) -> bool:
    """float16 or bfloat16: the 16-bit floats that compute in float32 where hardware lacks them."""
    return element_of(dtype) in ("float16", "bfloat16")


def is_int(dtype: str) -> bool:
    base = element_of(dtype)
    return base.startswith("int") or base.startswith("uint")


def is_unsigned(dtype: str) -> bool:
    return element_of(dtype).startswith("uint")


def is_bool(dtype: str) -> bool:
    return element_of(dtype) == "bool"


@functools.cache
def bits_of(dtype: str) -> int:
    base = element_of(dtype)
    return (
        1
        if base == "bool"
        else int(
            base.removeprefix("bfloat")
            .removeprefix("float")
            .removeprefix("uint")
            .removeprefix("int")
        )
    )


def promote(a: str, b: str) -> str:
    """The dtype two operands of differing dtypes meet at.

    bool < integers < floats; narrower < wider; a signed and an unsigned integer meet at the
    signed type wide enough for both. Mixing an integer wider than a float's mantissa can hold
    exactly (int64 with float32) raises instead of silently losing precision.
    """
    if a == b:
        return a
    if is_bool(a):
        return b
    if is_bool(b):
        return a
    if is_float(a) and is_float(b):
        if bits_of(a) == bits_of(b):
            return "float32"  # float16 with bfloat16: neither holds the other
        return a if bits_of(a) > bits_of(b) else b
    if is_float(a) or is_float(b):
        fl, it = (a, b) if is_float(a) else (b, a)
        if bits_of(it) > bits_of(fl):
            raise ExprError(
                f"cannot mix {it} and {fl} implicitly (precision would be lost); "
                f"cast one side with .astype()"
            )
        return fl
    if is_unsigned(a) == is_unsigned(b):
        return a if bits_of(a) >= bits_of(b) else b
    signed, unsigned = (a, b) if is_unsigned(b) else (b, a)
    if bits_of(signed) > bits_of(unsigned):
        return signed
    width = min(64, 2 * bits_of(unsigned))
    return f"int{width}"


def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value the integer `dtype` holds."""
    bits = bits_of(dtype)
    if is_unsigned(dtype):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def check_fits(value: object, dtype: str, what: str = "constant") -> None:
    """Raise ExprError when the Python number `value` does not fit `dtype` (nothing wraps)."""
    if is_int(dtype) and isinstance(value, int):
        lo, hi = int_range(dtype)
        if not lo <= value <= hi:
            raise ExprError(
                f"{what} {value} does not fit {element_of(dtype)} (range [{lo}, {hi}]); "
                f"give a dtype that holds it"
            )
    elif is_float(dtype) and isinstance(value, float) and np.isfinite(value):
        if not np.isfinite(round_scalar(value, dtype)):  # (bfloat16's storage is no float)
            raise ExprError(
                f"{what} {value} does not fit {element_of(dtype)} (it would become inf); "
                f"use a wider dtype"
            )


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype arrays of `dtype` are stored as (bfloat16: uint16 bit patterns)."""
    base = element_of(dtype)
    return np.dtype("uint16") if base == "bfloat16" else np.dtype(base)


storage_dtype = numpy_dtype


def to_bfloat16(x: object) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) of `x`, rounded to nearest even (NaN stays NaN)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint32(0x7FC0), rounded).astype(np.uint16)


def from_bfloat16(bits: object) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (uint16)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_scalar(value: float, dtype: str) -> float:
    """`value` as a float of `dtype` holds it (rounded to its precision)."""
    base = element_of(dtype)
    with np.errstate(all="ignore"):
        if base == "bfloat16":
            return float(from_bfloat16(to_bfloat16(np.float32(value))))
        return float(np.dtype(base).type(value))
