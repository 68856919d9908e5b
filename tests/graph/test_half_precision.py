"""float16 and bfloat16 models through torch.compile(backend=tensorforge) on the CPU: compiled whole
(strict, no node run eagerly) and as accurate as eager's own half-precision run.

Both are compared with a float32 reference computed from the same half inputs and weights; the
compiled model's error may be at most twice eager's plus a quarter of a unit in the last place.
Eager accumulates products and reductions in float32, so a kernel that summed in half precision
fails at long reductions (a 4099-term product: 0.0128 against eager's 0.0004 in float16).
"""

import copy
import re

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.graph import Options, backend, compile_aten, decompositions  # noqa: E402
from tensorforge.graph.values import in_dtype, in_opmath, opmath_dtype  # noqa: E402
from tensorforge.te import Cast, placeholder  # noqa: E402
from tests.graph import zoo_models as zoo  # noqa: E402
from tests.graph.models import MLP, Block, SmallCNN  # noqa: E402
from tests.graph.test_lower_split_rows import split_in  # noqa: E402, F401 (a fixture)

HALF = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def error(got, reference) -> float:
    return ((got.double() - reference).abs().max() / reference.abs().max()).item()


def to_half(value, dtype):
    return value.to(dtype) if value.is_floating_point() else value


def check_half(model, *args, dtype, capsys, device="cpu", dynamic=None):
    """The model in `dtype` compiled and run eagerly, each against float32 on the same values
    (cuDNN off for the reference: its TF32 default rounds convolutions to 10-bit mantissas)."""
    torch.manual_seed(0)
    model = zoo.randomize_norms(model).eval().to(device, dtype)
    args = [to_half(a.to(device), dtype) for a in args]
    reference_model = copy.deepcopy(model).float()
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=False):
        reference = reference_model(*[a.float() if a.is_floating_point() else a for a in args])
        torch._dynamo.reset()
        fast = torch.compile(model, backend=backend, dynamic=dynamic, options={"report": True})
        got, expected = fast(*args), model(*args)
    report = capsys.readouterr().err
    assert re.findall(r"EAGER (\S+)", report) == [], report
    unit = torch.finfo(dtype).eps / 2  # the rounding of one result
    as_tuple = lambda v: v if isinstance(v, tuple) else (v,)  # noqa: E731
    for k, (g, e, r) in enumerate(zip(*map(as_tuple, (got, expected, reference)))):
        assert g.dtype == e.dtype == dtype
        ours, eagers = error(g, r.double()), error(e, r.double())
        assert ours <= 2 * eagers + unit / 4, f"output {k}: {ours:.2e}, eager's {eagers:.2e}"


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("d_in, hidden, rows", [(37, 64, 5), (4099, 13, 3), (1, 1, 1)])
def test_mlp(d_in, hidden, rows, dtype, capsys):
    check_half(MLP(d_in, hidden, 10), torch.randn(rows, d_in), dtype=dtype, capsys=capsys)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("rows", [9, 64])
def test_mlp_of_run_time_rows(rows, dtype, capsys):
    check_half(MLP(37, 64, 10), torch.randn(rows, 37), dtype=dtype, capsys=capsys, dynamic=True)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("seq", [1, 7, 129])
def test_gpt2_block(seq, dtype, capsys):
    torch.manual_seed(seq)
    check_half(Block(32, 4), torch.randn(2, seq, 32), dtype=dtype, capsys=capsys)


@pytest.mark.parametrize("dtype", HALF)
def test_conv_batch_norm_relu_net(dtype, capsys):
    check_half(SmallCNN(), torch.randn(2, 3, 15, 13), dtype=dtype, capsys=capsys)


class Reductions(nn.Module):
    """Row statistics over a long last axis: sum, mean, var, softmax, log_softmax."""

    def forward(self, x):
        return x.sum(-1), x.mean(-1), x.var(-1), torch.softmax(x, -1), torch.log_softmax(x, -1)


class Norms(nn.Module):
    def __init__(self, channels=8, positions=(15, 13)):
        super().__init__()
        self.group = nn.GroupNorm(4, channels)
        self.layer = nn.LayerNorm(positions[-1])

    def forward(self, x):
        return self.layer(torch.relu(self.group(x)) + 1.0)


@pytest.mark.parametrize("dtype", HALF)
def test_row_reductions_of_4099(dtype, capsys):
    x = torch.randn(3, 4099) + 0.5  # a mean away from zero: half sums drift from it
    check_half(Reductions(), x, dtype=dtype, capsys=capsys)


@pytest.mark.parametrize("dtype", HALF)
def test_group_and_layer_norm(dtype, capsys):
    check_half(Norms(), torch.randn(2, 8, 15, 13) * 3 + 1, dtype=dtype, capsys=capsys)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(
    "make, shapes",
    [
        (lambda: zoo.MobileNetV2Blocks(8), [(1, 8, 15, 17)]),
        (lambda: zoo.EncoderBlock(32, 4), [(3, 7, 32)]),
        (lambda: zoo.LlamaBlock(32, 4, 88), [(1, 129, 32)]),
        (lambda: zoo.UNetBlock(8, 4), [(1, 8, 15, 17), (1, 8, 30, 34)]),
    ],
    ids=["mobilenet_v2", "encoder_sdpa", "llama", "unet"],
)
def test_zoo_models(make, shapes, dtype, capsys):
    torch.manual_seed(1)
    check_half(make(), *[torch.randn(s) for s in shapes], dtype=dtype, capsys=capsys)


@pytest.mark.parametrize("dtype", HALF)
def test_embedding_classifier(dtype, capsys):
    ids = torch.randint(0, 101, (3, 129), generator=torch.Generator().manual_seed(0))
    check_half(zoo.EmbeddingClassifier(), ids, dtype=dtype, capsys=capsys)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_product_accumulates_in_float32_and_stores_half(dtype):
    torch_dtype = getattr(torch, dtype)
    a, b = torch.randn(5, 4099, dtype=torch_dtype), torch.randn(4099, 3, dtype=torch_dtype)
    gm = make_fx(lambda a, b: a @ b, decomposition_table=decompositions())(a, b)
    compiled = compile_aten(gm, [a, b], {1: b}, Options())
    (kernel,) = compiled.program.steps
    assert kernel.anchor.tensor.dtype == "float32"  # the accumulator
    assert kernel.buffer.dtype == kernel.out.dtype == dtype  # rounded once, stored half
    got = compiled([a, b])[0]
    reference = a.double() @ b.double()
    assert error(got, reference) <= 2 * error(a @ b, reference) + torch.finfo(torch_dtype).eps / 8


def test_opmath_dtypes():
    assert opmath_dtype("float16") == opmath_dtype("bfloat16") == "float32"
    assert opmath_dtype("float64") == "float64" and opmath_dtype("int8") == "int8"


def test_in_dtype_drops_a_rounding_between_fused_operations():
    x = placeholder((4,), dtype="float32", name="x")[0]
    h = placeholder((4,), dtype="float16", name="h")[0]
    assert in_dtype(x.astype("float16"), "float32") is x  # f32(f16(x32)) -> x32
    assert in_opmath(x.astype("bfloat16")) is x
    assert in_dtype(h, "float32") == Cast("float32", h)  # a half load is widened
    assert in_dtype(h.astype("float32").astype("float16"), "float64") == Cast(
        "float64", Cast("float16", Cast("float32", h))
    )  # to another dtype: the rounding stays


@pytest.mark.parametrize("dtype", HALF)
def test_split_rows_keep_float32_chunk_statistics(split_in, dtype):  # noqa: F811 (a fixture)
    # CUDA's few-long-rows form (lower_split_rows), forced here: chunk statistics of half rows
    # are float32 in memory, each result rounded once
    split_in(7)
    x = (torch.randn(2, 4099, generator=torch.Generator().manual_seed(3)) + 0.5).to(dtype)

    def fn(x):
        return x.sum(-1), torch.softmax(x, -1), torch.nn.functional.layer_norm(x, (4099,))

    gm = make_fx(fn, decomposition_table=decompositions())(x)
    compiled = compile_aten(gm, [x], {}, Options())
    assert compiled.program.fallbacks == []
    chunks = [s.spec for s in compiled.steps if "_chunk" in s.spec.name]
    assert len(chunks) == 3 and all(spec.buffer.dtype == "float32" for spec in chunks)
    unit = torch.finfo(dtype).eps / 2
    for got, expected, reference in zip(compiled([x]), fn(x), fn(x.double())):
        assert got.dtype == dtype
        ours, eagers = error(got, reference), error(expected, reference)
        assert ours <= 2 * eagers + unit / 4, f"{ours:.2e}, eager's {eagers:.2e}"


@pytest.mark.parametrize("dtype", HALF)
def test_check_holds_half_kernels_to_a_few_roundings(dtype, capsys):
    x = torch.randn(5, 37, generator=torch.Generator().manual_seed(4)).to(dtype)
    w = torch.randn(37, 11, generator=torch.Generator().manual_seed(5)).to(dtype)

    def fn(x, w):
        return torch.softmax(torch.relu(x @ w) * 0.5 + 1.0, -1)

    gm = make_fx(fn, decomposition_table=decompositions())(x, w)
    compiled = compile_aten(gm, [x, w], {1: w}, Options(check=True))
    compiled([x, w])
    capsys.readouterr()
    assert compiled.worst.error > 1e-4  # past the float32 tolerance: a few half roundings ...
    assert compiled.first_failure is None  # ... within 4 eps of the dtype


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(
    "make, shape",
    [(lambda: MLP(4099, 64, 10), (5, 4099)), (Block, (2, 7, 32)), (SmallCNN, (2, 3, 15, 13))],
    ids=["mlp_4099", "gpt2_block", "conv_bn_relu"],
)
def test_float32_models_under_autocast(make, shape, dtype, capsys):
    # autocast's graphs mix the dtypes: weights cast to half at compile time, products in half,
    # layer norm and softmax in float32
    torch.manual_seed(0)
    model = zoo.randomize_norms(make()).eval()
    x = torch.randn(shape)
    with torch.no_grad():
        reference = model(x).double()
        torch._dynamo.reset()
        fast = torch.compile(model, backend=backend, options={"report": True})
        with torch.autocast("cpu", dtype=dtype):
            got, expected = fast(x), model(x)
    assert re.findall(r"EAGER (\S+)", capsys.readouterr().err) == []
    assert got.dtype == expected.dtype
    ours, eagers = error(got, reference), error(expected, reference)
    assert ours <= 2 * eagers + torch.finfo(dtype).eps / 8, f"{ours:.2e}, eager's {eagers:.2e}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_fused_chain_is_rounded_once_where_it_is_stored(dtype):
    # where and masked_fill choose in float32 too: the chain's only rounding is the store's
    torch_dtype = getattr(torch, dtype)
    x, y = torch.randn(3, 37).to(torch_dtype), torch.randn(3, 37).to(torch_dtype)
    mask = torch.rand(3, 37, generator=torch.Generator().manual_seed(0)) > 0.5

    def fn(x, y, mask):
        chosen = torch.where(mask, torch.sigmoid(x) * y + 1.0, x)
        return (chosen.masked_fill(~mask, 0.25) * 2.0 - y).to(torch.float32).to(torch_dtype)

    gm = make_fx(fn, decomposition_table=decompositions())(x, y, mask)
    compiled = compile_aten(gm, [x, y, mask], {}, Options())
    (kernel,) = compiled.program.steps
    roundings = re.findall(rf"{dtype}\((?!-?[\d.]+\))", str(kernel.out.op.body))  # no literals
    assert len(roundings) == 1, kernel.out.op.body
    reference = fn(x.double(), y.double(), mask).double()
    got, expected = compiled([x, y, mask])[0], fn(x, y, mask)
    assert (
        error(got, reference) <= 2 * error(expected, reference) + torch.finfo(torch_dtype).eps / 8
    )


class Pools(nn.Module):
    """A batch norm that follows no convolution, pools, and statistics over other axes."""

    def __init__(self, channels=6):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = torch.relu(self.norm(x))
        pooled = (
            torch.nn.functional.avg_pool2d(y, 3, 2, 1)
            + torch.nn.functional.max_pool2d(y, 2)[..., :7, :6].mean()
        )
        var, mean = torch.var_mean(x, dim=(2, 3), keepdim=True)
        spread = (x - mean) * torch.rsqrt(var + 1e-5) + x.amax(1, keepdim=True) - x.amin(1, True)
        return pooled.sum(1), torch.nn.functional.adaptive_avg_pool2d(spread, 1).flatten(1)


@pytest.mark.parametrize("dtype", HALF)
def test_pools_batch_norm_and_statistics(dtype, capsys):
    check_half(Pools(), torch.randn(2, 6, 13, 11) * 2 + 1, dtype=dtype, capsys=capsys)


@pytest.mark.parametrize("dtype, x, y", [("float16", 0.1, 30.0), ("bfloat16", 0.0810546875, 37.0)])
def test_an_operator_that_jumps_reads_half_operands_as_stored(dtype, x, y):
    # x * y is a hair under 3 in float32 and exactly 3 rounded to the half dtype, as eager
    # stores it: a comparison, a conversion to an integer, a floor or a floor division of it
    # sees 3 in eager, so it must here too (computed in float32 unrounded: 2, False, 0)
    torch_dtype = getattr(torch, dtype)
    xs, ys = torch.full((3, 5), x).to(torch_dtype), torch.full((3, 5), y).to(torch_dtype)
    assert (xs.float() * ys.float() < 3).all() and (xs * ys == 3).all()  # the case straddles

    def fn(x, y):
        p = x * y
        return (
            p.to(torch.int32),
            torch.floor(p),
            torch.ceil(p - 3.0),
            p >= 3,
            p == 3,
            torch.div(p, 3, rounding_mode="floor"),
        )

    gm = make_fx(fn, decomposition_table=decompositions())(xs, ys)
    compiled = compile_aten(gm, [xs, ys], {}, Options())
    assert compiled.program.fallbacks == []
    for k, (got, expected) in enumerate(zip(compiled([xs, ys]), fn(xs, ys))):
        assert got.dtype == expected.dtype and torch.equal(got, expected), (k, got, expected)


@pytest.mark.parametrize("dtype", HALF)
def test_a_half_tensor_is_compared_with_a_number_rounded_to_its_dtype(dtype):
    # eager compares float16(0.1) >= 0.1 as float16 values (the number rounded: True); in
    # float32 the number is not rounded and float16(0.1) < 0.1
    x = torch.tensor([[0.1, 0.25, -0.1, 2048.0]]).to(dtype)
    assert x[0, 0].float() != 0.1  # the case: 0.1 is not a half value (nor is 2049)

    def fn(x):
        return x >= 0.1, x == 0.1, x < 0.1, x != 0.1, torch.where(x > -0.1, x, 0.0), x == 2049

    gm = make_fx(fn, decomposition_table=decompositions())(x)
    compiled = compile_aten(gm, [x], {}, Options())
    for k, (got, expected) in enumerate(zip(compiled([x]), fn(x))):
        assert torch.equal(got, expected), (k, got, expected)
