"""`tensorforge tune --torch FILE.py:model_fn --example-input '[1, 768]'` (API.md §9).

Loads the model (`model_fn()` returns an `nn.Module`; an `nn.Module` object in the file works
too), compiles it once with the backend while noting every kernel, tunes the kernels into one
log (each kernel's rule-based schedule first, then the auto-scheduler's search with the trials
shared by the task scheduler), and prints how to use the log:
`torch.compile(model, backend="tensorforge", options={"tuning_log": LOG})`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from tensorforge.errors import ArgumentError, TensorForgeError
from tensorforge.tune.user_file import load_user_file


def load_model(spec: str) -> Any:
    """`path/to/file.py:name` -> the module (`name` is a function returning one, or one)."""
    import torch

    module, path, name = load_user_file(
        spec, "--torch", "FILE.py:MODEL_FN", "_tensorforge_model_", ArgumentError
    )
    found = getattr(module, name, None)
    if found is None:
        raise ArgumentError(f"{path} has no {name!r}")
    model = found if isinstance(found, torch.nn.Module) else found()
    if not isinstance(model, torch.nn.Module):
        raise ArgumentError(f"{spec}: expected an nn.Module (or a function returning one)")
    return model.eval()


def example_inputs(text: str, device: str) -> list:
    """`'[1, 768]'` (one float32 input of that shape), `'[[1, 768], [1, 10]]'` (several), or
    entries `{"shape": [4, 16], "dtype": "int64", "high": 100}` (integers in [0, high))."""
    import torch

    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ArgumentError(f"--example-input is not valid JSON ({e}): {text}") from None
    if isinstance(data, list) and all(isinstance(d, int) for d in data):
        data = [data]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise ArgumentError(f"--example-input: give a shape or a list of shapes, got {text}")
    generator = torch.Generator().manual_seed(0)
    inputs = []
    for entry in data:
        entry = {"shape": entry} if isinstance(entry, list) else entry
        if not isinstance(entry, dict) or not all(isinstance(s, int) for s in entry["shape"]):
            raise ArgumentError(f"--example-input: {entry!r} is not a shape")
        dtype = getattr(torch, entry.get("dtype", "float32"), None)
        if not isinstance(dtype, torch.dtype):
            raise ArgumentError(f"--example-input: unknown dtype {entry.get('dtype')!r}")
        shape = entry["shape"]
        if dtype.is_floating_point:
            value = torch.randn(shape, generator=generator).to(dtype)
        else:
            value = torch.randint(0, int(entry.get("high", 2)), shape, generator=generator)
            value = value.to(dtype)
        inputs.append(value.to(device))
    return inputs


def collect(model: Any, inputs: list, target: str | None) -> list:
    """Compile the model once, noting its kernels: the graph's tunable tasks."""
    import torch

    from tensorforge.graph import tuning
    from tensorforge.graph.backend import backend

    torch._dynamo.reset()
    options = {"target": target} if target else {}
    with tuning.collecting() as kernels, torch.no_grad():
        torch.compile(model, backend=backend, options=options)(*inputs)
    torch._dynamo.reset()
    return tuning.collect_tasks(kernels)


def main(argv: Sequence[str] | None = None) -> int:
    from tensorforge import tune
    from tensorforge.graph import tuning

    parser = argparse.ArgumentParser(
        prog="tensorforge tune --torch",
        description="Tune the kernels of a PyTorch model into one log for the torch.compile "
        "backend's tuning_log option.",
    )
    parser.add_argument("--torch", required=True, metavar="FILE.py:MODEL_FN")
    parser.add_argument(
        "--example-input",
        required=True,
        help="the input's shape as JSON ('[1, 768]'), a list of shapes, or "
        '{"shape": [...], "dtype": "int64", "high": N} entries',
    )
    parser.add_argument("--target", default="llvm", help="llvm (default, this CPU)")
    parser.add_argument(
        "--trials", type=int, default=64, help="trials in total, shared among the kernels"
    )
    parser.add_argument("--log", help="log file (default: <model_fn>.jsonl); resumed if present")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--number", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=20)
    parser.add_argument("--n-parallel", type=int, default=None)
    parser.add_argument("--no-progress", action="store_true")
    options = parser.parse_args(argv)
    if options.trials < 0:
        parser.error(f"--trials must be >= 0, got {options.trials}")
    log = options.log or options.torch.rpartition(":")[2] + ".jsonl"
    try:
        if options.target.split()[0] != "llvm":
            raise ArgumentError(
                f"tune --torch measures on this CPU only (llvm), not {options.target!r}"
            )
        model = load_model(options.torch)
        inputs = example_inputs(options.example_input, "cpu")
        kernels = collect(model, inputs, options.target)
    except TensorForgeError as e:
        print(f"tensorforge tune: {e}", file=sys.stderr)
        return 2
    if not kernels:
        print("no kernel with static sizes to tune (every node ran eagerly?)")
        return 1
    print(f"{len(kernels)} kernels to tune; log: {log}")
    option = tune.measure_option(
        number=options.number,
        repeat=options.repeat,
        timeout=options.timeout,
        n_parallel=options.n_parallel,
    )
    try:
        scheduler = tuning.tune_kernels(
            kernels, options.trials, log, option, options.seed, not options.no_progress
        )
    except KeyboardInterrupt:
        print(f"\ninterrupted; every measured trial is in {log}", file=sys.stderr)
        return 130
    for kernel, tuner in zip(kernels, scheduler.tuners):
        best = tuner.best_cost * 1e3
        rule = "rule-based" if tuner.best_trace == kernel.rule else "searched"
        print(f"  {kernel.task.workload_name}: best {best:.4g} ms ({rule})")
    print(
        f"to use it:\n    torch.compile(model, backend='tensorforge', "
        f"options={{'tuning_log': {log!r}}})"
    )
    return 0
