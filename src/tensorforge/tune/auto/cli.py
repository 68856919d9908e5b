"""`tensorforge tune --auto FILE.py:FUNC --args '[...]'`: auto-schedule a workload from a file."""

from __future__ import annotations

import json
import sys
from typing import Any

from tensorforge.tune.cli import missing_local_device, ray_runner
from tensorforge.tune.template import TuneError
from tensorforge.tune.user_file import load_user_file


def load_workload(spec: str) -> Any:
    """`path/to/file.py:func` -> the workload function (registered or plain)."""
    module, path, name = load_user_file(
        spec, "--auto", "FILE.py:FUNC", "_tensorforge_workload_", TuneError
    )
    func = getattr(module, name, None)
    if not callable(func):
        defined = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")]
        raise TuneError(f"{path} has no function {name!r} (functions: {', '.join(defined)})")
    return func


def auto_main(options: Any) -> int:
    """Tune (or, with --trials 0, only take the first guess), then print the schedule."""
    from tensorforge import tune
    from tensorforge.tune.auto import SearchTask
    from tensorforge.tune.auto.tuning import task_records

    try:
        func = load_workload(options.auto)
        args = json.loads(options.args) if options.args else []
        task = SearchTask(func, args, options.target)
    except (TuneError, ValueError, json.JSONDecodeError) as e:
        print(f"tensorforge tune: {e}", file=sys.stderr)
        return 2
    no_device = missing_local_device(task.target_kind, options) if options.trials else None
    if no_device:
        print(f"tensorforge tune: {no_device}", file=sys.stderr)
        return 2
    if getattr(options, "tuner", "auto") == "grid":
        print(
            "tensorforge tune: --auto searches by model or at random (--tuner xgb or random), "
            "not on a grid",
            file=sys.stderr,
        )
        return 2
    if getattr(options, "early_stopping", None) is not None:
        print(
            "tensorforge tune: --early-stopping is for template tuners; --auto stops after "
            "--trials",
            file=sys.stderr,
        )
        return 2
    log = options.log or f"{task.workload_name}.auto.jsonl"
    print(f"task: {task.name} args={task.args_json} target={task.target.split(' -mattr=')[0]}")
    if options.trials <= 0:
        from tensorforge.tune.auto.analytic import first_guess

        print("first guess (no measurement):")
        print(task.to_python(first_guess(task)))
        return 0
    option = tune.measure_option(
        number=options.number,
        repeat=options.repeat,
        min_repeat_ms=options.min_repeat_ms,
        timeout=options.timeout,
        n_parallel=options.n_parallel,
        check_correctness=options.check_correctness,
        runner=ray_runner(options),
    )
    seed = 0 if options.seed is None else options.seed
    # --trials counts the whole run, as for templates: a log's trials of this task count too.
    resumed = len(task_records(task, log))
    remaining = max(0, options.trials - resumed)
    if resumed:
        print(
            f"resuming: {resumed} trials already in {log} count toward --trials {options.trials}; "
            f"measuring up to {remaining} more"
        )
    tuner = task.tune(
        remaining,
        log=log,
        seed=seed,
        measure_option=option,
        progress=not options.no_progress,
        model=getattr(options, "tuner", "auto") != "random",
    )
    if tuner.best_trace is None:
        print(f"no schedule ran successfully; see the errors in {log}")
        return 1
    gflops = task.flop / tuner.best_cost / 1e9 if task.flop else 0.0
    print(f"best: {tuner.best_cost * 1e3:.4f} ms ({gflops:.2f} GFLOP/s); log: {log}")
    print(task.print_best(log))
    return 0
