"""`tensorforge tune` and `tensorforge log show`: the command-line face of tune (API.md §5)."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from tensorforge.errors import TensorForgeError
from tensorforge.tune.template import TuneError, get_template
from tensorforge.tune.user_file import load_user_file


def _load_template_file(spec: str) -> Any:
    """`path/to/file.py:name` -> the Template (by registered name or by the function's name)."""
    from tensorforge.tune.template import _TEMPLATES, Template

    module, path, name = load_user_file(
        spec, "--template", "FILE.py:NAME", "_tensorforge_template_", TuneError
    )
    candidate = getattr(module, name, None)
    if isinstance(candidate, Template):
        return candidate
    if name in _TEMPLATES:
        return _TEMPLATES[name]
    defined = [k for k, v in vars(module).items() if isinstance(v, Template)]
    raise TuneError(
        f"{path} has no template {name!r} (templates there: {', '.join(defined) or 'none'})"
    )


def _make_tuner(kind: str, task: Any, seed: int | None) -> Any:
    from tensorforge import tune

    if kind == "auto":
        try:
            import xgboost  # noqa: F401
        except ImportError:
            kind = "random"
        else:
            kind = "xgb"
    if kind == "xgb":
        return tune.XGBTuner(task, seed=seed)
    if kind == "random":
        return tune.RandomTuner(task, seed=seed)
    if kind == "grid":
        return tune.GridSearchTuner(task, seed=seed)
    raise TuneError(f"--tuner must be xgb, random or grid, got {kind!r}")


def tune_main(argv: Sequence[str] | None = None) -> int:
    """`tensorforge tune [matmul|conv2d] [--template FILE.py:NAME] [--args JSON] ...`"""
    from tensorforge import tune
    from tensorforge.tune.builtin import DEFAULT_ARGS, GPU_ONLY

    parser = argparse.ArgumentParser(
        prog="tensorforge tune",
        description="Tune a built-in operator or a template from a file, writing a JSON-lines log. "
        "(A PyTorch model's kernels: tensorforge tune --torch FILE.py:MODEL_FN --example-input "
        "SHAPE; see tensorforge tune --torch x --help.)",
    )
    parser.add_argument("op", nargs="?", choices=sorted(DEFAULT_ARGS), help="a built-in template")
    parser.add_argument("--template", help="a template in a file: FILE.py:NAME")
    parser.add_argument(
        "--auto", metavar="FILE.py:FUNC", help="auto-schedule a workload function (no template)"
    )
    parser.add_argument(
        "--args",
        help="the template's arguments as a JSON list, e.g. '[512, 512, 512, \"float32\"]'",
    )
    parser.add_argument(
        "--shape",
        type=int,
        nargs="+",
        help="the leading integer arguments of a built-in (e.g. 256 256 256)",
    )
    parser.add_argument(
        "--target",
        default=None,
        help="target string (default: llvm, this CPU; cuda for the GPU-only built-ins)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=200,
        help="trials in total, as TVM's n_trial (default: 200); a resumed log's trials count "
        "toward it, so a rerun measures only the rest",
    )
    parser.add_argument(
        "--log", help="log file (default: <template>.jsonl); an existing log is resumed"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for a repeatable search")
    parser.add_argument("--tuner", default="auto", choices=["auto", "xgb", "random", "grid"])
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--min-repeat-ms", type=float, default=0)
    parser.add_argument(
        "--timeout", type=float, default=10, help="seconds allowed for a build, and for a run"
    )
    parser.add_argument(
        "--n-parallel", type=int, default=None, help="parallel builds (default: cores)"
    )
    parser.add_argument(
        "--check-correctness", action="store_true", help="compare outputs with the default config"
    )
    parser.add_argument("--early-stopping", type=int, default=None)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="measure on a Ray cluster: 'auto', 'host:6379', 'ray://host:10001' or 'local'",
    )
    parser.add_argument(
        "--ray-gpus",
        type=int,
        default=None,
        metavar="N",
        help="a local Ray cluster measures on N of this host's GPUs (default: all)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --log (an existing log always is)",
    )
    options = parser.parse_args(argv)
    if options.target is None:
        options.target = GPU_ONLY.get(options.op or "", "llvm")
    if options.auto:
        from tensorforge.tune.auto.cli import auto_main

        return auto_main(options)

    if options.trials < 0:
        parser.error(f"--trials must be >= 0, got {options.trials}")
    if not options.template and not options.op:
        parser.error(
            f"name a built-in template ({', '.join(sorted(DEFAULT_ARGS))}) "
            "or give --template FILE.py:NAME"
        )
    try:
        if options.template:
            tmpl = _load_template_file(options.template)
            args = _parse_args(options.args, [])
        else:
            tmpl = get_template("builtin/" + options.op)
            args = _parse_args(options.args, list(DEFAULT_ARGS[options.op]))
            if options.shape:
                args[: len(options.shape)] = options.shape
        _check_arity(tmpl, args)
        task = tune.create_task(tmpl, args, options.target)
        tuner = _make_tuner(options.tuner, task, options.seed)
        no_device = missing_local_device(task.target_kind, options)
        if no_device:
            print(f"tensorforge tune: {no_device}", file=sys.stderr)
            return 2
        log = options.log or task.name.replace("/", "_") + ".jsonl"
        _check_log_writable(log)
    except KeyboardInterrupt:
        print("\ninterrupted before tuning started", file=sys.stderr)
        return 130
    except TensorForgeError as e:
        print(f"tensorforge tune: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a user's template failing: one line, no traceback
        print(f"tensorforge tune: {type(e).__name__}: {e}", file=sys.stderr)
        return 2

    print(f"task: {task.name} args={task.args_json} target={task.target.split(' -mattr=')[0]}")
    print(task.config_space)
    resumed = tuner.load_history(log) if os.path.exists(log) else 0
    remaining = max(0, options.trials - resumed)
    if resumed:
        print(
            f"resuming: {resumed} trials already in {log} count toward --trials {options.trials}; "
            f"measuring up to {remaining} more"
        )
    callbacks: list[Any] = [tune.log_to_file(log)]
    if not options.no_progress:
        callbacks.append(tune.progress_bar())
    option = tune.measure_option(
        number=options.number,
        repeat=options.repeat,
        min_repeat_ms=options.min_repeat_ms,
        timeout=options.timeout,
        n_parallel=options.n_parallel,
        check_correctness=options.check_correctness,
        runner=ray_runner(options),
    )
    try:
        if remaining:
            tuner.tune(
                remaining, option, callbacks=callbacks, early_stopping=options.early_stopping
            )
    except KeyboardInterrupt:
        count = _records_of(task, log)
        print(f"\ninterrupted: {count} records in {log}; run again to resume", file=sys.stderr)
        return 130
    if tuner.best_config is None:
        print(f"no config ran successfully; see the errors in {log}")
        return 1
    gflops = tuner.best_flops / 1e9
    print(f"best: {tuner.best_cost * 1e3:.4f} ms ({gflops:.2f} GFLOP/s) config {tuner.best_config}")
    print(f"log: {log}")
    name, module = task.template.__name__, task.template.__module__
    where = (
        f"from {module} import {name}"
        if not options.template
        else f"# {name}: the template in {options.template.rpartition(':')[0]}"
    )
    print(
        f"to use it:\n    {where}\n"
        f"    with tune.apply_history_best({log!r}), tf.Target({options.target!r}):\n"
        f"        s, args = {name}({', '.join(map(repr, task.args))})"
    )
    return 0


def _parse_args(text: str | None, default: list) -> list:
    if not text:
        return default
    try:
        args = json.loads(text)
    except json.JSONDecodeError as e:
        raise TuneError(f"--args is not valid JSON ({e}): {text}") from None
    if not isinstance(args, list):
        raise TuneError(
            f"--args must be a JSON list, e.g. '[512, 512, 512, \"float32\"]', got {text}"
        )
    return args


def _check_arity(tmpl: Any, args: list) -> None:
    """A TuneError naming the template's parameters when `args` cannot be bound to them."""
    try:
        signature = inspect.signature(tmpl.func)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args)
    except TypeError:
        raise TuneError(
            f"template {tmpl.name!r} takes {signature}; --args gave {len(args)} value(s): "
            f"{json.dumps(args)}"
        ) from None


def _check_log_writable(log: str) -> None:
    """A TuneError now (not after the first trial) if the log cannot be appended to."""
    if os.path.isdir(log):
        raise TuneError(f"--log {log!r} is a directory; give a file name")
    existed = os.path.exists(log)
    try:
        with open(log, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise TuneError(f"cannot write the log {log!r}: {e.strerror or e}") from None
    if not existed:
        os.remove(log)


def _records_of(task: Any, log: str) -> int:
    """How many records of `task` the log holds."""
    from tensorforge.tune.records import load_records

    try:
        return sum(1 for r in load_records(log) if r.key == task.key)
    except OSError:
        return 0


# -- log show ----------------------------------------------------------------------------------------


def _short_target(target: str) -> str:
    return target.split(" -mattr=")[0]


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def log_show_main(argv: Sequence[str] | None = None) -> int:
    """`tensorforge log show FILE [--top N] [--plot curve.png]`"""
    from tensorforge.tune.records import load_records

    parser = argparse.ArgumentParser(
        prog="tensorforge log show", description="Best records of a tuning log."
    )
    parser.add_argument("file", help="a JSON-lines tuning log")
    parser.add_argument(
        "--top", type=int, default=5, help="records to list per workload (default: 5)"
    )
    parser.add_argument(
        "--plot", help="save the best-so-far curve to this image (needs matplotlib)"
    )
    options = parser.parse_args(argv)
    if not os.path.exists(options.file):
        print(f"tensorforge log show: no such file {options.file!r}", file=sys.stderr)
        return 2
    records = load_records(options.file)
    if not records:
        print(f"{options.file}: no records")
        return 1

    workloads: dict[Any, list] = {}
    for rec in records:
        workloads.setdefault(rec.key, []).append(rec)
    summary = []
    for key, recs in workloads.items():
        ok = [r for r in recs if r.result.ok]
        best = min(ok, key=lambda r: r.cost) if ok else None
        summary.append(
            [
                key.template,
                key.args,
                _short_target(key.target),
                str(len(recs)),
                str(len(recs) - len(ok)),
                f"{best.cost * 1e3:.4f}" if best else "-",
                f"{best.gflops:.2f}" if best else "-",
            ]
        )
    print(_table(summary, ["template", "args", "target", "trials", "errors", "best ms", "GFLOP/s"]))
    for key, recs in workloads.items():
        ok = sorted((r for r in recs if r.result.ok), key=lambda r: r.cost)
        print(f"\n{key.template} {key.args}: best {min(options.top, len(ok))} of {len(recs)}")
        rows = [
            [
                str(rank + 1),
                f"{r.cost * 1e3:.4f}",
                f"{r.gflops:.2f}",
                str(r.config.get("index")),
                json.dumps(r.config.get("knobs")),
            ]
            for rank, r in enumerate(ok[: options.top])
        ]
        if rows:
            print(_table(rows, ["#", "ms", "GFLOP/s", "index", "knobs"]))
        errors: dict[int, int] = {}
        for r in recs:
            if not r.result.ok:
                errors[r.result.error_no] = errors.get(r.result.error_no, 0) + 1
        if errors:
            from tensorforge.tune.measure import MeasureErrorNo

            text = ", ".join(
                f"{MeasureErrorNo(no).name.lower()} {n}" for no, n in sorted(errors.items())
            )
            print(f"errors: {text}")
    if options.plot:
        try:
            _plot(workloads, options.plot)
        except ImportError:
            print(
                "tensorforge log show: --plot needs matplotlib (pip install 'tensorforge[tune]')",
                file=sys.stderr,
            )
            return 2
        print(f"\nplot: {options.plot}")
    return 0


def trial_values(records: Sequence[Any]) -> list[float | None]:
    """Each trial's GFLOP/s (or 1/ms where the flop count is unknown); None for a failed one."""
    from tensorforge.tune.records import implausible

    out: list[float | None] = []
    for r in records:
        if r.result.ok and implausible(r.result, r.flop, r.target) is None:
            out.append(r.gflops if r.flop else 1e-3 / r.cost)
        else:
            out.append(None)
    return out


def best_so_far(records: Sequence[Any]) -> list[float]:
    """Best GFLOP/s (or 1/ms where the flop count is unknown) after each trial."""
    out, best = [], 0.0
    for value in trial_values(records):
        if value is not None:
            best = max(best, value)
        out.append(best)
    return out


def _plot(workloads: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4.5))
    any_flop = False
    for key, recs in workloads.items():
        any_flop |= any(r.flop for r in recs)
        trials = list(range(1, len(recs) + 1))
        (line,) = ax.step(
            trials, best_so_far(recs), where="post", label=f"{key.template} {key.args}: best so far"
        )
        measured = [(t, v) for t, v in zip(trials, trial_values(recs)) if v is not None]
        if measured:
            xs, ys = zip(*measured)
            ax.scatter(xs, ys, s=10, alpha=0.45, color=line.get_color(), label="each trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # trials are whole numbers
    ax.set_xlim(left=0.5)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("trial")
    ax.set_ylabel("GFLOP/s" if any_flop else "1/ms")
    ax.set_title("tuning curve: best so far (line) and each trial (dots)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ray_runner(options: Any) -> Any:
    """The RayRunner that `--ray` / `--ray-gpus` ask for, or None (local measurement)."""
    if getattr(options, "ray_gpus", None) is not None and not getattr(options, "ray", None):
        raise SystemExit("tensorforge tune: --ray-gpus needs --ray (e.g. --ray local)")
    if not getattr(options, "ray", None):
        return None
    from tensorforge import tune

    return tune.RayRunner(address=options.ray, num_gpus=options.ray_gpus)


def missing_local_device(target_kind: str, options: Any) -> str | None:
    """Why a GPU target cannot be measured on this machine, or None. Checked without opening a
    CUDA context (the measuring processes open their own)."""
    import importlib.util

    if target_kind != "cuda" or getattr(options, "ray", None):
        return None
    if importlib.util.find_spec("pycuda") is None:
        why = "pycuda is not installed (pip install 'tensorforge[cuda]')"
    elif not os.path.exists("/dev/nvidiactl") and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        why = "no NVIDIA driver device here"
    else:
        return None
    return (
        f"a cuda target is measured on a GPU, and {why}: tune on the GPU machine, or add "
        "--ray ADDRESS to measure on a Ray cluster that has one"
    )
