"""The scatter family graph_fuzz.py draws (session 18's ir_builder kernels: lower_scatter.py,
extern_kernels.py): scatter / scatter_add / scatter_reduce along any dimension with duplicate
indices, index_add / index_put (accumulating) / index_copy, every reduction with and without
the input's own values. Indices are in range (eager raises otherwise); writes whose order
would decide the result (a source scattered without a reduction) use distinct indices."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tests.graph.graph_fuzz import Generator

REDUCTIONS = ["sum", "prod", "mean", "amax", "amin"]


def op_scatters(g: Generator):
    picked = g.float_and_dim()
    if picked is None:
        return None
    (x, t, d), rng = picked, g.rng
    size = t.shape[d]
    index_shape = list(t.shape)
    index_shape[d] = rng.randint(1, 2 * size)
    i = g.new_input(tuple(index_shape), torch.int64, f"index:{size}")
    src = f"({i}.to({x}.dtype) * 0.25 - 1)"
    count = rng.randint(1, size)
    j = g.new_input((count,), torch.int64, f"index:{size}")
    start = rng.randrange(size - count + 1)
    distinct = f"torch.arange({start}, {start + count})"
    include = rng.random() < 0.5
    forms = [
        f"{x}.scatter_add({d}, {i}, {src})",
        f"{x}.scatter({d}, {i}, 2.5)",
        f"{x}.scatter_reduce({d}, {i}, {src}, '{rng.choice(REDUCTIONS)}', include_self={include})",
        f"{x}.index_add({d}, {j}, {x}.index_select({d}, {j}) * 2)",
        f"{x}.index_copy({d}, {distinct}, {x}.narrow({d}, 0, {count}).exp())",
        f"{x}.scatter({d}, {distinct}.view([-1 if k == {d} % {t.dim()} else 1 for k in range({t.dim()})]).expand([{count} if k == {d} % {t.dim()} else s for k, s in enumerate({x}.shape)]), {x}.narrow({d}, 0, {count}) + 1)",
    ]
    if t.dim() >= 1:
        forms.append(f"{x}.index_put(({j},), {x}[{j}] * 3, accumulate=True)")
    return rng.choice(forms)
