"""The backend's `schedule` option: kernels with no tuning record take the auto-scheduler's first
guess (tune.auto.analytic) by default, except the anchors the ops library schedules by hand; each
result against eager torch on random data with prime and 1 extents, and the source reported."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.errors import ArgumentError  # noqa: E402
from tensorforge.graph import Options, compile_aten, decompositions  # noqa: E402
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.graph.report import relative_error  # noqa: E402
from tensorforge.graph.schedules import FIRST_GUESS, HAND_SCHEDULED, SOURCES  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")


def rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def model(x, w, b, img, cw, gamma, beta):
    """Element-wise chains, reductions, a window, layer norm, softmax, matmul + bias + GELU,
    conv + BN-like affine + ReLU: one kernel each (each result is an output)."""
    y = torch.tanh(x) * 0.5 + x.exp().clamp(max=3.0)
    total = (x * x).sum(-1)
    norm = F.layer_norm(x + y, (x.shape[-1],), gamma, beta)
    soft = torch.softmax(x * 2.0, -1)
    gelu = F.gelu(x @ w + b)
    conv = F.relu(F.conv2d(img, cw, padding=1) * 1.5 - 0.25)
    pool = F.max_pool2d(img, 2)
    return y, total, norm, soft, gelu, conv, pool


def inputs():
    return [
        rand(7, 13, seed=1),  # x: prime extents
        rand(13, 11, seed=2),  # w
        rand(11, seed=3),  # b
        rand(1, 3, 5, 32, seed=4),  # img: batch 1, rows of 2 (AVX-512) or 4 (AVX2) vectors: direct
        rand(5, 3, 3, 3, seed=5),  # conv weight
        rand(13, seed=6),  # gamma
        rand(13, seed=7),  # beta
    ]


def compile_with(options: dict):
    args = inputs()
    gm = make_fx(model, decomposition_table=decompositions())(*args)
    compiled = compile_aten(gm, args, {1: args[1], 4: args[4]}, Options.of(options))
    got = compiled(list(args))
    for k, (g, e) in enumerate(zip(got, model(*args))):
        assert g.shape == e.shape
        assert relative_error(g, e) <= 1e-4, f"output {k}: error {relative_error(g, e):.2e}"
    compiled = getattr(compiled, "compiled", compiled)
    return [s for s in compiled.steps if isinstance(s, BuiltKernel)]


def kind(step) -> str | None:
    return step.spec.anchor.kind if step.spec.anchor is not None else None


def test_auto_takes_the_first_guess_where_ops_has_no_schedule(capsys):
    kernels = compile_with({"report": True})  # "auto" is the default
    kinds = {kind(k) for k in kernels}
    assert {None, "reduce", "window", "layer_norm", "matmul", "conv2d", "softmax"} <= kinds
    for k in kernels:
        if kind(k) in HAND_SCHEDULED:
            assert k.source != FIRST_GUESS, k.spec.name
        else:
            assert k.source == FIRST_GUESS, (k.spec.name, k.source)
    rows = [line for line in capsys.readouterr().err.splitlines() if "native_layer_norm" in line]
    assert rows and FIRST_GUESS in rows[0]  # the report names each kernel's schedule source


def test_first_guess_everywhere_and_rules_nowhere():
    guessed = compile_with({"schedule": "first_guess"})
    assert all(k.source == FIRST_GUESS for k in guessed), [k.source for k in guessed]
    ruled = compile_with({"schedule": "rules"})
    assert not any(k.source == FIRST_GUESS for k in ruled)


def test_an_unknown_schedule_option_is_named():
    with pytest.raises(ArgumentError, match="schedule.*'fast'"):
        Options.of({"schedule": "fast"})


def test_first_guess_plans_parallel_loops_for_the_build_threads(monkeypatch):
    # one thread: no parallel loop (its fused tiles kept guards LLVM could not hoist); two:
    # built again (the graph cache is keyed on the thread count), with parallel loops
    def parallel(k):
        return bool(k.module[k.module.entry_name].source.num_threads_symbol)

    monkeypatch.setenv("TF_NUM_THREADS", "1")
    kernels = compile_with({"schedule": "first_guess"})
    big = [k for k in kernels if kind(k) in ("conv2d", "layer_norm", "softmax")]
    assert big and not any(parallel(k) for k in big)
    monkeypatch.setenv("TF_NUM_THREADS", "2")
    kernels = compile_with({"schedule": "first_guess"})
    big = [k for k in kernels if kind(k) in ("conv2d", "layer_norm", "softmax")]
    assert big and all(parallel(k) for k in big)


def test_auto_keeps_the_row_schedule_for_softmax_rows_of_whole_vectors():
    # rows of whole vectors: the rules' vector accumulators (the first guess combined 64
    # partials a row one after another); a row with a tail keeps the first guess
    def fn(x, y):
        mask = torch.tril(torch.ones(32, 32, dtype=torch.bool))
        return torch.softmax((x * 0.5).masked_fill(~mask, float("-inf")), -1), torch.softmax(y, -1)

    args = [rand(3, 32, 32, seed=1), rand(5, 13, seed=2)]
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    compiled = compile_aten(gm, args, {}, Options.of({}))
    for got, expected in zip(compiled(list(args)), fn(*args)):
        assert relative_error(got, expected) <= 1e-5
    sources = [k.source for k in compiled.steps if kind(k) == "softmax"]
    assert sources == [SOURCES["softmax"], FIRST_GUESS], sources


OTHER_CPUS = ["llvm -mcpu=znver3", "llvm -mcpu=skylake-avx512"]  # AVX2 (8 lanes), AVX-512


@pytest.mark.parametrize("target", OTHER_CPUS)
def test_kernels_for_other_cpus_match_eager(target):
    """Every kernel of the model built for another CPU's facts (run here: this host runs both)."""
    compile_with({"target": target})


def blocks(x, img, gn_w, gn_b, cw):
    """Model-block pieces whose index arithmetic and vector splits depend on the lane count:
    group norm + SiLU over odd groups (the simplifier's ramp quotients), softmax over batched
    rows with a tail (the row location, partial combines), a 3x3 conv of 14-column rows (the
    lanewise pieces: 8 + 4 + 2 at 8 lanes) with a BN-like epilogue, and a max pool."""
    gn = F.silu(F.group_norm(img, 3, gn_w, gn_b))
    soft = torch.softmax(x, -1)
    conv = F.relu(F.conv2d(img, cw, padding=1) * 0.75 + 0.1)
    pool = F.max_pool2d(img, 3, 2, 1)
    return gn, soft, conv, pool


@pytest.mark.parametrize("target", ["llvm", *OTHER_CPUS])
def test_model_blocks_for_other_cpus_match_eager(target, monkeypatch):
    monkeypatch.setenv("TF_NUM_THREADS", "1")  # no loops fused for threads: the rows as they are
    args = [rand(1, 2, 5, 19, seed=1), rand(1, 6, 7, 14, seed=2), rand(6, seed=3)]
    args += [rand(6, seed=4), rand(5, 6, 3, 3, seed=5)]
    gm = make_fx(blocks, decomposition_table=decompositions())(*args)
    compiled = compile_aten(gm, args, {4: args[4]}, Options.of({"target": target}))
    for k, (got, expected) in enumerate(zip(compiled(list(args)), blocks(*args))):
        assert relative_error(got, expected) <= 1e-5, f"output {k}: {relative_error(got, expected)}"


def pools(x):
    """Window reductions over odd sizes, whose vectors of output columns have tails and whose
    first and last windows reach into the padding."""
    return (
        F.max_pool2d(x, 3, 2, 1),
        F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
        F.max_pool2d(x, 3, 1, 1, dilation=2),
        F.max_pool2d(x, 2),
        F.avg_pool2d(x, 3, 2, 1),
        F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    )


@pytest.mark.parametrize("schedule", ["auto", "rules"])
@pytest.mark.parametrize("target", ["llvm", *OTHER_CPUS])
@pytest.mark.parametrize("width", [9, 37, 56])  # a vector with a tail; several; whole vectors
def test_pools_propagate_nan_and_keep_infinities_as_eager(target, width, schedule, monkeypatch):
    monkeypatch.setenv("TF_NUM_THREADS", "1")
    x = rand(1, 3, 7, width, seed=8)
    x[0, 0, 0, 0] = float("nan")  # the first window, which holds padding
    x[0, 0, 3, 4] = float("nan")
    x[0, 1, 6, width - 1] = float("nan")  # the last column: a clamped lane
    x[0, 1, 2, :] = float("-inf")
    x[0, 2] = float("-inf")  # a whole plane of -inf: padding must not show as 0
    gm = make_fx(pools, decomposition_table=decompositions())(x)
    compiled = compile_aten(gm, [x], {}, Options.of({"target": target, "schedule": schedule}))
    for k, (got, expected) in enumerate(zip(compiled([x]), pools(x))):
        torch.testing.assert_close(got, expected, equal_nan=True, msg=f"output {k}")
    steps = getattr(compiled, "steps", None) or compiled.compiled.steps
    windows = [k for k in steps if isinstance(k, BuiltKernel) and kind(k) == "window"]
    source = FIRST_GUESS if schedule == "auto" else SOURCES["window"]
    assert windows and all(k.source == source for k in windows)


def test_a_target_for_another_device_than_the_tensors_is_named():
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x.sin(), backend="tensorforge", options={"target": "cuda"})
    with pytest.raises(Exception, match="compiled for CUDA .* called with a tensor on cpu"):
        compiled(torch.randn(3))
