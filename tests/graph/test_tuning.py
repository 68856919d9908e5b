"""`tensorforge tune --torch` and the backend's `tuning_log`: a model's kernels tuned into a log,
the log's best records replayed when the model is compiled again."""

import json

import pytest

torch = pytest.importorskip("torch")

from tensorforge import lower  # noqa: E402
from tensorforge.graph import backend, tuning  # noqa: E402
from tensorforge.graph.schedules import schedule_kernel  # noqa: E402
from tensorforge.ops import cpu_dot  # noqa: E402
from tensorforge.target import Target  # noqa: E402

MODEL_FILE = """
import torch
from torch import nn

def mlp():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(13, 24), nn.ReLU(), nn.Linear(24, 7))
"""


def collected(model, x):
    torch._dynamo.reset()
    with tuning.collecting() as kernels, torch.no_grad():
        torch.compile(model.eval(), backend=backend)(x)
    torch._dynamo.reset()
    return kernels


def test_a_rule_based_schedule_replays_from_its_trace():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(9, 5), torch.nn.GELU())
    x = torch.randn(3, 9)
    kernels = collected(model, x)
    assert kernels
    target = Target("llvm")
    for spec, _ in kernels:
        s, _ = schedule_kernel(spec, target)
        direct = str(lower(s, tuning.kernel_tensors(spec), name="f"))
        task = tuning.kernel_task(spec, target)
        replayed_s, tensors = task.instantiate(tuning.rule_trace(spec, target))
        replayed = str(lower(replayed_s, tensors, name="f"))
        assert replayed == direct and "ramp(" in direct  # vectorized: the rule was applied


@pytest.mark.skipif(
    not cpu_dot.has_feature("bfloat16", Target("llvm")), reason="this CPU has no AVX512-BF16"
)
def test_bfloat16_dot_kernels_are_not_tuning_tasks():
    """Products on ops/cpu_dot's micro-kernel (a bfloat16 linear here) are left out: the
    auto-scheduler's sketches cannot express its tensorized call."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(9, 5), torch.nn.GELU()).to(torch.bfloat16)
    x = torch.randn(3, 9, dtype=torch.bfloat16)
    kernels = collected(model, x)
    dot = [(spec, t) for spec, t in kernels if spec.anchor and "cpu_dot" in spec.anchor.info]
    assert dot
    assert all(tuning.kernel_task(spec, target) is None for spec, target in dot)
    assert tuning.collect_tasks(dot) == []


def test_tune_torch_writes_a_log_the_backend_applies(tmp_path, capsys):
    from tensorforge.cli import main

    (tmp_path / "model.py").write_text(MODEL_FILE)
    log = tmp_path / "mlp.jsonl"
    argv = ["tune", "--torch", f"{tmp_path / 'model.py'}:mlp", "--example-input", "[5, 13]"]
    argv += ["--trials", "4", "--log", str(log), "--number", "1", "--repeat", "1"]
    argv += ["--n-parallel", "1", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "2 kernels to tune" in out and "tuning_log" in out
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert {r["template"] for r in records} == {"auto/graph/k0_relu", "auto/graph/k1_addmm_1"}
    assert len(records) >= 2 + 2  # each kernel's rule-based schedule, then the search's

    # the best record of each kernel is the schedule the backend builds
    best = {}
    for r in records:
        if r["result"]["error_no"] == 0:
            cost = min(r["result"]["costs"])
            if r["template"] not in best or cost < best[r["template"]][0]:
                best[r["template"]] = (cost, r["config"]["index"])
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(13, 24), torch.nn.ReLU(), torch.nn.Linear(24, 7))
    x = torch.randn(5, 13)
    options = {"tuning_log": str(log), "report": True}
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model.eval(), backend=backend, options=options)(x)
        expected = model(x)
    torch._dynamo.reset()
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5)
    report = capsys.readouterr().err
    for template, (_, index) in best.items():
        line = next(t for t in report.splitlines() if template.removeprefix("auto/graph/") in t)
        assert f"tuned: log record {index} " in line
