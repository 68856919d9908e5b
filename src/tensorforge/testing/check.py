"""Build a schedule, run it on random data and compare with a NumPy reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensorforge.runtime.ndarray import aligned_empty
from tensorforge.te.tensor import Tensor


def random_array(shape: Sequence[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Fresh random data (never zeros): floats in [-1, 1), ints in [-50, 50), bools."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "u":
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.integers(-50, 50, size=shape).astype(dtype)


def random_inputs(
    tensors: Sequence[Tensor], rng: np.random.Generator, sizes: dict | None = None
) -> list[np.ndarray]:
    """Random arrays for `tensors` (symbolic sizes taken from `sizes`: {var_name: int})."""
    out = []
    for t in tensors:
        shape = [_concrete(e, sizes or {}) for e in t.shape]
        out.append(random_array(shape, t.dtype, rng))
    return out


def _aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def _concrete(extent: Any, sizes: dict) -> int:
    from tensorforge.te.expr import Const, Var

    if isinstance(extent, Const):
        return int(extent.value)
    if isinstance(extent, Var):
        return int(sizes[extent.name])
    raise ValueError(f"cannot make a concrete size from {extent}")


def check_against_numpy(
    s: Any,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    reference: Callable[..., Any],
    *,
    rng: np.random.Generator | None = None,
    sizes: dict | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    target: Any = "llvm",
    scalars: Sequence[Any] = (),
    scalar_values: Sequence[Any] = (),
) -> list[np.ndarray]:
    """Build `s` with args inputs + outputs + scalars, run on random inputs, compare each output.

    `reference(*input_arrays, *scalar_values)` returns the expected output (or a tuple of them).
    Outputs are pre-filled with NaN / a sentinel so an unwritten element fails. A CPU target
    other than llvm is also compared with the llvm build on the same inputs (differential
    testing between two backends).
    """
    import tensorforge as tf

    rng = rng or np.random.default_rng(0)
    mod = tf.build(s, [*inputs, *outputs, *scalars], target=target)
    in_arrays = [_aligned_copy(a) for a in random_inputs(inputs, rng, sizes)]
    out_arrays = []
    for t in outputs:
        shape = [_concrete(e, sizes or {}) for e in t.shape]
        arr = aligned_empty(tuple(shape), t.dtype)
        arr.fill(np.nan if arr.dtype.kind == "f" else 77)
        out_arrays.append(arr)
    mod(*in_arrays, *out_arrays, *scalar_values)
    expected = reference(*in_arrays, *scalar_values)
    if not isinstance(expected, (tuple, list)):
        expected = (expected,)
    for t, got, want in zip(outputs, out_arrays, expected):
        np.testing.assert_allclose(
            got,
            np.asarray(want).astype(got.dtype),
            rtol=rtol,
            atol=atol,
            err_msg=f"output '{t.name}' differs from numpy",
        )
    kind = tf.Target(target).kind if isinstance(target, (str, tf.Target)) else "llvm"
    if kind != "llvm" and not kind.is_gpu:
        llvm_outs = [np.full_like(a, np.nan if a.dtype.kind == "f" else 77) for a in out_arrays]
        tf.build(s, [*inputs, *outputs, *scalars], target="llvm")(
            *in_arrays, *llvm_outs, *scalar_values
        )
        for t, got, want in zip(outputs, out_arrays, llvm_outs):
            np.testing.assert_allclose(
                got, want, rtol=rtol, atol=atol, err_msg=f"output '{t.name}': {kind} != llvm"
            )
    return out_arrays
