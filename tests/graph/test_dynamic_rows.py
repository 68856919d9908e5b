"""Row operators under symbolic sizes (`torch.compile(..., dynamic=True)`): one compiled kernel
runs rows of every length against eager torch, on fresh random data each call. The kernels
run full vectors unmasked and the last one masked, and the row guards of fused rows are proven
away from the sizes' facts (each >= 2); lengths around the vector width (16 lanes on AVX-512,
8 on AVX2), primes and the smallest sizes Dynamo leaves symbolic check those proofs."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph import backend  # noqa: E402
from tensorforge.graph.schedules import FIRST_GUESS  # noqa: E402

LENGTHS = [2, 3, 17, 1000, 16, 31, 197, 8, 33, 64, 65, 127, 509, 997]  # the first compiles


def row_kernel_sources(graph) -> list[str]:
    """The schedule source of each row-operator kernel of a compiled graph."""
    from tensorforge.graph.program import BuiltKernel
    from tests.graph.test_dynamic_and_cuda import _find_compiled

    steps = _find_compiled(graph).steps
    return [
        s.source
        for s in steps
        if isinstance(s, BuiltKernel) and s.spec.anchor and s.spec.anchor.kind != "matmul"
    ]


def compiled_once(fn):
    """`fn` compiled with symbolic sizes, and the list of what the backend compiled."""
    graphs = []

    def counting(gm, example_inputs, **kwargs):
        graphs.append(backend(gm, example_inputs, **kwargs))
        return graphs[-1]

    torch._dynamo.reset()
    return torch.compile(fn, backend=counting, dynamic=True), graphs


def random(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3


def test_softmax_rows_of_every_length_match_eager():
    def fn(x):
        return torch.softmax(x, -1)

    fast, graphs = compiled_once(fn)
    for m in LENGTHS:
        for rows in (5, 2, 11):  # never the row length (sizes alike share a symbol)
            x = random(rows, m, seed=m)
            assert torch.allclose(fast(x), fn(x), atol=1e-6, rtol=1e-5), (rows, m)
    assert len(graphs) == 1
    # the auto-scheduler's first guess, its vectors sized by the example's row (2 elements)
    assert row_kernel_sources(graphs[0]) == [FIRST_GUESS]


def test_softmax_of_fused_rows_matches_eager():
    # (1, heads, n, n) attention rows: the row loop fuses heads x n, whose row index
    # `int32(f // int64(n)) % heads` the kernel no longer guards
    def fn(x):
        return torch.softmax(x * 0.125, -1)

    fast, graphs = compiled_once(fn)
    for heads, n in [(3, 17), (2, 2), (5, 3), (2, 197), (7, 16), (4, 31)]:
        x = random(1, heads, n, n, seed=n)
        assert torch.allclose(fast(x), fn(x), atol=1e-6, rtol=1e-5), (heads, n)
    assert len(graphs) == 1


def test_layer_norm_rows_of_every_length_match_eager():
    def fn(x, weight, bias):
        return F.layer_norm(x, x.shape[-1:], weight, bias)

    fast, graphs = compiled_once(fn)
    for m in LENGTHS:
        x, weight, bias = random(5, 7, m, seed=m), random(m, seed=1), random(m, seed=2)
        got, expected = fast(x, weight, bias), fn(x, weight, bias)
        assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4), m
    assert len(graphs) == 1
    assert row_kernel_sources(graphs[0]) == [FIRST_GUESS]


@pytest.mark.parametrize("example", [(64, 1000), (1, 12, 197, 197)])
def test_a_softmax_compiled_at_a_long_row_serves_short_ones(example):
    # the example's sizes size the kernel's vectors (64-lane steps, 4 partials); every other
    # length and row count runs the same kernel: its last step masked, its partials whole
    def fn(x):
        return torch.softmax(x, -1)

    fast, graphs = compiled_once(fn)
    x = random(*example, seed=0)
    assert torch.allclose(fast(x), fn(x), atol=1e-6, rtol=1e-5)
    for n in LENGTHS:
        shape = (*example[:-2], 3, n) if len(example) == 2 else (1, 3, n, n)
        x = random(*shape, seed=n)
        assert torch.allclose(fast(x), fn(x), atol=1e-6, rtol=1e-5), shape
    assert len(graphs) == 1 and row_kernel_sources(graphs[0]) == [FIRST_GUESS]


def test_causal_attention_of_a_symbolic_sequence_matches_eager():
    # a GPT-2 block's attention core: scores of a run-time length, masked, softmax, values
    def fn(q, k, v):
        T = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * 0.25
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v

    fast, graphs = compiled_once(fn)
    for T in (5, 2, 17, 33, 3):
        q, k, v = (random(1, 2, T, 16, seed=T + s) for s in range(3))
        got, expected = fast(q, k, v), fn(q, k, v)
        assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4), T
    assert len(graphs) == 1


def test_a_product_with_a_transposed_right_matrix_of_run_time_sizes_matches_eager():
    # b^T is copied in 16 x 16 tiles (as K^T is): whole tiles unguarded, the partial ones
    # peeled, along both of its sizes
    def fn(a, b):
        return a @ b.transpose(-2, -1)

    fast, graphs = compiled_once(fn)
    for n, m, k in [(5, 17, 33), (3, 2, 16), (19, 31, 7), (4, 48, 20)]:
        a, b = random(n, k, seed=n), random(m, k, seed=m)
        assert torch.allclose(fast(a, b), fn(a, b), atol=1e-4, rtol=1e-4), (n, m, k)
    assert len(graphs) == 1


def test_a_linear_layer_of_a_run_time_row_count_prefetches_its_next_weight_panel():
    # rows known at run time (a sequence): the row tiles of a weight panel prefetch the next
    # one, as those of a static row count of several tiles do
    from tensorforge.graph.program import BuiltKernel
    from tests.graph.test_dynamic_and_cuda import _find_compiled

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 165).eval()

    def fn(x):
        return torch.relu(lin(x))

    fast, graphs = compiled_once(fn)
    with torch.no_grad():
        for rows in (40, 17, 3):
            x = random(rows, 64, seed=rows)
            assert torch.allclose(fast(x), fn(x), atol=1e-5, rtol=1e-5), rows
    (graph,) = graphs
    (kernel,) = [s for s in _find_compiled(graph).steps if isinstance(s, BuiltKernel)]
    assert "llvm.prefetch" in kernel.module.get_source()


def test_each_symbol_is_bound_once_per_call_from_its_own_argument():
    # Dynamo passes every symbol of dynamic=True as an int argument: no input size is read
    from tests.graph.test_dynamic_and_cuda import _find_compiled

    fast, graphs = compiled_once(lambda x: torch.softmax(x, -1))
    x = random(5, 17, seed=0)
    fast(x)
    compiled = _find_compiled(graphs[0])
    assert compiled._shape_symbols == []
    names = compiled.program.symbols.var_names()
    assert sorted(compiled._bind([5, 17, x])) == names and len(names) == 2


def test_size_hints_are_read_from_either_name_of_the_example_map():
    """torch 2.13's shape environment holds the examples as backed_var_to_val; older releases
    name the same map var_to_val: either gives the hint."""
    from types import SimpleNamespace

    import sympy

    from tensorforge.graph.symbols import Symbols

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    for name in ("backed_var_to_val", "var_to_val"):
        env = SimpleNamespace(var_to_range={}, **{name: {s0: sympy.Integer(197)}})
        size = SimpleNamespace(node=SimpleNamespace(expr=s0, shape_env=env))
        symbols = Symbols()
        symbols.size(size)
        assert list(symbols.size_hints().values()) == [197], name


def test_element_wise_kernels_of_run_time_sizes_run_along_their_rows():
    """A padding (a 3 x 3 convolution's input) and a strided slice at run-time sizes: vectors
    along the last axis, each row's partial vector peeled; rows shorter than a vector and
    longer, at several sizes, symbolic in every graph Dynamo makes."""

    def fn(x, w):
        return F.relu(F.conv2d(x, w, padding=1)), F.pad(x, (2, 1, 0, 3))[:, :, ::2] * 2

    fast, graphs = compiled_once(fn)
    w = random(4, 3, 3, 3, seed=2)
    for n, h, width in ((2, 5, 3), (3, 7, 37), (2, 4, 17)):
        x = random(n, 3, h, width, seed=h)
        for got, expected in zip(fast(x, w), fn(x, w)):
            torch.testing.assert_close(got, expected, rtol=2e-5, atol=2e-5)
    assert graphs
