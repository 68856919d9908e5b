"""tf.nd: arrays on devices (TVM's `tvm.nd`): array, empty, from_dlpack, NDArray."""

from tensorforge.runtime.ndarray import NDArray, array, empty, from_dlpack

__all__ = ["NDArray", "array", "empty", "from_dlpack"]
