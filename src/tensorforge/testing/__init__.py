"""Helpers for testing kernels against NumPy (used by the test suite and the fuzzer)."""

from tensorforge.testing.asserts import assert_allclose
from tensorforge.testing.check import check_against_numpy, random_inputs

__all__ = ["assert_allclose", "check_against_numpy", "random_inputs"]
