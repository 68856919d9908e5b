"""bfloat16 linear layers on the CPU's dot micro-kernel (graph/lower_cpu_dot.py): taken for a
target with AVX512-BF16 (decided from the target's features, not this host's), as accurate as
eager's bfloat16 run for odd sizes (rows, k and columns that are not whole tiles), with the
epilogue (bias, GELU, a residual add) fused after each tile; targets without the instruction,
and rows known only at run time, keep the float32 register tiles.

Errors are measured as in test_half_precision: against float32 on the same bfloat16 values, at
most twice eager's error plus a quarter of a unit in the last place."""

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.graph import Options, backend, compile_aten, decompositions  # noqa: E402
from tensorforge.graph.lower_cpu_dot import choose_tiles, wants_cpu_dot  # noqa: E402
from tensorforge.ops import cpu_dot  # noqa: E402
from tensorforge.target import Target  # noqa: E402
from tests.graph.models import Block  # noqa: E402
from tests.graph.test_half_precision import error  # noqa: E402

DOT = "bfloat16 dot micro-kernel"
HOST_HAS_DOT = cpu_dot.has_feature("bfloat16", Target("llvm"))
needs_dot = pytest.mark.skipif(not HOST_HAS_DOT, reason="this CPU has no AVX512-BF16")
# CPUs LLVM knows without AVX512-BF16, whose code runs on an AVX-512 BF16 host too
NO_DOT_TARGETS = ["llvm -mcpu=znver3", "llvm -mcpu=icelake-server"]


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


class Mlp(nn.Module):
    """linear + bias + GELU, linear + bias, and (where d_in == d_out) the residual add."""

    def __init__(self, d_in, hidden, d_out, residual=False):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, d_out)
        self.residual = residual

    def forward(self, x):
        y = self.fc2(nn.functional.gelu(self.fc1(x)))
        return x + y if self.residual else y


def as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def check_bf16(model, x, capsys, target=None, dynamic=None) -> str:
    """The bfloat16 model compiled (for `target`) and run eagerly, each against float32 on the
    same values (x: an input, or a tuple of them, floating ones made bfloat16; each output
    checked); the backend's report (its kernels' schedules)."""
    torch.manual_seed(0)
    model = model.eval().to(torch.bfloat16)
    xs = tuple(v.to(torch.bfloat16) if v.is_floating_point() else v for v in as_tuple(x))
    options = {"report": True, **({"target": target} if target else {})}
    with torch.no_grad():
        floats = (v.float() if v.is_floating_point() else v for v in xs)
        reference = as_tuple(copy.deepcopy(model).float()(*floats))
        torch._dynamo.reset()
        fast = torch.compile(model, backend=backend, dynamic=dynamic, options=options)
        got, expected = as_tuple(fast(*xs)), as_tuple(model(*xs))
    report = capsys.readouterr().err
    assert re.findall(r"EAGER (\S+)", report) == [], report
    unit = torch.finfo(torch.bfloat16).eps / 2
    for g, e, r in zip(got, expected, reference, strict=True):
        assert g.dtype == torch.bfloat16
        ours, eagers = error(g, r.double()), error(e, r.double())
        assert ours <= 2 * eagers + unit / 4, f"{ours:.2e}, eager's {eagers:.2e}"
    return report


def dot_kernels(report: str) -> int:
    return sum(DOT in line for line in report.splitlines())


@needs_dot
@pytest.mark.parametrize(
    "rows, d_in, hidden, d_out",
    [
        (64, 256, 512, 256),  # whole tiles: A read in place, 2 k blocks of 256 in fc2
        (1, 37, 100, 10),  # one row; odd k; columns short of a 16-column strip
        (7, 515, 33, 200),  # odd k past kc (3 blocks); 200 = 3 x 64 + 8 columns
        (100, 64, 130, 48),  # 2 row tiles of 50
        (130, 40, 160, 64),  # rows padded to 3 x 44; fc1 in parallel tiles (20800 outputs)
    ],
)
def test_mlp_on_the_dot_kernel(rows, d_in, hidden, d_out, capsys):
    report = check_bf16(Mlp(d_in, hidden, d_out), torch.randn(rows, d_in), capsys)
    assert dot_kernels(report) == 2, report


@needs_dot
@pytest.mark.parametrize("rows", [3, 64])
def test_residual_mlp_on_the_dot_kernel(rows, capsys):
    report = check_bf16(Mlp(96, 384, 96, residual=True), torch.randn(rows, 96) * 2, capsys)
    assert dot_kernels(report) == 2, report


@needs_dot
@pytest.mark.parametrize("seq", [1, 7, 129])
def test_gpt2_block_on_the_dot_kernel(seq, capsys):
    """The four linear layers and attention's two products (bmm of two computed matrices:
    tests/graph/test_cpu_dot_attention.py) take the dot kernel; K^T is read by the panels'
    packing, not copied by a transpose kernel first."""
    torch.manual_seed(seq)
    report = check_bf16(Block(64, 4), torch.randn(2, seq, 64), capsys)
    assert dot_kernels(report) == 6, report
    assert "transpose" not in report, report


@pytest.mark.parametrize("target", NO_DOT_TARGETS)
def test_targets_without_the_instruction_keep_float32_tiles(target, capsys):
    report = check_bf16(Mlp(37, 100, 10, residual=False), torch.randn(7, 37), capsys, target)
    assert dot_kernels(report) == 0, report
    assert "register-tiled panels" in report, report


@needs_dot
@pytest.mark.parametrize("d_in, hidden, d_out", [(37, 100, 37), (515, 33, 200)])
def test_rows_known_at_run_time_compile_once_and_take_the_dot_kernel(d_in, hidden, d_out):
    """One compile under dynamic=True serves 7, 64, 65 (a last tile of 1 row) and 129 rows:
    the last tile's calls take the rows left, no padding; each as accurate as eager on fresh
    data. 1 row compiles again (Dynamo specializes a size of 1: F.linear guards on it).
    515 inputs: k in 3 blocks (each tile reset before them)."""
    from tests.graph.test_dynamic_and_cuda import _find_compiled
    from tests.graph.test_dynamic_rows import compiled_once

    torch.manual_seed(0)
    model = Mlp(d_in, hidden, d_out, residual=d_in == d_out).eval().to(torch.bfloat16)
    fast, graphs = compiled_once(model)
    unit = torch.finfo(torch.bfloat16).eps / 2
    with torch.no_grad():
        for rows in (9, 7, 64, 65, 129, 1):
            x = (torch.randn(rows, d_in) * 2).to(torch.bfloat16)
            reference = copy.deepcopy(model).float()(x.float()).double()
            ours, eagers = error(fast(x), reference), error(model(x), reference)
            assert ours <= 2 * eagers + unit / 4, f"{rows} rows: {ours:.2e}, eager's {eagers:.2e}"
            assert len(graphs) == (1 if rows > 1 else 2)
    steps = _find_compiled(graphs[0]).steps
    assert sum(DOT in getattr(step, "source", "") for step in steps) == 2, steps


class AfterTheFirstRow(nn.Module):
    """The MLP of all rows but the first: its left matrix is the input's rows from row 1, read
    where they lie (a row tile's calls count its rows from the tile, not from the buffer)."""

    def __init__(self, mlp):
        super().__init__()
        self.mlp = mlp

    def forward(self, x):
        return self.mlp(x[1:])


@needs_dot
@pytest.mark.parametrize("rows", [8, 66, 130])
def test_run_time_rows_read_from_a_row_past_the_buffers_first(rows, capsys):
    model = AfterTheFirstRow(Mlp(64, 96, 32))
    report = check_bf16(model, torch.randn(rows, 64), capsys, dynamic=True)
    assert dot_kernels(report) == 2, report


@pytest.mark.parametrize(
    "target, dtype, shape, expected",
    [
        ("llvm -mcpu=sapphirerapids", "bfloat16", (64, 768), True),  # whatever this host is
        ("llvm -mcpu=znver4", "bfloat16", (64, 768), True),
        ("llvm -mcpu=znver3", "bfloat16", (64, 768), False),  # no AVX512-BF16
        ("llvm -mcpu=icelake-server", "bfloat16", (64, 768), False),
        ("llvm -mcpu=znver4", "float16", (64, 768), False),
        ("llvm -mcpu=znver4", "float32", (64, 768), False),
        ("llvm -mcpu=znver4", "bfloat16", (2, 64, 768), False),  # a batch (bmm)
    ],
)
def test_wants_cpu_dot_reads_the_target(target, dtype, shape, expected):
    weights = torch.zeros(96, shape[-1], dtype=torch.bfloat16)
    assert wants_cpu_dot(Target(target), dtype, shape, 96, weights) is expected
    assert not wants_cpu_dot(Target(target), dtype, shape, 96, None)  # weights computed


@pytest.mark.parametrize(
    "rows, expected",
    [(1, 1), (64, 64), (67, 34), (100, 50), (128, 64), (130, 44), (4096, 64), (4097, 64)],
)
def test_row_tiles_are_equal_and_pad_fewer_rows_than_tiles(rows, expected):
    assert choose_tiles(Target("llvm -mcpu=znver4"), rows, 768, 768).mr == expected


def test_an_amx_target_builds_with_amx_tiles():
    """Sapphire Rapids (AMX): its 16-row tiles, rows padded to them; built, not run (this host
    may lack AMX and AVX512-FP16)."""
    a, b = torch.randn(100, 515, dtype=torch.bfloat16), torch.randn(515, 200, dtype=torch.bfloat16)
    gm = make_fx(lambda a, b: a @ b, decomposition_table=decompositions())(a, b)
    options = Options(target="llvm -mcpu=sapphirerapids")
    (kernel,) = compile_aten(gm, [a, b], {1: b}, options).program.steps
    tiles = kernel.anchor.info["cpu_dot"]
    assert tiles.amx and tiles.mr % 16 == 0 and tiles.kc % 32 == 0


@needs_dot
def test_a_named_target_with_the_instruction_takes_it(capsys):
    """Zen 4's code (AVX512-BF16; runs on a host with the instruction, such as Zen 5)."""
    report = check_bf16(Mlp(37, 100, 10), torch.randn(7, 37), capsys, "llvm -mcpu=znver4")
    assert dot_kernels(report) == 2, report


CACHED = """
import json, torch
from tensorforge.graph import backend, cache
from tests.graph.test_lower_cpu_dot import Mlp

torch.manual_seed(0)
model = Mlp(37, 100, 37, residual=True).eval().to(torch.bfloat16)
x = torch.randn(7, 37).to(torch.bfloat16)
with torch.no_grad():
    first = torch.compile(model, backend=backend)(x)
    model.fc1.weight.mul_(-2)  # the panels are packed again from the live weights
    torch._dynamo.reset()
    second = torch.compile(model, backend=backend)(x)
    print(json.dumps([first.tolist(), (second - model(x)).abs().max().item(), cache.STATS.hits]))
"""


@needs_dot
def test_a_second_process_loads_the_dot_kernels_from_the_graph_cache(tmp_path):
    """The cached kernels call the micro-kernels, whose library lowering loads first."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TENSORFORGE_CACHE_DIR": str(tmp_path), "TF_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root)])
    env.pop("TENSORFORGE_CACHE", None)
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", CACHED], env=env, cwd=root, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    (output, difference, hits), (cached_output, cached_difference, cached_hits) = runs
    assert (hits, cached_hits) == (1, 2)  # the second graph, then both: from the cache
    assert cached_output == output
    # against eager on the new weights: a few roundings of values up to 3 (bf16's unit there:
    # 1/64); panels left from the old weights would be 1.28 off
    assert difference <= 4 / 64 and cached_difference <= 4 / 64


@pytest.mark.parametrize(
    "target, conv, eager",
    [
        ("llvm -mcpu=znver4", nn.Conv2d(16, 24, 3, padding=1), True),  # 3x3, 14M MACs
        ("llvm -mcpu=znver4", nn.Conv2d(16, 48, 3, stride=2), True),  # stride 2: 31 x 30
        ("llvm -mcpu=znver4", nn.Conv2d(64, 72, 1, stride=2), True),  # 1x1 s2, 9M MACs
        ("llvm -mcpu=znver4", nn.Conv2d(64, 72, 1), False),  # 1x1 s1: on the dot kernel
        ("llvm -mcpu=znver4", nn.Conv2d(16, 16, 3, padding=1, groups=16), False),  # depthwise
        ("llvm -mcpu=znver4", nn.Conv2d(3, 5, 3), False),  # small: an eager step costs more
        ("llvm -mcpu=znver3", nn.Conv2d(16, 24, 3, padding=1), False),  # no dot instruction
    ],
)
def test_large_bfloat16_convolutions_run_eagerly_where_the_target_has_the_dot(target, conv, eager):
    """oneDNN's bfloat16 convolutions multiply on the dot instruction: on such a target the
    large ones run eagerly, the batch norm and ReLU after them still one kernel;
    the values match eager's where this host can run the target's code."""
    model = nn.Sequential(conv, nn.BatchNorm2d(conv.out_channels), nn.ReLU()).eval()
    model = model.to(torch.bfloat16)
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    torch.manual_seed(1)
    x = torch.randn(2, conv.in_channels, 63, 61, dtype=torch.bfloat16)
    with torch.no_grad():
        gm = make_fx(model, decomposition_table=decompositions())(x)
        compiled = compile_aten(gm, [x], {}, Options(target=target))
        fallbacks = compiled.program.fallbacks
        assert bool(fallbacks) == eager, fallbacks
        if eager:
            assert "bfloat16 dot instruction" in str(fallbacks)
            assert sum(type(s).__name__ == "BuiltKernel" for s in compiled.steps) == 1
        if HOST_HAS_DOT or "znver3" in target:
            (got,) = compiled([x])
            expected = model(x)
            scale = expected.float().abs().max()
            assert (got.float() - expected.float()).abs().max() <= 2e-2 * scale


@needs_dot
@pytest.mark.parametrize(
    "c_in, c_out, size, batch",
    [
        (37, 50, (9, 9), 1),  # odd channels; 81 positions: a partial last panel
        (64, 128, (16, 16), 2),  # whole panels, two images
        (130, 24, (7, 5), 3),  # k past one 64-term step, odd; 35 positions
    ],
)
def test_1x1_convolutions_on_the_dot_kernel(c_in, c_out, size, batch, capsys):
    """A bfloat16 1x1 convolution (+ batch norm, ReLU, residual) of a computed input as a
    batched product: the folded weights times each image, its positions packed into panels in
    the kernel."""

    class Bottleneck(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out)

        def forward(self, x, residual):
            return torch.relu(self.bn(self.conv(torch.relu(x))) + residual)

    model = Bottleneck()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    inputs = (torch.randn(batch, c_in, *size), torch.randn(batch, c_out, *size))
    report = check_bf16(model, inputs, capsys)
    assert dot_kernels(report) == 1, report
