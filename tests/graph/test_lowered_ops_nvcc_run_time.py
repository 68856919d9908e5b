"""The kernels of math, index reduction, scan (cumsum, cumprod, cummax / cummin, logcumsumexp),
scatter (ir_builder programs), adaptive pool and layer norm lowerings built for CUDA at run-time sizes (dynamic=True: sizes are
kernel arguments, cumsum takes its two-level form, adaptive windows their bounds) and compiled by
nvcc for sm_90a and sm_80 (no GPU: the build is what counts; the static builds are each test file's
own)."""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tests.graph.test_adaptive_pools_and_layer_norms import (  # noqa: E402
    layer_norms,
    norm_inputs,
    pools,
)
from tests.graph.test_lower_bits import gap_inputs, gaps  # noqa: E402
from tests.graph.test_lower_cumulative import scans  # noqa: E402
from tests.graph.test_lower_index_reduce import index_reductions, products, with_ties_and_nan  # noqa: E402
from tests.graph.test_lower_math import integer_math, pointwise_math, signed_divisors  # noqa: E402
from tests.graph.test_lower_norms import run_time_sized as norms_and_views  # noqa: E402
from tests.graph.test_lower_scans import every_dimension  # noqa: E402
from tests.graph.test_lower_scatter import run_time_inputs, run_time_sized  # noqa: E402
from tests.graph.test_lowering import rand  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def all_gaps(a, b, c, x, y):
    return (*gaps(a, b, c, x, y), *norms_and_views(x, y[:3]))


def one_row(x):
    # row operators of a 1-d tensor: one row of a run-time length (the simple schedule's exps
    # were a local array of that length: a BuildError, the graph run eagerly)
    return torch.softmax(x, 0), torch.log_softmax(x * 2, 0), F.layer_norm(x, x.shape)


def index_and_products(x):
    return (*index_reductions(x), *products(x))


def all_scans(x):  # cumsum, cumprod, cummax / cummin with indices, logcumsumexp
    return (*every_dimension(x), *scans(x))


CASES = {
    "pointwise": (pointwise_math, lambda: [rand(3, 5, 7, seed=1), rand(5, 7, seed=2)]),
    "integers": (integer_math, lambda: [torch.randint(-50, 50, (4, 13)), signed_divisors(13, seed=6)]),
    "index": (index_and_products, lambda: [with_ties_and_nan(3)]),
    "scans": (all_scans, lambda: [rand(3, 131, seed=4)]),
    "pools": (pools, lambda: [rand(2, 3, 7, 11, seed=5)]),
    "layer_norms": (layer_norms, lambda: norm_inputs(6)),
    "gaps": (all_gaps, gap_inputs),  # bits, signs, clamps, norms, boolean reductions, diagonals
    "one_row": (one_row, lambda: [rand(257, seed=9)]),
    "scatters": (run_time_sized, lambda: run_time_inputs(5, 13, seed=5)),  # ir_builder kernels
}  # fmt: skip


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_run_time_size_builds_compile_with_nvcc(case, arch):
    from tests.graph.graph_fuzz_nvcc import nvcc_errors

    fn, inputs = CASES[case]
    modules = run_time_modules(fn, inputs(), arch)
    assert modules
    assert nvcc_errors(modules, arch) is None


def run_time_modules(fn, inputs, arch) -> list:
    """The built kernels of `fn` compiled with dynamic=True for `arch` (each graph's, none run
    eagerly, every one with size arguments)."""
    from tensorforge.graph import backend
    from tensorforge.graph.program import BuiltKernel
    from tests.graph.test_dynamic_and_cuda import _find_compiled

    graphs = []

    def keep(gm, example_inputs, **kwargs):
        options = {"target": f"cuda -arch={arch.rstrip('a')}"}
        graphs.append(backend(gm, example_inputs, options=options))
        return graphs[-1]

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(fn, backend=keep, dynamic=True)(*inputs)
    except Exception:  # noqa: BLE001 - without a GPU the call cannot run; the build is what counts
        pass
    found = [_find_compiled(g) for g in graphs]
    assert found and all(f is not None for f in found)
    assert all(f.program.fallbacks == [] and f.program.symbols.var_names() for f in found)
    modules = {id(s.module): s.module for f in found for s in f.steps if isinstance(s, BuiltKernel)}
    return list(modules.values())
