"""A few of the graph fuzzer's programs built for sm_90a and sm_80 and compiled by nvcc (no
GPU): the kernels must generate CUDA that nvcc and ptxas accept. The sweep (300 programs x 2
targets, ~10 min here): `python -m tests.graph.graph_fuzz_nvcc --cases 300`."""

import shutil

import pytest

torch = pytest.importorskip("torch")

from tests.graph import graph_fuzz_nvcc  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


@pytest.mark.parametrize("arch", graph_fuzz_nvcc.ARCHES)
@pytest.mark.parametrize("seed", [0, 3, 9])  # convolutions, products, row operators
def test_random_programs_compile_for_cuda(seed, arch):
    problem = graph_fuzz_nvcc.check(seed, arch)
    assert problem is None, problem


def test_a_program_that_builds_no_kernel_is_reported(monkeypatch):
    # nvcc has nothing to reject then: a pass would check nothing
    monkeypatch.setattr(graph_fuzz_nvcc, "cuda_modules", lambda case, arch: [])
    assert "no kernel built" in graph_fuzz_nvcc.check(0, "sm_80")


class _Source:
    def __init__(self, text):
        self.text = text

    def get_source(self, kind):
        return self.text


def test_nvcc_rejecting_one_module_of_several_is_reported():
    good = _Source('extern "C" __global__ void ok(float* a) { a[0] = 1.f; }')
    bad = _Source('extern "C" __global__ void broken(float* a) { a[0] = undeclared; }')
    assert graph_fuzz_nvcc.nvcc_errors([good, good], "sm_80") is None
    problem = graph_fuzz_nvcc.nvcc_errors([good, bad, good], "sm_80")
    assert "undeclared" in problem and "void broken" in problem
