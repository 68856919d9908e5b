"""TVM's tvm.testing assertions: compare NDArrays (or numpy arrays) with a tolerance."""

from __future__ import annotations

from typing import Any

import numpy as np


def _as_numpy(x: Any) -> Any:
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """numpy.testing.assert_allclose that also takes tf.nd arrays (TVM's tvm.testing name);
    the shapes must match exactly (no broadcasting)."""
    actual, desired = np.asanyarray(_as_numpy(actual)), np.asanyarray(_as_numpy(desired))
    np.testing.assert_equal(actual.shape, desired.shape, err_msg="the shapes differ")
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol, verbose=True)
