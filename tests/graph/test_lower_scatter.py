"""scatter, scatter_add, scatter_reduce, index_put (index_add, index_copy) and embedding_bag as
ir_builder kernels (they ran eagerly), against eager torch: duplicate indices, negative and
out-of-range ones where eager accepts them, int32 and int64 indices, broadcast values, empty
sources, odd shapes; their CUDA kernels through nvcc, and on the GPU (-m cuda)."""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph import registry  # noqa: E402
from tensorforge.graph.lower_scatter import LOCAL_COUNTS  # noqa: E402
from tensorforge.graph.registry import EAGER_ON_CPU  # noqa: E402
from tests.graph.test_lower_math import nvcc_problem  # noqa: E402
from tests.graph.test_lowering import check, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


@pytest.fixture(autouse=True)
def kernels(monkeypatch):
    """The kernels even where CPU targets run the operator eagerly (the GPU's, checked here)."""
    monkeypatch.setattr(registry, "EAGER_ON_CPU", {})


def test_slower_modes_run_eagerly_on_cpu(monkeypatch):
    monkeypatch.setattr(registry, "EAGER_ON_CPU", EAGER_ON_CPU)
    x, index = rand(4, 6, seed=21), ints(0, 6, (4, 6), 22)
    weight, indices, offsets = rand(10, 3, seed=23), ints(0, 10, (8,), 24), torch.tensor([0, 5])

    long = rand(LOCAL_COUNTS + 1, 1, seed=25)  # (a task's counts would not fit its stack)

    def fn(x, index, weight, indices, offsets, long):
        return (
            x.scatter_reduce(0, index % 4, x, "mean"),  # a task's counts on the stack
            x.scatter_reduce(1, index, x, "mean"),
            long.scatter_reduce(0, index[:1, :1], x[:1, :1], "mean"),  # eager
            x.scatter_reduce(1, index, x, "amax"),
            F.embedding_bag(indices, weight, offsets, mode="sum"),  # eager
            F.embedding_bag(indices, weight, offsets, mode="max"),
        )

    compiled = check(fn, x, index, weight, indices, offsets, long, fallbacks=2)
    reasons = " ".join(r for *_, r in compiled.program.fallbacks)
    assert "mean (of a long axis) on the CPU" in reasons, reasons
    assert "sum / mean on the CPU" in reasons, reasons


def ints(low, high, shape, seed, dtype=torch.int64):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def scatters(x, index, src):
    """Along each dimension of (5, 7, 3): the index (3, 7, 2) narrower than x, with duplicates."""
    i1 = index % 7
    i0 = index % 5
    return (
        x.scatter(1, i1, src), x.scatter(0, i0, 2.5), x.scatter_add(1, i1, src),
        x.scatter_add(2, index % 3, src), x.scatter(1, i1, src, reduce="multiply"),
        x.scatter(2, index % 3, 1.5, reduce="add"),
        *[x.scatter_reduce(d, i, src, r, include_self=s)
          for d, i in ((0, i0), (1, i1))
          for r in ("sum", "prod", "mean", "amax", "amin") for s in (True, False)],
    )  # fmt: skip


def test_scatter_family():
    x, src = rand(5, 7, 3, seed=1), rand(3, 7, 2, seed=2)
    check(scatters, x, ints(0, 35, (3, 7, 2), 3), src, rtol=1e-4)


def row_means(x, index, src, v):
    """Means along the last axis (a row's counts on the task's stack): index rows fewer and
    shorter than x's, duplicates, include_self or not; float64 and 1-d."""
    return (
        x.scatter_reduce(1, index, src, "mean"),
        x.scatter_reduce(1, index, src, "mean", include_self=False),
        x.double().scatter_reduce(-1, index, src.double(), "mean", include_self=False),
        v.scatter_reduce(0, index[0], src[0], "mean"),
    )


def test_means_along_rows_on_the_cpu(monkeypatch):
    monkeypatch.setattr(registry, "EAGER_ON_CPU", EAGER_ON_CPU)
    x, src, v = rand(5, 13, seed=31), rand(3, 9, seed=32), rand(11, seed=33)
    compiled = check(row_means, x, ints(0, 11, (3, 9), 34), src, v)
    assert compiled.program.fallbacks == []


def test_means_along_other_axes_on_the_cpu(monkeypatch):
    # a task's fibers' counts on its stack: 2000 positions along the axis leave room for 8
    # fibers' (chunks of 8, 8 and 4 of the index's 20 columns); a middle axis, fewer index rows
    monkeypatch.setattr(registry, "EAGER_ON_CPU", EAGER_ON_CPU)
    x, src, y = rand(2000, 23, seed=35), rand(60, 21, seed=36), rand(4, 9, 6, seed=37)

    def fn(x, index, src, y):
        return (
            x.scatter_reduce(0, index, src[:, :20], "mean"),
            x.scatter_reduce(0, index, src[:, :20], "mean", include_self=False),
            y.scatter_reduce(1, index[:3, :5].unsqueeze(0).expand(2, 3, 5) % 9, src[:2, :15].reshape(2, 3, 5), "mean"),
        )  # fmt: skip

    compiled = check(fn, x, ints(0, 2000, (50, 20), 38) % 97, src, y)
    assert compiled.program.fallbacks == []


def test_scatter_of_integers_int32_indices_and_one_element():
    x, index, src = (  # the index longer than x along `dim` (9 > 6: torch allows it)
        ints(-9, 9, (4, 6), 4),
        ints(0, 6, (4, 9), 5, torch.int32),
        ints(-9, 9, (4, 9), 6),
    )
    check(lambda x, i, s: (x.scatter_add(1, i, s), x.scatter_reduce(1, i, s, "amax", include_self=False), x.scatter(1, i, s)), x, index, src)  # fmt: skip
    one = rand(1, 1, seed=7)
    check(lambda x, i: (x.scatter_add(0, i, x * 2), x.scatter(1, i, 3.0)), one, ints(0, 1, (1, 1), 8))  # fmt: skip


def index_puts(x, rows, cols, values, row_values):
    return (
        x.index_put((rows,), row_values, accumulate=True),
        x.index_put((rows,), row_values[0]),  # values broadcast along the index
        x.index_put((rows, cols), values, accumulate=True),
        x.index_put((rows, cols), x.new_tensor(2.0)),
        x.index_add(0, rows % 5, row_values, alpha=0.5),  # (eager refuses negative rows)
        x.index_copy(0, (rows % 5).long(), row_values),  # (int64 only)
        x.index_add(1, cols, x[:, :11] * 3),
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_index_put_add_copy(dtype):
    x = rand(5, 13, seed=9)
    rows = ints(-5, 5, (11,), 10, dtype)  # negative rows count from the end; duplicates
    cols = ints(0, 13, (11,), 11, dtype)
    check(index_puts, x, rows, cols, rand(11, seed=12), rand(11, 13, seed=13), rtol=1e-4)


def test_empty_source_and_accumulating_duplicates():
    x = rand(6, 3, seed=14)
    empty = torch.zeros(0, dtype=torch.int64)
    check(lambda x, i: (x.index_put((i,), torch.ones(0, 3), accumulate=True), x.index_add(0, i, x[:0])), x, empty)  # fmt: skip
    same = torch.full((50,), 4)
    check(lambda x, i: x.index_put((i,), torch.arange(50.0)[:, None].expand(50, 3), accumulate=True), x, same)  # fmt: skip


def test_out_of_range_indices_write_nothing():
    """Eager raises; the kernel must not write outside the tensor (the check is that nothing
    crashes and the in-range updates land)."""
    from tests.graph.test_lowering import compile_fn

    x, src = rand(4, 5, seed=15), rand(4, 5, seed=16)
    index = torch.tensor([[0, 1, 2, 3, 4]] * 3 + [[0, 1, 2, 3, 99]])
    compiled = compile_fn(lambda x, i, s: x.scatter_add(1, i, s), [x, ints(0, 5, (4, 5), 17), src])
    (got,) = compiled([x, index, src])
    expected = x.clone()
    expected[:3] += src[:3]
    expected[3, :4] += src[3, :4]
    assert torch.allclose(got, expected)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_builds_compile_with_nvcc():
    """Every kernel above, and a thread per source element (atomicAdd), in one nvcc run."""

    def everything(x, index, src, x2, rows, cols, values, row_values, *rest):
        *bags, x3, i3, v3 = rest
        few_fibers = (x3.index_put((i3,), v3, accumulate=True), x3.index_put((i3,), v3))
        return (*scatters(x, index, src), *index_puts(x2, rows, cols, values, row_values),
                *embedding_bags(*bags), *few_fibers)  # fmt: skip

    inputs = [
        rand(5, 7, 3, seed=1), ints(0, 35, (3, 7, 2), 3), rand(3, 7, 2, seed=2),
        rand(5, 13, seed=9), ints(-5, 5, (11,), 10), ints(0, 13, (11,), 11), rand(11, seed=12),
        rand(11, 13, seed=13), *bag_inputs(torch.int64),
        rand(1000, seed=21), ints(0, 1000, (5000,), 22), rand(5000, seed=23),
    ]  # fmt: skip
    assert nvcc_problem(everything, inputs, "sm_90a") is None


@pytest.mark.cuda
def test_on_the_gpu():
    """On the GPU, where few fibers take a thread per source element, assignments of
    different values to one position are undefined (as torch's): those indices are unique."""
    if not torch.cuda.is_available():
        pytest.skip("this torch build has no CUDA")
    from tests.graph.test_lowering import compile_fn

    x, src = rand(5, 7, 3, seed=1).cuda(), rand(3, 7, 2, seed=2).cuda()
    unique_along_1 = torch.rand(3, 7, 2, generator=torch.Generator().manual_seed(3)).argsort(1)
    x2, rows, cols = rand(5, 13, seed=9).cuda(), ints(-5, 5, (11,), 10), ints(0, 13, (11,), 11)

    def index_puts_defined(x, rows, cols, values, row_values):
        every = index_puts(x, rows, cols, values, row_values)
        order = torch.tensor([3, 0, 4, 1, 2], device=x.device)
        return (*every[:5], *every[6:], x.index_copy(0, order, x[order] * 2))

    cases = [
        (scatters, [x, unique_along_1.cuda(), src]),
        (index_puts_defined, [x2, rows.cuda(), cols.cuda(), rand(11, seed=12).cuda(), rand(11, 13, seed=13).cuda()]),
        (embedding_bags, [t.cuda() for t in bag_inputs(torch.int64)]),
        (lambda x, i, v: (x.index_put((i,), v, accumulate=True), x.scatter_add(0, i, v)),
         [rand(1000, seed=21).cuda(), ints(0, 1000, (5000,), 22).cuda(), rand(5000, seed=23).cuda()]),
    ]  # fmt: skip
    for fn, inputs in cases:
        compiled = compile_fn(fn, inputs)
        assert compiled.target.kind == "cuda" and compiled.program.fallbacks == []
        for k, (g, e) in enumerate(zip(compiled(list(inputs)), fn(*inputs))):
            assert torch.allclose(g, e, rtol=1e-4, atol=1e-4), (fn.__name__, k, (g - e).abs().max())


def embedding_bags(weight, indices, offsets, per_sample):
    return (
        F.embedding_bag(indices, weight, offsets, mode="sum"),
        F.embedding_bag(indices, weight, offsets, mode="mean"),
        F.embedding_bag(indices, weight, offsets, mode="max"),
        F.embedding_bag(indices, weight, offsets, mode="sum", per_sample_weights=per_sample),
        F.embedding_bag(  # (eager's bags disagree where the last offset is not the end)
            indices, weight, torch.cat([offsets, offsets.new_full((1,), 12)]), mode="mean",
            include_last_offset=True,
        ),
        F.embedding_bag(indices, weight, offsets, mode="max", padding_idx=3),
        F.embedding_bag(indices.reshape(3, 4), weight, mode="mean"),  # 2-d: bags of 4
    )  # fmt: skip


def test_embedding_bag():
    check(embedding_bags, *bag_inputs(torch.int64), rtol=1e-5)
    check(lambda *args: embedding_bags(*args)[:2], *bag_inputs(torch.int32), rtol=1e-5)


def bag_inputs(dtype):
    offsets = torch.tensor([0, 3, 3, 7, 11], dtype=dtype)  # an empty bag, one of one index
    return [rand(10, 7, seed=18), ints(0, 10, (12,), 19, dtype), offsets, rand(12, seed=20)]


def run_time_sized(x, index, src, rows, row_values, weight, indices, offsets):
    """Kernels of sizes known only at run time (dynamic=True): each family once."""
    return (
        x.scatter_add(1, index, src), x.scatter_reduce(0, index % x.shape[0], src, "amax"),
        x.index_put((rows,), row_values, accumulate=True), x.index_add(0, rows % x.shape[0], row_values),
        F.embedding_bag(indices, weight, offsets, mode="max"),
    )  # fmt: skip


def run_time_inputs(n, m, seed):
    """Inputs of `run_time_sized` with n rows of m (n + 4 row updates, n + 3 bags)."""
    weight, indices = rand(n + 2, m, seed=seed), ints(0, n + 2, (2 * n,), seed)
    offsets = torch.arange(0, 2 * n, 2)[: n - 1]
    return [rand(n, m, seed=seed), ints(0, m, (n, m), seed + 1), rand(n, m, seed=seed + 2),
            ints(-n, n, (n + 4,), seed + 3), rand(n + 4, m, seed=seed + 4), weight, indices, offsets]  # fmt: skip


def test_run_time_sizes():
    from tests.graph.test_fuzz_found import dynamic

    fast, nothing_eager = dynamic(run_time_sized)
    for n, m in ((5, 13), (6, 17)):  # (no two sizes alike: one graph, its sizes symbols)
        inputs = run_time_inputs(n, m, seed=n)
        for got, expected in zip(fast(*inputs), run_time_sized(*inputs)):
            torch.testing.assert_close(got, expected)
    nothing_eager()
