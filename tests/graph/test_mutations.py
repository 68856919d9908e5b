"""Graphs that write tensors in place: make_fx graphs handed to compile_aten as they are
(graph/mutations.py functionalizes them), and the slice/select/diagonal scatters that
functionalized in-place writes into part of a tensor become (graph/lower_views.py)."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.graph import Options, backend, compile_aten  # noqa: E402
from tests.graph.test_dynamic_and_cuda import _find_compiled  # noqa: E402
from tests.graph.test_lowering import check, rand  # noqa: E402

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")


def run_traced(fn, *inputs):
    """fn traced by make_fx (no decompositions: its in-place operators stay) and compiled;
    returns ours and eager's outputs and inputs after one call each, and the program."""
    gm = make_fx(fn)(*[x.clone() for x in inputs])
    ours_in, eager_in = [x.clone() for x in inputs], [x.clone() for x in inputs]
    compiled = compile_aten(gm, ours_in, {}, Options())
    ours, eager = compiled(ours_in), fn(*eager_in)
    eager = list(eager) if isinstance(eager, (tuple, list)) else [eager]
    program = compiled.compiled.program if hasattr(compiled, "written") else compiled.program
    return ours, eager, ours_in, eager_in, program


def assert_close(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def test_cosine_similarity_traced_with_its_in_place_clamp():
    # cosine_similarity clamps both norms with clamp_min_: the first norm's storage was reused
    # for the second's while the first was still to be read (errors of 0.15-0.23)
    a, b = rand(5, 7, seed=1), rand(5, 7, seed=2)
    ours, eager, _, _, program = run_traced(lambda a, b: F.cosine_similarity(a, b, dim=1), a, b)
    assert_close(ours, eager)
    assert program.fallbacks == []


def test_in_place_operators_on_intermediates_and_views():
    def fn(x):
        y = x * 3
        row = y[1]  # a view, read after its base is written
        y.add_(1)
        y.clamp_(-2.0, 2.5)
        return row * 2, y.relu_()

    ours, eager, _, _, program = run_traced(fn, rand(4, 5, seed=3) * 2)
    assert_close(ours, eager)
    assert program.fallbacks == []


def test_inputs_written_in_place_are_written_back():
    def fn(a, b):
        a[0].mul_(2)  # through a view
        b.add_(a)
        return (a * b).sum(1)

    a, b = rand(3, 4, seed=4), rand(3, 4, seed=5)
    ours, eager, ours_in, eager_in, program = run_traced(fn, a, b)
    assert_close(ours, eager)
    assert_close(ours_in, eager_in)
    assert not torch.equal(eager_in[1], b)  # (the inputs did change)
    assert program.fallbacks == []


def test_an_input_reshaped_in_place_keeps_the_graph_as_it_is():
    # the caller sees x's shape change: the graph is not functionalized, squeeze_ runs eagerly
    x = rand(1, 7, seed=6)
    gm = make_fx(lambda x: x.squeeze_(0) * 2)(x.clone())
    ours_in = [x.clone()]
    compiled = compile_aten(gm, ours_in, {}, Options())
    got = compiled(ours_in)
    torch.testing.assert_close(got[0], x[0] * 2)
    assert ours_in[0].shape == (7,)
    assert [name for name, _, _ in compiled.program.fallbacks] == ["squeeze_"]


def test_slice_select_and_diagonal_scatters():
    x, s = rand(7, 11, seed=1), rand(7, 3, seed=2)
    check(lambda x, s: aten.slice_scatter(x * 2, s + 1, 1, 2, 9, 3), x, s)
    check(lambda x, s: aten.slice_scatter(x * 2, s[:, :2], 1, -3, -1), x, s)
    check(lambda x, s: aten.slice_scatter(x, s.t(), 0, 3), x.t()[:6].contiguous(), s)
    check(lambda x, s: aten.select_scatter(x * 2, s[:, 0], 1, -2), x, s)
    # a float64 source keeps the input's dtype (torch's decomposition promoted it)
    check(lambda x, s: aten.select_scatter(x, s.reshape(-1)[:11].double(), 0, 6), x, s)
    check(lambda x, s: aten.diagonal_scatter(x * 2, s[0, :2] + 1, 9), x, s)
    check(lambda x, s: aten.diagonal_scatter(x * 2, s[:5, 0], -2), x, s)
    check(lambda x, s: aten.diagonal_scatter(x.reshape(7, 1, 11), s.reshape(-1)[:11, None]), x, s)
    check(lambda x, s: aten.copy(x, (s[:1, :1] > 0.5)), x, s)


def test_writes_into_part_of_a_tensor_through_dynamo():
    def fn(x, s):
        y = x * 2
        y[:, 1:4] = s
        y[0] += 1
        y.diagonal().mul_(3)
        y[:, -1] = 0.5
        return y

    compiled = []

    def counting(gm, example_inputs, **kwargs):
        compiled.append(backend(gm, example_inputs, **kwargs))
        return compiled[-1]

    x, s = rand(7, 11, seed=7), rand(7, 3, seed=8)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(fn, backend=counting)(x, s)
    torch.testing.assert_close(got, fn(x, s))
    assert [_find_compiled(c).program.fallbacks for c in compiled] == [[]]


def test_an_eager_result_in_a_temps_storage_is_copied(monkeypatch):
    # unfunctionalized, each clamp_min_ runs eagerly on a temp and returns that temp: the
    # first norm's arena was free after its clamp and took the second norm (errors of 0.2)
    import importlib

    graph_backend = importlib.import_module("tensorforge.graph.backend")  # (the module)
    monkeypatch.setattr(graph_backend, "functional", lambda gm, inputs: (gm, []))
    a, b = rand(5, 7, seed=1), rand(5, 7, seed=2)
    gm = make_fx(lambda a, b: F.cosine_similarity(a, b, dim=1))(a, b)
    compiled = compile_aten(gm, [a, b], {}, Options())
    assert len(compiled.program.fallbacks) == 2
    torch.testing.assert_close(compiled([a, b])[0], F.cosine_similarity(a, b, dim=1))


def test_as_strided_of_values_that_fill_their_storage():
    x = rand(6, 35, seed=9)
    check(lambda x: torch.as_strided(x * 2, (35, 6), (1, 35)), x)  # a transpose
    check(lambda x: torch.as_strided(x + 1, (4, 3, 10), (40, 7, 2), 5), x)  # overlapping, offset
    check(lambda x: torch.as_strided(x.mean(1, keepdim=True), (1, 6, 1), (6, 1, 6)), x)
    check(lambda x: torch.as_strided(x, (210,), (1,)) * 3, x)
    # eager's strides of the source, not ours: a transpose's result is not row-major
    check(lambda x: torch.as_strided(x.t() * 1, (5, 5), (1, 6)).exp(), x)
    check(lambda x: torch.as_strided(x.t(), (5, 5), (1, 6)).exp(), x)


def test_as_strided_of_part_of_its_storage_runs_the_graph_eagerly(monkeypatch):
    # x[:, 1:] starts inside its storage and leaves gaps: our buffers don't hold what as_strided
    # would read there, so the whole graph runs eagerly (a warning says so)
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "0")
    x = rand(6, 35, seed=10)

    def fn(x):
        return torch.as_strided(x[:, 1:], (5, 5), (1, 36), 2).exp()

    gm = make_fx(fn)(x)
    with pytest.warns(UserWarning, match="as_strided of a tensor that does not fill its storage"):
        compiled = compile_aten(gm, [x], {}, Options())
    torch.testing.assert_close(compiled(x), fn(x))  # (the graph itself: gm.forward)
