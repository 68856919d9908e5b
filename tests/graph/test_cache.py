"""The disk cache of compiled graphs (graph/cache.py): a second process compiling the same
model loads it; the folded weights follow the live ones; another shape is another entry."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from tensorforge.graph import cache
    from tensorforge.graph import backend as tfb
    from tests.graph.models import SmallCNN, randomize_batch_norms

    def compiled_output(model, x):
        torch._dynamo.reset()
        with torch.no_grad():
            return torch.compile(model, backend=tfb)(x), model(x)

    torch.manual_seed(0)
    model = randomize_batch_norms(SmallCNN().eval())
    x = torch.randn(2, 3, 12, 12)
    report = {}
    got, expected = compiled_output(model, x)
    report["first"] = [got.tolist(), cache.STATS.hits, cache.STATS.misses]
    if sys.argv[1] == "second":
        with torch.no_grad():  # new weights, same graph: a hit, computed with the new ones
            model.c1.weight.mul_(1.5)
            model.b1.running_var.add_(0.25)
            model.b2.bias.sub_(0.5)
        got, expected = compiled_output(model, x)
        error = ((got - expected).abs().max() / expected.abs().max()).item()
        report["new_weights"] = [got.tolist(), error, cache.STATS.hits, cache.STATS.misses]
        got, expected = compiled_output(model, torch.randn(2, 3, 10, 10))
        error = ((got - expected).abs().max() / expected.abs().max()).item()
        report["new_shape"] = [error, cache.STATS.hits, cache.STATS.misses]
    print("REPORT", json.dumps(report))
    """
)


def _run(tmp_path, which: str) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["TENSORFORGE_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(root, "src"), root])
    env.pop("TENSORFORGE_CACHE", None)
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, which],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :])


def test_a_second_process_loads_the_graph_and_follows_the_live_weights(tmp_path):
    first = _run(tmp_path, "first")
    assert first["first"][1:] == [0, 1]  # compiled, then written
    assert os.listdir(tmp_path / "cache" / "graphs")
    second = _run(tmp_path, "second")
    output, hits, misses = second["first"]
    assert (hits, misses) == (1, 0)
    assert output == first["first"][0]  # the same kernels: the same numbers
    new_output, error, hits, misses = second["new_weights"]
    assert (hits, misses) == (2, 0)  # the same graph: the entry serves it...
    assert error < 1e-4  # ...with batch norms folded from the new weights
    assert new_output != output
    error, hits, misses = second["new_shape"]
    assert (hits, misses) == (2, 1)  # another input shape: another graph
    assert error < 1e-4


def _compile_small(x, w):
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    def fn(x, w):
        return torch.relu(x @ w) + 1.0

    gm = make_fx(fn, decomposition_table=decompositions())(x, w)
    return compile_aten(gm, [x, w], {1: w}, Options())


def test_a_damaged_entry_is_deleted_and_the_graph_compiled_again(tmp_path, monkeypatch):
    from tensorforge.graph import cache

    monkeypatch.setenv("TENSORFORGE_CACHE", "1")
    monkeypatch.setenv("TENSORFORGE_CACHE_DIR", str(tmp_path))
    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(5, 7, generator=gen), torch.randn(7, 3, generator=gen)
    expected = torch.relu(x @ w) + 1.0
    before = (cache.STATS.hits, cache.STATS.misses, cache.STATS.rejected)
    first = _compile_small(x, w)
    (entry,) = os.listdir(tmp_path / "graphs")
    second = _compile_small(x, w)  # loaded
    w2 = torch.randn(7, 3, generator=gen)  # the constant changed: same entry, new values
    third = _compile_small(x, w2)
    with open(tmp_path / "graphs" / entry, "r+b") as f:  # damage it
        f.seek(100)
        f.write(b"\xff" * 16)
    fourth = _compile_small(x, w)
    after = (cache.STATS.hits, cache.STATS.misses, cache.STATS.rejected)
    assert [a - b for a, b in zip(after, before)] == [2, 2, 1]
    for compiled in (first, second, fourth):
        assert torch.allclose(compiled([x, w])[0], expected, rtol=1e-5, atol=1e-5)
    assert torch.allclose(third([x, w2])[0], torch.relu(x @ w2) + 1.0, rtol=1e-5, atol=1e-5)


def test_the_key_changes_with_shapes_target_tuning_log_and_schedule(tmp_path):
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph.cache import graph_key
    from tensorforge.target import Target

    def key(shape, target="llvm", log=None, schedule="auto"):
        gm = make_fx(lambda a: torch.sin(a) * 2)(torch.randn(*shape))
        return graph_key(gm, {}, Target(target), log, schedule)

    log = tmp_path / "log.json"
    log.write_text("{}")
    assert key((3, 4)) == key((3, 4))
    keys = {key((3, 4)), key((4, 3)), key((3, 4), "cuda"), key((3, 4), log=str(log))}
    keys.add(key((3, 4), schedule="rules"))
    assert len(keys) == 5
    log.write_text('{"a": 1}')
    assert key((3, 4), log=str(log)) not in keys


def test_least_recently_used_entries_go_past_the_size_bound(tmp_path):
    from tensorforge.graph.cache import _evict

    for k, age in enumerate([30, 10, 20]):
        path = tmp_path / f"{k}.tflib"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1e9 + age, 1e9 + age))
    _evict(str(tmp_path), 2500)
    assert sorted(os.listdir(tmp_path)) == ["0.tflib", "2.tflib"]  # the oldest (1) went


def _three_layers():
    """Three products alike but for their weights (the first two also in their epilogue)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import decompositions

    def fn(x, w1, w2, w3):
        y = torch.relu(x @ w1)
        y = torch.relu(y @ w2)
        return torch.sigmoid(y @ w3)

    gen = torch.Generator().manual_seed(7)
    inputs = [torch.randn(6, 32, generator=gen)] + [
        torch.randn(32, 32, generator=gen) for _ in range(3)
    ]
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    return fn, inputs, gm, {k: inputs[k] for k in (1, 2, 3)}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_kernels_alike_share_code_and_their_entry_loads_back(tmp_path, monkeypatch):
    """No GPU needed: the build shares code between kernels alike, the entry holds each
    distinct kernel's cubin once, and loading gives back the same sources and launches."""
    from tensorforge.graph import Options, cache, compile_aten
    from tensorforge.graph.lowerer import Lowerer
    from tensorforge.graph.program import BuiltKernel
    from tensorforge.runtime import library_file
    from tensorforge.target import Target

    monkeypatch.setenv("TENSORFORGE_CACHE", "1")
    monkeypatch.setenv("TENSORFORGE_CACHE_DIR", str(tmp_path))
    _, inputs, gm, known = _three_layers()
    target = Target("cuda -arch=sm_90")
    assert not cache.enabled(target)  # here, without a GPU, CUDA graphs are not cached...
    compiled = compile_aten(gm, inputs, known, Options(target=str(target)))
    built = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert len(built) == 3 and built[0].executable is built[1].executable
    assert built[2].executable is not built[0].executable
    writes = cache.STATS.writes
    cache.store("k" * 64, compiled.steps, target)  # ...but an entry can be written and read
    assert cache.STATS.writes == writes + 1, cache.STATS.last_error
    meta = library_file.read(cache.entry_path("k" * 64)).metadata
    assert len(meta["functions"]) == 2 and len(meta["graph_kernels"]) == 3
    program = Lowerer(gm, known, target).run()
    loaded = cache.load("k" * 64, program, target)
    assert loaded is not None
    again = [s for s in loaded if isinstance(s, BuiltKernel)]
    assert again[0].executable is again[1].executable
    for a, b in zip(built, again, strict=True):
        assert (a.spec.name, a.positions, a.source) == (b.spec.name, b.positions, b.source)
        sa, sb = a.executable.source, b.executable.source
        assert (sa.text, sa.launch, sa.params) == (sb.text, sb.launch, sb.params)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="this torch build has no CUDA")
def test_a_cuda_graph_loads_from_the_cache_and_runs_as_one_cuda_graph(tmp_path, monkeypatch):
    from tensorforge.graph import Options, cache, compile_aten
    from tensorforge.graph.program import BuiltKernel

    monkeypatch.setenv("TENSORFORGE_CACHE", "1")
    monkeypatch.setenv("TENSORFORGE_CACHE_DIR", str(tmp_path))
    fn, inputs, _, _ = _three_layers()
    inputs = [t.cuda() for t in inputs]
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import decompositions

    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    known = {k: inputs[k] for k in (1, 2, 3)}
    before = (cache.STATS.hits, cache.STATS.misses, cache.STATS.writes)
    first = compile_aten(gm, inputs, known, Options())
    second = compile_aten(gm, inputs, known, Options())  # from the entry
    after = (cache.STATS.hits, cache.STATS.misses, cache.STATS.writes)
    assert [a - b for a, b in zip(after, before)] == [1, 1, 1], cache.STATS.last_error
    kernels = [s for s in second.steps if isinstance(s, BuiltKernel)]
    assert kernels[0].executable is kernels[1].executable
    expected = fn(*inputs)
    for _ in range(3):  # the first calls launch kernels one by one, later ones a CUDA graph
        for compiled in (first, second):
            (got,) = compiled(list(inputs))
            torch.cuda.synchronize()
            assert ((got - expected).abs().max() / expected.abs().max()).item() < 1e-4
    assert second._graph is not None
