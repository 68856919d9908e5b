"""Wrong answers and crashes the graph fuzzer (graph_fuzz.py) found, each reduced to its smallest
graph and checked against eager torch (test_lowering's `check`: strict, every output compared)."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tests.graph.test_lowering import check, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def dynamic(fn):
    """`fn` compiled with symbolic sizes, and a check that every graph the backend compiled
    ran all of its operators as kernels (a lowering that declines would fall back silently)."""
    from tests.graph.test_dynamic_and_cuda import _find_compiled
    from tests.graph.test_dynamic_rows import compiled_once

    fast, graphs = compiled_once(fn)

    def nothing_eager():
        assert graphs and [_find_compiled(g).program.fallbacks for g in graphs] == [[]] * len(graphs)  # fmt: skip

    return fast, nothing_eager


def test_pools_whose_last_window_runs_past_the_edge_without_padding():
    # ceil_mode adds a window that starts inside and ends past the edge: its positions outside
    # must not count (they were clamped onto the edge: an average read the edge twice, a
    # dilated maximum an element its window does not hold)
    x = rand(2, 3, 7, 6, seed=1)

    def fn(x):
        return (
            F.avg_pool2d(x, 2, 2, ceil_mode=True),
            F.avg_pool2d(x, 2, 2, ceil_mode=True, count_include_pad=False),
            F.avg_pool2d(x[:, :, :3, :3], 5, ceil_mode=True),  # one window, past both edges
            F.max_pool2d(x, 2, 2, dilation=2, ceil_mode=True),
            F.max_pool2d(x - 3, 3, 2, ceil_mode=True),
        )

    check(fn, x)


def test_negative_numbers_fill_bfloat16_tensors():
    x = rand(3, 7, 13, seed=2).to(torch.bfloat16)

    def fn(x):
        return x.masked_fill(x > 0.3, -1.5), torch.where(x < 0, -2.25, x)

    check(fn, x)


def test_bitwise_not_of_integers_flips_every_bit():
    x = rand(31, 5, seed=3) * 40

    def fn(x):
        small = x.to(torch.int64)
        return ~small, ~small.to(torch.int32), ~small.to(torch.uint8), ~(x > 0)

    check(fn, x)


@pytest.mark.parametrize("schedule", ["rules", "auto"])
def test_the_mean_of_var_mean_alone(schedule):
    # its anchor holds the sum of squares too, which no kernel reads: the rules' schedule
    # (static "rules", and every run-time size) placed it and failed ("not part of this schedule")
    x = rand(64, 2, seed=4)

    def fn(x):
        return torch.var_mean(x, 0)[1] + 1

    check(fn, x, schedule=schedule)


def test_the_mean_of_var_mean_alone_at_run_time_sizes():
    def fn(x):
        return torch.var_mean(x, 0)[1]

    fast, nothing_eager = dynamic(fn)
    for rows in (64, 13):
        x = rand(rows, 3, seed=rows)
        torch.testing.assert_close(fast(x), fn(x))
    nothing_eager()


def test_zeros_ones_and_full_like_are_kernels():
    x = rand(3, 1, 7, seed=5).to(torch.bfloat16)

    def fn(x):
        return (
            torch.zeros_like(x) + x,
            torch.ones_like(x, dtype=torch.int64) * 3,
            torch.full_like(x, -2.5).float() - x,
        )

    check(fn, x)  # (with no fallback: full_like ran eagerly)


def test_batch_norm_whose_weight_and_bias_are_computed():
    # constant statistics fold into a scale and shift; a weight or bias that is an input of the
    # graph was taken for no weight (ctx.constant is None for it) and dropped
    x, w, b = rand(2, 7, 3, 5, seed=6), rand(7, seed=7), rand(7, seed=8)
    mean, var = rand(7, seed=9), rand(7, seed=10).abs() + 0.5

    def fn(x, w, b, mean, var):
        return (
            F.batch_norm(x, mean, var, w, b, False),
            F.batch_norm(x, mean, var, w * 2, None, False),
            F.batch_norm(x[:, :, 0], mean, var, None, b, False, 0.1, 1e-3),
            F.batch_norm(x, mean, var, mean, b, False),  # a constant weight, a computed bias
            F.batch_norm(x, mean, var, w, var, False),  # a computed weight, a constant bias
        )

    check(fn, x, w, b, mean, var, constants=(3, 4))


def test_outputs_that_view_inputs_through_run_time_sizes():
    # AOT rebuilds such an output as input.as_strided(...) with the strides and offset of the
    # tensor the backend returned: a kernel's contiguous copy read the input's first elements

    def fn(x, y):
        half = (x.shape[1] + 1) // 2
        return (
            x.chunk(2, 1)[-1],
            x[:, half:],
            y.unsqueeze(0).expand(x.shape[0], -1),
            x * 2,
            x.unsqueeze(0).chunk(2, 2)[-1].split(3, 1)[0],  # chunk's sizes end up ints
        )

    fast, nothing_eager = dynamic(fn)
    for n in (127, 9, 8):
        x, y = rand(n, n, seed=n), rand(n, seed=n + 1)
        for got, expected in zip(fast(x, y), fn(x, y)):
            torch.testing.assert_close(got, expected)
    nothing_eager()


def test_square_inputs_of_run_time_sizes():
    # Dynamo gives both sizes of a square one symbol: a flattened size is s0**2, a sympy Pow

    def fn(x):
        return torch.exp(x).reshape(-1) * 2

    fast, nothing_eager = dynamic(fn)
    for n in (13, 5):
        x = rand(n, n, seed=n)
        torch.testing.assert_close(fast(x), fn(x))
    nothing_eager()


def test_strided_convolution_of_run_time_sizes():
    # im2col compared its column count with itself (`P > P`), which has no truth value when P
    # is a run-time size: the graph ran eagerly

    class Convs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(rand(1, 3, 2, 3, seed=11), requires_grad=False)
            self.v = torch.nn.Parameter(rand(1, 3, 3, 3, seed=12), requires_grad=False)

        def forward(self, x):
            return F.conv2d(x, self.w, stride=3, padding=1), F.conv2d(x, self.v, stride=(2, 1))

    fn = Convs()
    fast, nothing_eager = dynamic(fn)
    for size in (7, 10):
        x = rand(2, 3, size, size + 2, seed=size)
        for got, expected in zip(fast(x), fn(x)):
            torch.testing.assert_close(got, expected)
    nothing_eager()


def test_an_empty_intermediate():
    # a temporary of no elements got an arena of 1 byte, which no float32 view fits
    x = rand(6, 1, 1, seed=12)

    def fn(x):
        empty = torch.var_mean(x, 1, keepdim=True)[0][:, -3:-1:2]
        return torch.sin(empty * 2), x.sum(-1)

    check(fn, x)  # (sin of the empty temporary is a kernel too, since sin is lowered)


def test_convolution_by_weights_of_run_time_sizes():
    # weights that are an input under dynamic=True have a symbolic filter count: the choice of
    # filter vectors asked `F % 16` for a truth value

    def fn(x, w):
        return F.conv2d(x, w, padding=1), F.conv2d(x, w, stride=2)

    fast, nothing_eager = dynamic(fn)
    for filters, size in ((8, 7), (5, 9)):
        x, w = rand(2, 3, size, size, seed=size), rand(filters, 3, 3, 3, seed=filters)
        for got, expected in zip(fast(x, w), fn(x, w)):
            torch.testing.assert_close(got, expected)
    nothing_eager()


def test_a_scalar_viewed_as_a_matrix():
    # the copy reads a 0-d buffer (no indices): asking whether it transposes indexed past them
    a = rand(1, seed=13).reshape(())

    def fn(a):
        v = a.reshape(1, 1)
        return v @ v.transpose(-1, -2), v.expand(3, 2) * 1

    check(fn, a)


def test_negative_starts_on_run_time_sizes():
    # the last token of a sequence of run-time length (x[:, -1], x[:, -3:]) was run eagerly
    from tests.graph.test_dynamic_and_cuda import _find_compiled
    from tests.graph.test_dynamic_rows import compiled_once

    def fn(x):
        return x[:, -1] * 2, x[:, -3:] + 1, x[-5:].sum(0)

    fast, graphs = compiled_once(fn)
    for rows, length in ((7, 9), (3, 2), (4, 13)):
        x = rand(rows, length, 5, seed=length)
        for got, expected in zip(fast(x), fn(x)):
            torch.testing.assert_close(got, expected)
    assert [_find_compiled(g).program.fallbacks for g in graphs] == [[]] * len(graphs)


def test_reductions_of_a_scalar():
    # a 0-d tensor reduced over its dim -1 (torch allows 0 and -1): `-1 % 0`
    a, b = rand(7, seed=14), rand(7, seed=15)

    def fn(a, b):
        dot = a @ b
        return (dot > 0).to(torch.int64).sum(-1), dot.sum(0) * 2, dot.amax(-1), dot.mean(-1)

    check(fn, a, b)


def test_index_select_gather_and_constant_padding_are_kernels():
    # the fuzzer found them among the operators run eagerly most often (with F.normalize's norm)
    x, rows = rand(5, 7, 3, seed=16), torch.tensor([4, 0, 4, 2])
    index = torch.randint(0, 7, (5, 2, 3), generator=torch.Generator().manual_seed(17))

    def fn(x, rows, index):
        return (
            x.index_select(0, rows) * 2,
            torch.index_select(x, -1, rows[1:] // 2),
            torch.gather(x, 1, index) + 1,
            F.pad(x, (1, 2)),
            F.pad(x, (0, 1, 2, 0), value=-1.5),
            F.pad(x, (-1, 1, 1, -2)),  # a negative pad crops
        )

    check(fn, x, rows, index)


def test_integer_division_with_rounding():
    i = (rand(6, 7, seed=18) * 20).to(torch.int64)
    j = (rand(7, seed=19) * 6).to(torch.int64)
    j = torch.where(j == 0, 3, j)  # (no division by zero)

    def fn(i, j):
        return (
            i // 3,
            i // -4,
            torch.div(i, j, rounding_mode="floor"),
            torch.div(i, j, rounding_mode="trunc"),
            torch.div(i.to(torch.int32), -3, rounding_mode="trunc"),
        )

    check(fn, i, j)


def test_a_max_over_a_dimension_of_one_in_bfloat16():
    # the kernel loaded the float32 maxima's 1-lane tail as `load <1 x float>` to store 3
    # bfloat16 lanes, on which LLVM 22's O3 pipeline aborts the process (an assertion): run in
    # a process of its own
    import subprocess
    import sys

    program = (
        "import torch\n"
        "from tests.graph.test_lowering import check\n"
        "x = torch.randn(1, 3).to(torch.bfloat16)\n"
        "check(lambda x: (x.amax(0), x[:, :1].amin(0) * 2), x)\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_attention_whose_head_size_is_a_run_time_size():
    # SDPA scales by 1 / sqrt(E): under dynamic=True a SymFloat of E (sym_float, pow,
    # truediv nodes), which lowered to nothing, and the multiply by it failed (float(None))
    from tests.graph.test_dynamic_and_cuda import _find_compiled
    from tests.graph.test_dynamic_rows import compiled_once

    def fn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    fast, graphs = compiled_once(fn)
    for queries, keys, head in ((17, 7, 5), (9, 13, 8)):
        q, k = rand(2, queries, head, seed=head), rand(2, keys, head, seed=keys)
        v, mask = rand(2, keys, 3, seed=queries), rand(queries, keys, seed=20) > -1
        torch.testing.assert_close(fast(q, k, v, mask), fn(q, k, v, mask), atol=1e-5, rtol=1e-5)
    assert [_find_compiled(g).program.fallbacks for g in graphs] == [[]] * len(graphs)


def test_strided_grouped_convolution_of_a_run_time_height():
    # the bounds analyzer rewrote k * (x // c) terms in a loop over a snapshot of the form's
    # terms: one that an earlier rewrite had cancelled was looked up again (KeyError)
    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(rand(2, 2, 1, 1, seed=21), requires_grad=False)

        def forward(self, x, weight, bias):
            y = F.conv2d(x, self.w, None, stride=(2, 1), padding=(1, 0), groups=2)
            return F.linear(y, weight, bias)

    from tensorforge.graph import backend

    module, weight, bias = Conv(), rand(7, 9, seed=22), rand(7, seed=23)
    torch._dynamo.reset()
    fast = torch.compile(module, backend=backend)
    for height in (17, 18):
        x = rand(3, 4, height, 9, seed=height)
        torch._dynamo.maybe_mark_dynamic(x, 2)
        with torch.no_grad():
            torch.testing.assert_close(fast(x, weight, bias), module(x, weight, bias))


def test_max_and_min_over_a_dimension_without_their_indices():
    # torch.max(x, dim).values ran eagerly (aten.max.dim had no lowering); the indices are
    # an argmax's (lower_index_reduce.py)
    x = rand(5, 7, 3, seed=24)

    def fn(x):
        return x.max(1).values * 2, torch.min(x, -1, keepdim=True)[0], x.to(torch.int64).max(0)[0]

    check(fn, x)
    check(lambda x: x.max(1).indices, x)


def test_vector_norms():
    # x.norm(dim=...) and F.normalize ran eagerly (aten.linalg_vector_norm had no lowering)
    x = rand(5, 7, 3, seed=25)

    def fn(x):
        return (
            x.norm(dim=1),
            F.normalize(x, dim=-1),
            x.norm(),
            torch.linalg.vector_norm(x, 2, (0, 2)),
        )

    check(fn, x)
    check(lambda x: x.norm(p=1, dim=0), x)  # other orders too (lower_norms.py)


def test_convolution_of_constant_weights_over_channels_of_a_run_time_count():
    # the input's channels are a chunk of a run-time size (an expression Dynamo keeps), the
    # weights' a number: the weight matrix was reshaped to (F, C * KH * KW) with that expression

    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(rand(5, 3, 3, 4, seed=26), requires_grad=False)

        def forward(self, a):
            x = a.chunk(2, 0)[-1].expand(2, -1, -1, -1)
            return F.conv2d(x, self.w, stride=2, padding=(1, 0))

    module = Conv()
    fast, nothing_eager = dynamic(module)
    with torch.no_grad():
        a = rand(7, 3, 13, seed=27)
        torch.testing.assert_close(fast(a), module(a))
    nothing_eager()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_the_minimum_divided_by_minus_one_wraps(dtype):
    # x86 idiv of the minimum by -1 overflows (SIGFPE: the process was killed, at static sizes
    # and run-time ones); torch's floor division wraps to the minimum. Eager's trunc division
    # traps itself, so the compiled one is held to the wrapped quotient, never a crash.
    from tests.graph.test_lowering import compile_fn

    low = torch.iinfo(dtype).min
    i = torch.tensor([low, low, low + 1, 7, -7, 0, low, 5, low, -1, low, 3, low], dtype=dtype)
    j = torch.tensor([-1, 1, -1, -1, 2, -1, 3, -2, -1, -1, -1, -1, 7], dtype=dtype)

    def floor(i, j):
        return i // j, torch.div(i, j, rounding_mode="floor"), i // -1

    check(floor, i, j)
    fast, nothing_eager = dynamic(floor)
    for size in (13, 11):
        for got, want in zip(fast(i[:size], j[:size]), floor(i[:size], j[:size])):
            assert torch.equal(got, want)
    nothing_eager()

    def trunc(i, j):
        return torch.div(i, j, rounding_mode="trunc"), torch.div(i, -1, rounding_mode="trunc")

    traced = [torch.where(i == low, 0, i), j]  # (traced by running it eagerly)
    got = compile_fn(trunc, traced)([i, j])
    quotient = torch.where(j == -1, -i, torch.div(i, j.where(j != -1, 1), rounding_mode="trunc"))
    assert torch.equal(got[0], quotient) and torch.equal(got[1], -i)  # (-low is low, wrapped)


def test_integer_tensors_that_overflow_wrap_around():
    # int32 (x * 3) // 3 gave x and x * 4 > x gave x * 3 > 0 (the simplifier and LLVM's nsw
    # assumed no overflow, as for index arithmetic); torch wraps around
    low, high = torch.iinfo(torch.int32).min, torch.iinfo(torch.int32).max
    x = torch.tensor(
        [high, low, high // 2, -5, 7, low // 2 - 1, 100, 2, 2**29 + 3], dtype=torch.int32
    )

    def fn(x):
        return (x * 3) // 3, x * 4 > x, (x * 1103515245 + 12345) % 65536, (x + high) - high

    check(fn, x)


def test_a_cuda_kernel_of_an_empty_output_from_bfloat16_compiles():
    # an empty slice's kernel stores nothing, so it printed no bfloat16 expression and left out
    # <cuda_bf16.h>, while its parameter list names __nv_bfloat16: nvcc failed (seed 7046)
    import shutil

    from tests.graph.graph_fuzz_nvcc import nvcc_errors

    x = rand(3, 1, seed=30).to(torch.bfloat16)

    def fn(x):
        return ((x * 4).to(torch.int64) + 1)[..., 1:-1]

    modules = cuda_modules_of(fn, x, "sm_80")
    assert ["#include <cuda_bf16.h>" in m.get_source("cuda") for m in modules] == [True]
    if shutil.which("nvcc"):
        assert nvcc_errors(modules, "sm_80") is None


def cuda_modules_of(fn, x, arch):
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions
    from tensorforge.graph.program import BuiltKernel

    gm = make_fx(fn, decomposition_table=decompositions())(x)
    compiled = compile_aten(gm, [x], {}, Options(target=f"cuda -arch={arch}"))
    while not hasattr(compiled, "steps") and hasattr(compiled, "compiled"):  # (output views)
        compiled = compiled.compiled
    return [step.module for step in compiled.steps if isinstance(step, BuiltKernel)]


def test_a_bfloat16_vector_times_constant_weights():
    # F.linear of a 1-d bfloat16 input that is also an output (a buffer of its own): the CPU
    # dot kernel's "rows already in memory" test unpacked the vector's one index as two (seed
    # 17048, a lowering error). Through Dynamo: make_fx alone leaves linear's in-place squeeze_
    from tensorforge.graph import backend
    from tests.graph.test_dynamic_and_cuda import _find_compiled

    linear = torch.nn.Linear(3000, 5, bias=False).bfloat16().eval()
    x = rand(3000, seed=1).bfloat16()
    compiled = []

    def counting(gm, example_inputs, **kwargs):
        compiled.append(backend(gm, example_inputs, **kwargs))
        return compiled[-1]

    def fn(x):
        v = torch.where(x < 0.5, x * 2, -x)
        return linear(v), v

    torch._dynamo.reset()
    with torch.no_grad():
        got, expected = torch.compile(fn, backend=counting)(x), fn(x)
    assert torch.equal(got[1], expected[1])
    assert torch.allclose(got[0].float(), expected[0].float(), rtol=2e-2, atol=2e-2)
    assert [_find_compiled(c).program.fallbacks for c in compiled] == [[]]


def test_linear_of_a_vector_through_make_fx():
    # make_fx keeps F.linear's in-place squeeze_ of the 1-d input's product (aten mode sweeps
    # ran it eagerly; tests/graph/test_mutations.py has a squeeze_ of a graph input)
    x, w, b = rand(37, seed=1), rand(5, 37, seed=2), rand(5, seed=3)
    check(lambda x, w, b: F.linear(torch.tanh(x), w, b) * 2, x, w, b)


def test_a_bfloat16_max_pool_of_one_element_windows_builds():
    # 1 x 1 windows over rows of 9: the store of 8 lanes and 1 concatenated a <1 x float>
    # shuffled wider, on which LLVM's O3 pipeline aborted the process (an assertion in
    # getSplatValue; fuzz seed 17244)
    x = rand(3, 2, 31, 9, seed=1).bfloat16()
    check(lambda x: F.max_pool2d(x, 1) * 2, x, rtol=1e-2)
