"""Each ATen lowering against eager torch on random data with awkward (prime, 1) extents.

Graphs are captured with make_fx and the backend's decompositions (no Dynamo: quicker), several
operators per graph, each result an output of its own so each is its own kernel.
"""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import tensorforge as tf  # noqa: E402
from tensorforge.graph import Options, compile_aten, decompositions  # noqa: E402
from tensorforge.graph.program import CompiledGraph  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def compile_fn(fn, inputs, constants=(), schedule="auto"):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    known = {k: inputs[k] for k in constants}
    compiled = compile_aten(gm, inputs, known, Options(schedule=schedule))
    assert isinstance(compiled, CompiledGraph)
    return compiled


def check(fn, *inputs, constants=(), rtol=1e-5, fallbacks=0, schedule="auto"):
    compiled = compile_fn(fn, list(inputs), constants, schedule)
    got = compiled(list(inputs))
    expected = fn(*inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype, f"output {k}: {g.shape} {g.dtype}"
        if e.dtype.is_floating_point:
            finite = torch.isfinite(e)
            assert torch.equal(finite, torch.isfinite(g))
            assert torch.allclose(
                g[~finite], e[~finite], equal_nan=True
            )  # NaN where NaN, same infs
            g, e = g[finite], e[finite]
            scale = max(e.abs().max().item(), 1e-6) if e.numel() else 1.0
            error = (g - e).abs().max().item() / scale if e.numel() else 0.0
            assert error < rtol, f"output {k}: relative error {error:.2e}"
        else:
            assert torch.equal(g, e), f"output {k} differs"
    assert len(compiled.program.fallbacks) == fallbacks, compiled.program.fallbacks
    return compiled


def check_bfloat16(fn, *half):
    """`fn` compiled on bfloat16 inputs, against float32 on the same values: each output of
    eager's dtype, at most twice eager's error plus an eps (over the reference's finite
    values; integer and bool outputs equal to eager's), nothing run eagerly."""
    compiled = compile_fn(fn, list(half))
    got, eager = compiled(list(half)), fn(*half)
    reference = fn(*[t.float() if t.dtype == torch.bfloat16 else t for t in half])
    eps = torch.finfo(torch.bfloat16).eps
    for k, (g, e, r) in enumerate(zip(got, eager, reference)):
        assert g.dtype == e.dtype
        if not r.dtype.is_floating_point:
            assert torch.equal(g, e), k
            continue
        finite = torch.isfinite(r)
        scale = r[finite].abs().max()
        ours = (g.float() - r)[finite].abs().max() / scale
        eagers = (e.float() - r)[finite].abs().max() / scale
        assert ours <= 2 * eagers + eps, (k, ours.item(), eagers.item())
    assert compiled.program.fallbacks == []


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_unary_activations():
    x = rand(3, 1, 7) * 3

    def fn(x):
        return (
            F.relu(x),
            F.gelu(x),
            F.gelu(x, approximate="tanh"),
            F.silu(x),
            torch.sigmoid(x),
            torch.tanh(x),
            F.hardtanh(x, -0.5, 2.0),
            F.relu6(x * 3),
            F.leaky_relu(x, 0.1),
            torch.exp(x),
            torch.log(x.abs() + 1),
            torch.rsqrt(x.abs() + 0.5),
            torch.sqrt(x.abs()),
            -x,
            x.abs(),
            torch.erf(x),
            torch.reciprocal(x + 10),
            x.clamp(min=-0.3, max=0.4),
        )

    check(fn, x)


def test_binary_broadcasting_comparisons_where():
    a, b, c = rand(5, 1, 7, seed=1), rand(3, 1, seed=2), rand(7, seed=3)

    def fn(a, b, c):
        mask = a > b
        return (
            a + b,
            a - c * 2,
            torch.add(a, b, alpha=0.5),
            a * b,
            a / (b.abs() + 1),
            a**2,
            (a.abs() + 1) ** 0.5,
            (a.abs() + 1) ** 1.7,
            torch.pow(a.abs() + 1, b),
            torch.maximum(a, c),
            torch.minimum(a, b),
            mask,
            (a <= c) & (b != 0),
            torch.where(mask, a, c),
            a.masked_fill(a < 0, -1.5),
            (a == a).float() + (a >= 0).to(torch.float32),
            torch.div(a * 10, 3, rounding_mode="floor"),
            1 - a,
        )

    check(fn, a, b, c)


def test_reductions_and_row_operators():
    x = rand(3, 5, 17, seed=4)
    w, b = rand(17, seed=5), rand(17, seed=6)

    def fn(x, w, b):
        return (
            x.sum(-1),
            x.sum((0, 2), keepdim=True),
            x.mean(-1, keepdim=True),
            x.mean((1, 2)),
            x.amax(-1),
            x.amin(1),
            x.var(-1),
            torch.var_mean(x, dim=-1, correction=0)[0],
            x.sum(),
            torch.softmax(x, -1),
            torch.log_softmax(x * 2, -1),
            F.layer_norm(x, (17,), w, b),
            F.layer_norm(x, (17,)),
            torch.softmax(x.sum(-1), -1),
        )

    check(fn, x, w, b)


def test_sign_isnan_flip_and_repeat_are_kernels():
    # (they ran eagerly: the fuzzer's declines) NaN's sign is 0, a bool its own sign
    x = rand(3, 5, 7, seed=33)
    x[0, 1, 2], x[1, 0, 0], x[2, 4, 6] = float("nan"), 0.0, -0.0

    def fn(x):
        whole = x.to(torch.int64)
        return (
            torch.sign(x), torch.sign(whole), torch.sign(x > 0), torch.isnan(x),
            torch.isnan(whole), x.flip(0), x.flip(-1, 1) + 1, x.repeat(2, 1, 3),
            x.repeat(1, 2, 1, 1), x[0].repeat(3, 1) * x[0].flip(1).repeat(3, 1),
        )  # fmt: skip

    check(fn, x)
    check(lambda y: (y.flip(0), y.repeat(4), torch.sign(y)), rand(1, seed=34))


@pytest.mark.parametrize("dim", [0, 1, 2, -3])
def test_softmax_and_log_softmax_along_any_dimension(dim):
    # rows along `dim`: the input read with it last, the result stored so and read back
    x = rand(2, 7, 5, 3, seed=31)

    def fn(x):
        return torch.softmax(x, dim), torch.log_softmax(x * 3, dim), torch.softmax(x, dim) + x

    check(fn, x)


def test_bfloat16_softmax_along_a_middle_dimension_is_rounded_once():
    # eager's kernel for a middle dimension computes otherwise than for the last one (an
    # ulp apart here and there): both are held to the float32 result, within one rounding
    x = rand(3, 17, 4, seed=32).to(torch.bfloat16)
    compiled = compile_fn(lambda x: (torch.softmax(x, 1), torch.log_softmax(x, 0)), [x])
    got = compiled([x])
    for g, e in zip(got, (torch.softmax(x.float(), 1), torch.log_softmax(x.float(), 0))):
        assert g.dtype == torch.bfloat16
        assert ((g.float() - e).abs().max() / e.abs().max()).item() < 2**-8


def test_row_operators_of_a_0d_tensor_run_eagerly():
    # (its dim 0 or -1 normalized modulo 0: ZeroDivisionError, where it is only unsupported)
    x = rand(5, seed=6)

    def fn(x):
        return torch.softmax(x.sum(), 0) + x, torch.log_softmax(x.sum(), -1) * x

    compiled = check(fn, x, fallbacks=2)
    assert all("0-d" in reason for *_, reason in compiled.program.fallbacks)


@pytest.mark.parametrize("constant_weights", [False, True])
def test_matrix_products(constant_weights):
    x, w, bias = rand(7, 13, seed=7), rand(19, 13, seed=8), rand(19, seed=9)
    p, q = rand(3, 5, 11, seed=10), rand(3, 11, 6, seed=11)

    def fn(x, w, bias, p, q):
        return (
            F.linear(x, w, bias),
            x @ w.t(),
            torch.relu(F.linear(x, w) * 2),
            p @ q,
            F.linear(x.view(7, 1, 13), w),
        )

    check(fn, x, w, bias, p, q, constants=(1, 2) if constant_weights else ())


def test_convolutions_and_pools():
    x = rand(2, 4, 11, 9, seed=12)
    w1, b1 = rand(6, 4, 3, 3, seed=13), rand(6, seed=14)
    w2 = rand(4, 1, 3, 3, seed=15)  # depthwise
    w3 = rand(6, 2, 2, 3, seed=16)  # two groups, rectangular

    def fn(x, w1, b1, w2, w3):
        return (
            F.conv2d(x, w1, b1, padding=1),
            F.conv2d(x, w1, None, stride=2, dilation=2),
            F.relu(F.conv2d(x, w2, None, stride=2, padding=1, groups=4)),
            F.conv2d(x, w3, b1, padding=(1, 0), groups=2),
            F.max_pool2d(x, 3, 2, padding=1),
            F.max_pool2d(x, 3, 2, padding=1, ceil_mode=True),  # a last window past the edge
            F.max_pool2d(x - 3, 2, 1, padding=1),  # all negative: padding must not win
            F.max_pool2d(x, 3, 1, padding=1, dilation=2),  # dilated: the padding tested
            F.avg_pool2d(x, 2),
            F.avg_pool2d(x, 3, 2, padding=1, count_include_pad=False),
            F.adaptive_avg_pool2d(x[:, :, :10, :9], (2, 3)),
        )

    check(fn, x, w1, b1, w2, w3, constants=(1, 2, 3, 4))


def test_batch_norm_folds_into_the_convolution():
    x = rand(2, 3, 7, 5, seed=17)
    conv, bn = torch.nn.Conv2d(3, 5, 3), torch.nn.BatchNorm2d(5).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    params = [conv.weight.detach(), conv.bias.detach(), bn.weight.detach(), bn.bias.detach()]
    stats = [bn.running_mean, bn.running_var]

    def fn(x, w, b, g, beta, mean, var):
        y = F.conv2d(x, w, b)
        return F.relu(F.batch_norm(y, mean, var, g, beta, False, 0.1, 1e-5))

    compiled = check(fn, x, *params, *stats, constants=(1, 2, 3, 4, 5, 6))
    kernels = [s.spec.nodes for s in compiled.steps if hasattr(s, "spec")]
    (fused,) = [nodes for nodes in kernels if "convolution" in nodes]
    assert {"relu", "_native_batch_norm_legit_no_training"} & set(fused) and "relu" in fused
    assert sum("relu" in nodes for nodes in kernels) == 1  # conv, batch norm, relu: one kernel


def test_batch_norm_of_statistics_the_graph_computes():
    # eval-mode F.batch_norm of statistics that are inputs, not constants (and of no weight or
    # bias, or one of them): per-channel vectors read where they are
    x, mean, var = rand(2, 3, 7, 5, seed=17), rand(3, seed=18), rand(3, seed=19).abs() + 0.5
    g, beta = rand(3, seed=20), rand(3, seed=21)

    def fn(x, mean, var, g, beta):
        return (
            F.batch_norm(x, mean, var, g, beta, False, 0.1, 1e-3),
            F.batch_norm(x, mean * 2, var, None, None, False, 0.1, 1e-5),
            F.batch_norm(x[:, :, 0], mean, var + 1, g, None, False, 0.1, 1e-5),
        )

    check(fn, x, mean, var, g, beta)
    check(fn, x, mean, var, g, beta, constants=(3, 4))


def test_views_are_index_expressions():
    x, y = rand(2, 3, 4, 5, seed=18), rand(4, 6, seed=19)

    def fn(x, y):
        return (
            x.reshape(6, 20) + 1,
            x.permute(3, 1, 0, 2) * 2,
            x.transpose(1, 2).reshape(2, 12, 5) + 0,
            y.t() - 1,
            y[:, None, :].expand(4, 3, 6) * 1,
            x[:, 1:, ::2, -1] + 0,
            x.select(1, -1) * 3,
            *(t * 1 for t in y.split([2, 4], dim=1)),
            torch.cat([x, x * 2], dim=2),
            torch.cat([y, y[:1]], dim=0) + 0,
            x.unsqueeze(0).squeeze(0).flatten(1) - 1,
        )

    check(fn, x, y)


def test_dtype_conversions_constants_embedding():
    x = rand(4, 5, seed=20) * 4
    table = rand(11, 6, seed=21)
    ids = torch.tensor([[0, 3, 10], [7, 7, 1]])

    def fn(x, table, ids):
        T = x.shape[1]
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        return (
            x.to(torch.int32),
            x.to(torch.int64).to(torch.float32) + 0.5,
            (x > 0).to(torch.float32),
            torch.arange(T) * 2,
            x[:, :T].masked_fill(~causal[:4], float("-inf")),
            torch.full((3,), 2.5) + 0,
            F.embedding(ids, table) * 2,
        )

    check(fn, x, table, ids, constants=(1,))


def kernels_of(compiled):
    return [s.spec.nodes for s in compiled.steps if hasattr(s, "spec")]


def test_fusion_kinds():
    x, w, b = rand(6, 13, seed=22), rand(17, 13, seed=23), rand(17, seed=24)

    def fn(x, w, b):
        chain = torch.sigmoid(torch.relu(x) * 2 + 1)  # element-wise chain: one kernel
        epilogue = F.gelu(F.linear(x, w, b)) + 1  # bias, activation, add on the matmul's tiles
        rows = torch.softmax(F.layer_norm(chain, (13,)), -1)  # each row operator one kernel
        return chain, epilogue, rows

    compiled = check(fn, x, w, b, constants=(1, 2))
    kernels = kernels_of(compiled)
    assert ("relu", "mul", "add", "sigmoid") in kernels
    assert any({"addmm", "gelu", "add_1"} <= set(k) for k in kernels)
    assert len(kernels) == 4  # chain, matmul + epilogue, layer norm, softmax


def test_check_and_report_name_the_kernels(capsys):
    from tensorforge.graph.report import Checked

    x = rand(4, 9, seed=25)

    def fn(x):
        return (torch.softmax(x * 3, -1), x.cummax(-1)[0].sum(-1))

    gm = make_fx(fn, decomposition_table=decompositions())(x)
    compiled = compile_aten(gm, [x], {}, Options(check=True, report=True))
    assert isinstance(compiled, Checked)
    got = compiled([x])
    assert torch.allclose(got[0], fn(x)[0], atol=1e-6)
    err = capsys.readouterr().err
    assert "check: largest error" in err and "EAGER aten.cummax" in err and "_softmax" in err
    assert compiled.worst is not None and compiled.worst.error < 1e-5
    assert compiled.first_failure is None


@pytest.mark.parametrize(
    "filters, kernel, stride, padding, dilation, size",
    [
        (16, 3, 1, 1, 1, 13),  # two vectors of filters, a prime width: a partial tile
        (8, 3, 2, 1, 1, 11),  # one vector of filters, strided
        (16, 7, 2, 3, 1, 17),  # a ResNet stem
        (24, 1, 2, 0, 1, 9),  # a 1 x 1 downsample of stride 2
        (16, 3, 1, 2, 2, 7),  # dilated
        (32, 3, 1, 1, 1, 2),  # a row narrower than a tile
    ],
)
@pytest.mark.parametrize("schedule", ["auto", "rules"])
def test_convolutions_with_vectors_along_the_filters(
    filters, kernel, stride, padding, dilation, size, schedule
):
    x = rand(2, 5, size, size + 1, seed=30)
    w = rand(filters, 5, kernel, kernel, seed=31)
    b = rand(filters, seed=32)
    r = rand(filters, seed=33)  # a per-channel residual: the epilogue reads another operand

    def fn(x, w, b, r):
        y = F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation)
        return F.relu(y + r[:, None, None] * y.tanh())

    compiled = check(fn, x, w, b, r, constants=(1, 2), schedule=schedule)
    convs = [s for s in compiled.steps if "convolution" in s.spec.nodes and s.spec.anchor]
    # the target's vector, or the half of it that divides the filters (8 or 24 on AVX-512)
    full = tf.Target("llvm").vector_lanes("float32")
    lanes = full if filters % full == 0 else full // 2
    assert [s.spec.anchor.info.get("lanes") for s in convs] == [lanes]
    if schedule == "rules":
        assert convs[0].source.startswith("conv2d")


def test_kernels_of_the_same_structure_are_built_once():
    x = rand(2, 8, 9, 9, seed=40)
    w1, w2, w3 = rand(8, 8, 3, 3, seed=41), rand(8, 8, 3, 3, seed=42), rand(8, 8, 3, 3, seed=43)
    b1, b2 = rand(8, seed=44), rand(8, seed=45)

    def fn(x, w1, w2, w3, b1, b2):  # three layers alike but for their weights
        y = F.relu(F.conv2d(x, w1, b1, padding=1))
        y = F.relu(F.conv2d(y, w2, b2, padding=1))
        return F.relu(F.conv2d(y, w3, b1, padding=1)) * 2

    compiled = check(fn, x, w1, w2, w3, b1, b2, constants=(1, 2, 3, 4, 5))
    kernels = [s for s in compiled.steps if hasattr(s, "spec")]
    assert len(kernels) == 6  # a padding (or im2col) and a convolution per layer
    # the second and third layers' paddings alike (the first reads the input, which may lie
    # otherwise), the first two convolutions alike (the third has another epilogue)
    assert kernels[2].executable is kernels[4].executable
    first, second = kernels[1], kernels[3]
    assert first.executable is second.executable and first.plan != second.plan
    assert kernels[5].executable is not first.executable


@pytest.mark.parametrize("b, n, d, m", [(3, 7, 17, 33), (1, 1, 1, 5), (2, 16, 16, 32)])
def test_a_transposed_right_matrix_is_copied_in_tiles(b, n, d, m):
    # attention's q @ k^T: k^T is copied first, by the transpose's tiled schedule (tails too)
    from tensorforge.graph.program import BuiltKernel
    from tensorforge.graph.schedules import TRANSPOSE_SOURCE

    q, k = rand(b, n, d, seed=b + n), rand(b, m, d, seed=d + m)
    compiled = check(lambda q, k: q @ k.transpose(-2, -1), q, k)
    sources = [s.source for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert sources.count(TRANSPOSE_SOURCE) == (1 if d > 1 else 0), sources  # d = 1: in place


@pytest.mark.parametrize("n, k, m, fetched", [(40, 64, 165, True), (1, 64, 165, False)])
def test_row_tiles_of_a_weight_panel_prefetch_the_next(n, k, m, fetched, monkeypatch):
    # several row tiles of a packed panel (and more than 4 panels): the next panel is
    # prefetched; one row tile (a matrix-vector product) streams the panels once and leaves it
    # to the hardware
    from tensorforge.graph.program import BuiltKernel

    x, w = rand(n, k, seed=n), rand(k, m, seed=k)
    compiled = check(lambda x, w: torch.relu(x @ w), x, w, constants=(1,))
    (kernel,) = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert ("llvm.prefetch" in kernel.module.get_source()) == fetched
    monkeypatch.setenv("TENSORFORGE_PANEL_PREFETCH", "0")
    monkeypatch.setenv("TENSORFORGE_CACHE", "0")
    compiled = check(lambda x, w: torch.relu(x @ w), x, w, constants=(1,))
    (kernel,) = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert "llvm.prefetch" not in kernel.module.get_source()


def test_group_norm_is_a_row_operator():
    x, w, b = rand(2, 6, 7, 5, seed=40), rand(6, seed=41), rand(6, seed=42)
    y = rand(3, 8, 13, seed=43)

    def fn(x, w, b, y):
        return (
            F.silu(F.group_norm(x, 3, w, b)),  # the activation is its epilogue
            F.group_norm(x, 6, w, b),  # a group per channel
            F.group_norm(y * 3 + 1, 2),  # no affine, 1-d positions, a prologue
        )

    compiled = check(fn, x, w, b, y, constants=(1, 2))
    kernels = [s.spec for s in compiled.steps if hasattr(s, "spec")]
    assert len(kernels) == 3 and all(k.anchor.kind == "layer_norm" for k in kernels)


@pytest.mark.parametrize(
    "kernel, stride, padding, output_padding, groups, dilation",
    [
        (2, 2, 0, 0, 1, 1),  # UNet's: a matrix product, the s x s blocks read back
        (3, 2, 1, 1, 1, 1),  # overlapping, output padding
        (3, 1, 1, 0, 2, 1),  # groups
        (3, 2, 0, 0, 3, 2),  # dilated, groups
    ],
)
def test_transposed_convolutions(kernel, stride, padding, output_padding, groups, dilation):
    x = rand(2, 6, 7, 9, seed=44)
    w, b = rand(6, 4 // groups if groups == 2 else 2, kernel, kernel, seed=45), rand(8, seed=46)
    b = b[: w.shape[1] * groups]

    def fn(x, w, b):
        y = F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
        return F.relu(y)

    check(fn, x, w, b, constants=(1, 2))


def test_nearest_upsample_and_integer_indexing_gather():
    x, i = rand(2, 3, 5, 7, seed=47), torch.tensor([[0, -1], [2, 4]])

    def fn(x, i):
        return (
            F.interpolate(x, scale_factor=2, mode="nearest"),
            F.interpolate(x, size=(11, 9), mode="nearest"),  # not a whole factor
            x[:, :, i] * 2,  # negative and broadcast indices, in the middle
        )

    check(fn, x, i)


def test_attention_masks_and_fully_masked_rows():
    q, k, v = rand(2, 3, 7, 8, seed=48), rand(2, 3, 7, 8, seed=49), rand(2, 3, 7, 8, seed=50)
    mask = rand(2, 1, 7, 7, seed=51) > 0
    mask[:, :, 3] = False  # a row that sees nothing: zeros (SDPA's safe softmax), not NaN

    def fn(q, k, v, mask, bias):
        return (
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias),
            F.scaled_dot_product_attention(q, k, v, is_causal=True),
        )

    compiled = check(fn, q, k, v, mask, rand(1, 1, 7, 7, seed=52))
    assert not any("_safe_softmax" in s for s in compiled.program.folded)


def test_library_functions_and_unlowered_operators_on_constants_are_computed_at_compile_time():
    inv_freq = 1.0 / 10000 ** (torch.arange(0, 8, 2) / 8)

    def fn(x, inv_freq):
        freqs = torch.outer(torch.arange(x.shape[1], dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (
            x * emb.cos() + torch.polygamma(2, x[..., :1] + 2.0) * emb.sin()
        )  # rotary embeddings' tables; polygamma of order 2: eager

    compiled = check(fn, rand(2, 7, 8, seed=53), inv_freq, constants=(1,), fallbacks=1)
    assert {"cos", "sin"} <= set(compiled.program.folded)  # (lowered, but computed once)
    assert [target for _, target, _ in compiled.program.fallbacks] == [
        "aten.polygamma.default"
    ]  # polygamma reads the input: eager each call


def test_prims_convert_element_type_is_a_cast():
    # what decompositions leave in graphs of symbolic sizes (arange positions in float)
    x = rand(3, 5, seed=54) * 4

    def fn(x):
        convert = torch.ops.prims.convert_element_type.default
        return convert(x, torch.int32), convert(x, torch.float64) * 2

    check(fn, x)


@pytest.mark.parametrize("m", [37, 197, 5])
def test_rule_rows_with_a_tail_reduce_in_vector_accumulators(m):
    # rows that are not whole vectors (ViT's 197) keep vector accumulators, the last step's
    # lanes past the row masked off; rows shorter than a vector reduce in scalars
    from tensorforge.graph.program import BuiltKernel
    from tensorforge.graph.schedules import schedule_kernel

    x = rand(6, m, seed=m) * 4
    x[2, 3 % m] = float("nan")
    x[4] = -1e30
    compiled = check(lambda x: torch.softmax(x * 0.5, -1), x, schedule="rules")
    (kernel,) = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    s, _ = schedule_kernel(kernel.spec, tf.Target("llvm"), schedule="rules")
    lowered = str(tf.lower(s, [b.placeholder for b in kernel.spec.reads] + [kernel.spec.out]))
    lanes = tf.Target("llvm").vector_lanes("float32")
    assert ("row_max.rf" in lowered) == (m >= lanes), lowered
