"""The graph cache's first level (graph/front_cache.py): Dynamo's graph compiled again skips
AOTAutograd and follows the live weights; graphs AOT must wrap (mutation, aliasing) never get
an entry and stay correct; the ATen graph survives its JSON form."""

import os

import pytest

torch = pytest.importorskip("torch")

from tensorforge.graph import backend as tfb  # noqa: E402
from tensorforge.graph import front_cache  # noqa: E402
from tests.graph.models import SmallCNN, randomize_batch_norms  # noqa: E402


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", "1")
    monkeypatch.setenv("TENSORFORGE_CACHE_DIR", str(tmp_path))
    return tmp_path


RETURNED = []  # what the backend gave Dynamo, per compile


def _recording_backend(gm, example_inputs):
    RETURNED.append(tfb(gm, example_inputs))
    return RETURNED[-1]


def _compiled(model, *args):
    torch._dynamo.reset()
    with torch.no_grad():
        return torch.compile(model, backend=_recording_backend)(*args)


def _without_aot_wrappers() -> bool:
    return isinstance(RETURNED[-1], front_cache.DynamoCallable)


def _stats():
    s = front_cache.STATS
    return [s.hits, s.misses, s.writes, s.unsafe]


def _delta(before):
    return [a - b for a, b in zip(_stats(), before)]


def _error(got, expected) -> float:
    return ((got - expected).abs().max() / expected.abs().max()).item()


def test_a_second_compile_skips_aot_and_follows_the_live_weights(cache_dir, monkeypatch):
    torch.manual_seed(0)
    model = randomize_batch_norms(SmallCNN().eval())
    x = torch.randn(2, 3, 12, 12)
    before = _stats()
    first = _compiled(model, x)
    assert _delta(before) == [0, 1, 1, 0]  # a miss, then written
    assert _without_aot_wrappers()  # AOT ran, but its wrappers would do nothing: not kept
    assert any(name.endswith(".front") for name in os.listdir(cache_dir / "graphs"))
    with torch.no_grad():  # new weights, same graph
        model.c1.weight.mul_(1.5)
        model.b1.running_var.add_(0.25)
        model.b2.bias.sub_(0.5)
        expected = model(x)

    def no_aot(*args, **kwargs):
        raise AssertionError("AOTAutograd ran on a first-level hit")

    import torch._dynamo.backends.common as common

    monkeypatch.setattr(common, "aot_autograd", no_aot)
    second = _compiled(model, x)
    assert _delta(before) == [1, 1, 1, 0] and _without_aot_wrappers()
    assert _error(second, expected) < 1e-4  # batch norms folded from the new weights
    assert not torch.allclose(second, first)
    y = torch.randn(2, 3, 12, 12)  # the callable takes Dynamo's inputs on later calls too
    with torch.no_grad():
        assert _error(torch.compile(model, backend=tfb)(y), model(y)) < 1e-4


class MutatesBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(3))

    def forward(self, x):
        self.calls.add_(1)
        return torch.relu(x) * 2 + self.calls


class MutatesInput(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)
        return torch.sin(x) + 1


class ReturnsAView(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1, x.view(-1)


class ReturnsASlice(torch.nn.Module):
    def forward(self, x):
        return x[1:], torch.exp(x)


def test_mutations_never_get_an_entry_and_stay_correct(cache_dir):
    model, x = MutatesBuffer(), torch.randn(4, 3)
    before = _stats()
    for calls in (1, 2):  # compiled twice: AOT both times, each mutating the buffer
        got = _compiled(model, x)
        assert not _without_aot_wrappers()
        assert torch.allclose(got, torch.relu(x) * 2 + calls)
        assert model.calls.tolist() == [calls] * 3
    x0 = torch.randn(5)
    x = x0.clone()
    got = _compiled(MutatesInput(), x)
    assert torch.allclose(x, x0 * 2) and torch.allclose(got, torch.sin(x0 * 2) + 1)
    hits, _, writes, unsafe = _delta(before)
    assert (hits, writes, unsafe) == (0, 0, 3)
    assert not any(name.endswith(".front") for name in os.listdir(cache_dir / "graphs"))


@pytest.mark.parametrize("model", [ReturnsAView(), ReturnsASlice()], ids=type)
def test_outputs_that_alias_inputs_never_get_an_entry(cache_dir, model):
    x = torch.randn(4, 4)
    before = _stats()
    for _ in range(2):
        got = _compiled(model, x)
        assert not _without_aot_wrappers()
        expected = model(x)
        assert all(torch.allclose(g, e) for g, e in zip(got, expected))
    assert _delta(before)[2:] == [0, 2]
    view = got[1] if isinstance(model, ReturnsAView) else got[0]
    assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # as in eager


def test_a_graph_of_symbolic_sizes_runs_without_aot_wrappers_and_gets_no_entry(cache_dir):
    # Dynamo passes the sizes as ints; the compiled graph binds them from those each call
    torch.manual_seed(0)
    model = SmallCNN().eval()
    before, returned = _stats(), len(RETURNED)
    torch._dynamo.reset()
    fast = torch.compile(model, backend=_recording_backend, dynamic=True)
    with torch.no_grad():
        for batch, side in [(2, 12), (3, 10), (5, 16)]:
            x = torch.randn(batch, 3, side, side)
            assert _error(fast(x), model(x)) < 1e-4, (batch, side)
    assert len(RETURNED) == returned + 1  # one graph for every size
    assert isinstance(RETURNED[-1], front_cache.DynamoCallable)
    assert _delta(before)[2] == 0  # never written
    assert not any(name.endswith(".front") for name in os.listdir(cache_dir / "graphs"))


def test_the_aten_graph_survives_json_with_names_targets_and_shapes():
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph.backend import decompositions
    from tensorforge.graph.cache import graph_key
    from tensorforge.target import Target

    def fn(x, w):
        y = torch.nn.functional.max_pool2d(torch.relu(x), 2)  # a tuple-valued node + getitem
        z = y.permute(0, 2, 3, 1).to(torch.float64).sum(dim=[1, 2], keepdim=True)
        return torch.softmax(z.float() @ w, dim=-1), y.new_full((2, 1), float("-inf"))

    args = (torch.randn(2, 3, 8, 8), torch.randn(3, 4))
    gm = make_fx(fn, decomposition_table=decompositions())(*args)
    again = front_cache.graph_from_json(front_cache.graph_to_json(gm))
    for a, b in zip(gm.graph.nodes, again.graph.nodes, strict=True):
        assert (a.format_node(), a.target) == (b.format_node(), b.target)
        va, vb = a.meta.get("val"), b.meta.get("val")
        if isinstance(va, torch.Tensor):
            assert (va.shape, va.stride(), va.dtype, va.device) == (
                vb.shape,
                vb.stride(),
                vb.dtype,
                vb.device,
            )
    target = Target("llvm")
    assert graph_key(gm, {1: args[1]}, target) == graph_key(again, {1: args[1]}, target)
    expected = fn(*args)
    for got, want in zip(again(*args), expected):
        assert torch.equal(got, want)


def test_the_key_follows_shapes_strides_dtypes_and_options():
    from tensorforge.graph.options import Options
    from tensorforge.target import Target

    keys = []

    def capture(gm, example_inputs):
        keys.append(front_cache.front_key(gm, example_inputs, {}, Target("llvm"), opts[0]))
        return gm.forward

    def key(x, **options):
        opts[:] = [Options.of(options)]
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(lambda a: torch.sin(a) * 2, backend=capture)(x)
        return keys[-1]

    opts = [Options()]
    x = torch.randn(4, 6)
    same = key(x)
    assert same is not None and same == key(torch.randn(4, 6))
    others = {key(torch.randn(6, 4)), key(x.t()), key(x.double()), key(x, schedule="rules")}
    assert same not in others and len(others) == 4
    torch._dynamo.reset()
    with torch.no_grad():  # a symbolic size: no first-level entry
        torch.compile(lambda a: torch.sin(a) * 2, backend=capture, dynamic=True)(x)
    assert keys[-1] is None


def test_a_damaged_entry_is_deleted_and_compiled_through_aot(cache_dir):
    torch.manual_seed(0)
    model, x = SmallCNN().eval(), torch.randn(1, 3, 10, 10)
    first = _compiled(model, x)
    (entry,) = [n for n in os.listdir(cache_dir / "graphs") if n.endswith(".front")]
    (cache_dir / "graphs" / entry).write_text('{"format": 1, "nodes": [')
    before = (front_cache.STATS.rejected, *_stats())
    again = _compiled(model, x)
    after = (front_cache.STATS.rejected, *_stats())
    assert [a - b for a, b in zip(after, before)] == [1, 0, 1, 1, 0]  # rejected, rewritten
    assert torch.equal(again, first)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="this torch build has no CUDA")
def test_a_cuda_model_compiled_again_skips_aot(cache_dir):
    torch.manual_seed(0)
    model = randomize_batch_norms(SmallCNN().eval()).cuda()
    x = torch.randn(2, 3, 12, 12, device="cuda")
    before = _stats()
    _compiled(model, x)
    with torch.no_grad():
        model.c1.weight.mul_(1.5)
        expected = model(x)
    got = _compiled(model, x)
    torch.cuda.synchronize()
    assert _delta(before) == [1, 1, 1, 0]
    assert got.device.type == "cuda" and _error(got, expected) < 1e-4
