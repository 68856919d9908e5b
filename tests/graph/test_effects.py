"""Graphs with effect tokens (linalg's error checks) and with values no buffer holds (complex
FFT results), through torch.compile: the same values and errors as eager torch."""

import warnings

import pytest

torch = pytest.importorskip("torch")


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="tensorforge")


@pytest.mark.parametrize(
    "name", ["inv", "solve", "cholesky"]
)  # each checks its result with _linalg_check_errors, an effectful operator
def test_linalg_with_error_checks_matches_eager(name):
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(2, 5, 5, generator=gen)
    a = a @ a.transpose(-1, -2) + 5 * torch.eye(5)  # (positive definite)
    b = torch.randn(2, 5, 3, generator=gen)
    fns = {
        "inv": lambda a, b: torch.linalg.inv(a * 2.0) + 1.0,
        "solve": lambda a, b: torch.linalg.solve(a, b).relu(),
        "cholesky": lambda a, b: torch.linalg.cholesky(a - 0.5) * b.sum(),
    }
    fn = fns[name]
    torch.testing.assert_close(_compiled(fn)(a, b), fn(a, b))


def test_a_singular_matrix_raises_eagers_error():
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        _compiled(lambda a: torch.linalg.inv(a) * 2.0)(torch.ones(3, 3))


def test_complex_values_run_the_graph_eagerly():
    x = torch.randn(6, 37, generator=torch.Generator().manual_seed(6))

    def fn(x):
        return torch.fft.rfft(x.sin(), dim=-1).abs() + 1.0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _compiled(fn)(x)
    assert any("complex64" in str(w.message) for w in caught)
    torch.testing.assert_close(got, fn(x))
