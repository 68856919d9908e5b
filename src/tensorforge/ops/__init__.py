"""tensorforge.ops: a small operator library. Each operator declares its computation once and
owns its default schedule per target and its tunable template ("builtin/<op>", registered
with `tune.template` on import), whose default config is the default schedule."""

from tensorforge.ops.batch_matmul import (
    batch_matmul,
    batch_matmul_template,
    schedule_batch_matmul,
)
from tensorforge.ops.conv2d import conv2d_nchw, conv2d_template, schedule_conv2d
from tensorforge.ops.cuda import matmul_cuda_template, schedule_matmul_cuda
from tensorforge.ops.elementwise import elementwise_template, fused_chain, schedule_elementwise
from tensorforge.ops.gemm_fp16 import gemm_tensorcore_template, schedule_gemm_fp16
from tensorforge.ops.layer_norm import layer_norm, layer_norm_template, schedule_layer_norm
from tensorforge.ops.matmul import MatmulTiles, matmul, matmul_template, product, schedule_matmul
from tensorforge.ops.reduction import row_reduce, row_reduce_template, schedule_row_reduce
from tensorforge.ops.softmax import schedule_softmax, softmax, softmax_template

__all__ = [
    "MatmulTiles",
    "batch_matmul",
    "batch_matmul_template",
    "conv2d_nchw",
    "conv2d_template",
    "elementwise_template",
    "fused_chain",
    "gemm_tensorcore_template",
    "layer_norm",
    "layer_norm_template",
    "matmul",
    "matmul_cuda_template",
    "matmul_template",
    "product",
    "row_reduce",
    "row_reduce_template",
    "schedule_batch_matmul",
    "schedule_conv2d",
    "schedule_elementwise",
    "schedule_gemm_fp16",
    "schedule_layer_norm",
    "schedule_matmul",
    "schedule_matmul_cuda",
    "schedule_row_reduce",
    "schedule_softmax",
    "softmax",
    "softmax_template",
]
