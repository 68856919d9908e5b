"""The built-in templates `tensorforge tune` names ("matmul" -> "builtin/matmul", ...).

They are declared by the operators in tensorforge.ops (each operator's template, whose default
config is its default schedule), which register them with `tune.template` when imported; tune
keeps only the machinery, plus the short names and default workloads the command line offers.
"""

from __future__ import annotations

# the template's arguments `tensorforge tune OP` uses unless given --args / --shape
DEFAULT_ARGS = {
    "matmul": [512, 512, 512, "float32"],  # n, m, k, dtype[, parallel]
    "batch_matmul": [8, 128, 128, 128, "float32"],  # batch, n, m, k
    "conv2d": [1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"],  # N, C, H, W, F, KH, KW, stride, pad
    "softmax": [4096, 4096, "float32"],  # rows, columns
    "layer_norm": [4096, 4096, "float32"],
    "elementwise": [4096, 4096, 2.0, "float32"],  # sigmoid(relu(x) * scale + 1)
    "row_reduce": [4096, 4096, "sum", "float32"],  # rows, columns, sum | max | min
    "matmul_cuda": [4096, 4096, 4096, "float32"],  # n, m, k, dtype: CUDA cores
    "gemm_tensorcore": [4096, 4096, 4096, "float16"],  # m, n, k, dtype: tensor cores
}
# Built-ins that only schedule for a GPU: their default target.
GPU_ONLY = {"matmul_cuda": "cuda", "gemm_tensorcore": "cuda"}


def register_builtins() -> None:
    """Register the operators' templates (importing tensorforge.ops does it)."""
    import tensorforge.ops  # noqa: F401 - registration is the point: ops register into tune
