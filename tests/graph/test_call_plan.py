"""The lean call path of a compiled CPU graph (call_plan.py): kernels run from slot arrays made
once per set of sizes, through one native sequence (or ctypes one by one), with the same results
as the general path and as eager torch; intermediates reused across calls, outputs new each call,
eager fallbacks between runs of kernels, one plan per batch size."""

import ctypes

import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.errors import BuildError  # noqa: E402
from tensorforge.graph import Options, backend, compile_aten, decompositions  # noqa: E402
from tensorforge.graph.call_plan import CallPlan, _Segment  # noqa: E402
from tensorforge.graph.program import CompiledGraph  # noqa: E402
from tensorforge.runtime.native_sequence import sequence_ir  # noqa: E402


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def relative_error(got, expected) -> float:
    return ((got - expected).abs().max() / expected.abs().max()).item()


def mlp(x, w1, b1, w2, b2):
    """Two matmuls with an intermediate, an element-wise tail, two outputs (one a view)."""
    h = torch.nn.functional.gelu(x @ w1 + b1)
    y = h @ w2 + b2
    return torch.tanh(y) * 0.5 + y, y.reshape(-1)


def compiled_of(fn, inputs, constants=()):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten(gm, inputs, {k: inputs[k] for k in constants}, Options())
    assert isinstance(compiled, CompiledGraph)
    return compiled


def mlp_inputs(batch=3, seed=0):
    return [
        rand(batch, 13, seed=seed),
        rand(13, 29, seed=1),
        rand(29, seed=2),
        rand(29, 7, seed=3),
        rand(7, seed=4),
    ]


def segments(compiled):
    return [r for plan in compiled._plans.values() for r in plan.runs if isinstance(r, _Segment)]


def test_repeated_calls_match_eager_and_return_new_outputs():
    inputs = mlp_inputs()
    compiled = compiled_of(mlp, inputs, constants=(1, 2, 3, 4))
    first = compiled(list(inputs))
    assert len(compiled._plans) == 1 and all(s.sequence is not None for s in segments(compiled))
    kept = [t.clone() for t in first]
    for seed in (5, 6, 7):  # new inputs each call: the intermediates' arenas are reused
        inputs[0] = rand(3, 13, seed=seed)
        got = compiled(list(inputs))
        for g, e in zip(got, mlp(*inputs)):
            assert g.shape == e.shape and relative_error(g, e) < 1e-5
        for g, f in zip(got, first):  # outputs are never the previous call's memory
            assert g.data_ptr() != f.data_ptr()
    for f, k in zip(first, kept):  # and the first call's outputs were not written again
        assert torch.equal(f, k)
    assert len(compiled._plans) == 1


def test_the_plan_agrees_with_the_general_path_and_with_ctypes_calls():
    inputs = mlp_inputs(seed=9)
    compiled = compiled_of(mlp, inputs, constants=(1, 2, 3, 4))
    lean = compiled(list(inputs))
    compiled.lean = False
    general = compiled(list(inputs))
    compiled.lean = True
    for segment in segments(compiled):  # no native sequence: each kernel through ctypes
        segment.sequence = None
    one_by_one = compiled(list(inputs))
    for a, b, c in zip(lean, general, one_by_one):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_an_eager_fallback_between_kernels():
    def fn(x, w):
        h = torch.relu(x @ w)
        s = torch.polygamma(2, h[:, :1] + 1.0)  # not lowered: runs in eager torch
        return torch.sigmoid(s) * 2.0 + h

    inputs = [rand(5, 11, seed=1), rand(11, 17, seed=2)]
    compiled = compiled_of(fn, inputs, constants=(1,))
    assert compiled.program.fallbacks
    for seed in (3, 4):
        inputs[0] = rand(5, 11, seed=seed)
        (got,) = compiled(list(inputs))
        assert relative_error(got, fn(*inputs)) < 1e-5
    (plan,) = compiled._plans.values()
    kinds = [type(r).__name__ for r in plan.runs]
    assert kinds[0] == kinds[-1] == "_Segment" and "EagerSpec" in kinds, kinds


def test_one_plan_per_batch_size_without_recompiling(monkeypatch):
    import sys

    backend_module = sys.modules["tensorforge.graph.backend"]

    made = []

    class Recorded(CompiledGraph):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(backend_module, "CompiledGraph", Recorded)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(13, 29), torch.nn.GELU(), torch.nn.Linear(29, 7), torch.nn.Tanh()
    ).eval()
    with torch.no_grad():
        torch._dynamo.reset()
        fast = torch.compile(model, backend=backend)
        for batch in (3, 5, 3, 2, 5):
            x = torch.randn(batch, 13)
            torch._dynamo.mark_dynamic(x, 0)
            got = fast(x)
            assert got.shape == (batch, 7) and relative_error(got, model(x)) < 1e-5
    assert len(made) == 1 and made[0].program.symbols.var_names()  # one graph, a symbolic batch
    assert len(made[0]._plans) == 3  # batch 3, 5 and 2


def test_a_plan_reads_the_thread_count_each_call(monkeypatch):
    inputs = [rand(64, 256, seed=1)]
    compiled = compiled_of(lambda x: (torch.exp(x) * 2.0 + x,), inputs)
    compiled(list(inputs))
    (plan,) = compiled._plans.values()
    if not plan.threads:
        pytest.skip("no parallel loop in this build")
    monkeypatch.setenv("TF_NUM_THREADS", "1")
    compiled(list(inputs))
    assert all(t.value == 1 for t in plan.threads)
    monkeypatch.setenv("TF_NUM_THREADS", "2")
    (got,) = compiled(list(inputs))
    assert all(t.value == 2 for t in plan.threads)
    assert relative_error(got, torch.exp(inputs[0]) * 2.0 + inputs[0]) < 1e-6


def test_sequence_ir_passes_each_slot_and_refuses_a_float_scalar():
    text = sequence_ir([(0x1000, ["ptr", "i32"], [0, 2]), (0x2000, ["ptr", "i64"], [1, 2])])
    assert text.count("call void") == 2 and "trunc i64" in text and "inttoptr i64 4096" in text
    with pytest.raises(BuildError, match="one slot per parameter"):
        sequence_ir([(0x1000, ["ptr"], [0, 1])])

    class FloatKernel:
        class source:  # noqa: N801 - a KernelSource's shape
            entry = "k"
            params = [type("P", (), {"kind": "scalar", "dtype": "float32", "name": "alpha"})]

        _function = ctypes.cast(0x1000, ctypes.CFUNCTYPE(None))

    from tensorforge.runtime.native_sequence import parameter_types

    with pytest.raises(BuildError, match="'alpha'.*float32"):
        parameter_types(FloatKernel)


def test_plans_are_not_used_while_reporting():
    inputs = mlp_inputs()
    compiled = compiled_of(mlp, inputs, constants=(1, 2, 3, 4))
    compiled.timings = []
    compiled(list(inputs))
    assert compiled.timings and not compiled._plans
    compiled.timings = None
    compiled(list(inputs))
    assert isinstance(next(iter(compiled._plans.values())), CallPlan)


def test_a_graph_keeps_only_the_constants_its_kernels_read():
    # linear: the weight is transposed, then packed for the matmul, at lowering; only the
    # packed panels (and the bias) are read by a kernel, so only they are kept, once
    def linear(x, w, b):
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))

    inputs = [rand(5, 96, seed=0), rand(160, 96, seed=1), rand(160, seed=2)]
    compiled = compiled_of(linear, inputs, constants=(1, 2))
    expected = linear(*inputs)
    assert relative_error(compiled(list(inputs))[0], expected) < 1e-5
    read = {b for step in compiled.steps for b in program_reads(step) if b.kind == "constant"}
    kept = compiled.program.constants
    assert set(kept) <= read and kept
    weight_bytes = sum(t.numel() * t.element_size() for t in inputs[1:])
    assert sum(t.numel() * t.element_size() for t in kept.values()) < 2 * weight_bytes
    assert relative_error(compiled(list(inputs))[0], expected) < 1e-5  # and it runs again


def program_reads(step):
    from tensorforge.graph.program import _reads_of

    return _reads_of(step)
