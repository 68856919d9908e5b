"""`x[mask] = v` and `x[mask] += v` of one value (aten.index_put with a boolean or byte mask):
a select in the graph's element-wise code, equal to eager on every dtype and mask shape."""

import pytest

torch = pytest.importorskip("torch")

from tests.graph.test_lowering import check, rand, strict  # noqa: E402, F401 (strict: autouse)

aten = torch.ops.aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_masked_puts_of_one_value_match_eager(dtype):
    x = (rand(5, 7, 3, seed=1) * 10).to(dtype)
    full = rand(5, 7, 3, seed=2) > 0.2  # every dimension
    rows = rand(5, seed=3) > 0  # the first
    inner = rand(7, seed=4) > 0  # the second, after a full slice
    value = torch.tensor(3, dtype=dtype)

    def fn(x, full, rows, inner, value):
        return (
            aten.index_put(x, [full], value),
            aten.index_put(x, [rows], value, accumulate=True),
            aten.index_put(x, [None, inner], value),
            aten.index_put(x, [full], value.reshape(1)) * 2,
        )

    check(fn, x, full, rows, inner, value)


def test_one_value_per_selected_element_runs_eagerly():
    x, mask = rand(4, 6, seed=5), rand(4, 6, seed=6) > 0
    values = rand(int(mask.sum()), seed=7)

    def fn(x, mask, values):
        return aten.index_put(x, [mask], values) + 1.0

    check(fn, x, mask, values, fallbacks=1)
