"""tensorforge.graph: `torch.compile(model, backend="tensorforge")` (API.md §9).

ATen graph -> te computations (lowerer.py and the lower_* modules, one per operator family) ->
kernels grouped by what fusion saves (element-wise chains inlined, epilogues at their anchor) ->
schedules (schedules.py) -> one compiled callable with planned intermediates (program.py).
"""

# the lowerings register themselves in the table when imported
from tensorforge.graph import (
    lower_batch_norm,
    lower_bits,
    lower_buckets,
    lower_conv_backward,
    lower_conv_nd,
    lower_embedding_bag,
    lower_fold,
    lower_gcd,
    lower_grid_sample,
    lower_index_reduce,
    lower_linalg,
    lower_norms,
    lower_pdist,
    lower_pointwise,
    lower_pools,
    lower_pools_nd,
    lower_reduce,
    lower_scans,
    lower_scatter,
    lower_sort,
    lower_special,
    lower_views,
)  # noqa: E402, I001
from tensorforge.graph.backend import backend, compile_aten, decompositions
from tensorforge.graph.options import Options

__all__ = ["backend", "compile_aten", "decompositions", "Options"]
