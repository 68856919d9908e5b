"""Templates and build/run steps that need no compiler: the tuner's machinery tested on its own.

A fake "module" is the config itself; the fake runner turns its knobs into a deterministic
cost, and misbehaves (raises, crashes, hangs, answers wrong) for chosen knob values.
"""

from __future__ import annotations

import ctypes
import math
import os
import time

import numpy as np

from tensorforge import te, tune
from tensorforge.tune import measure


@tune.template("test/fake_copy")
def fake_copy(n: int, faults: bool = False):
    """B = 2 * A with two tiling knobs; with `faults`, a "mode" knob picks a misbehaviour."""
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 2.0, name="B")
    cfg = tune.get_config()
    cfg.define_split("tile_i", B.op.axis[0], num_outputs=2)
    cfg.define_split("tile_j", B.op.axis[1], num_outputs=3, policy="power2")
    if faults:
        cfg.define_knob(
            "mode", ["ok", "raise", "segv", "hang", "run_segv", "run_hang", "run_raise", "wrong"]
        )
        mode = cfg["mode"].val
        if mode == "raise":
            raise RuntimeError("this config cannot be scheduled")
        if mode == "segv":
            ctypes.string_at(0)  # SIGSEGV inside the template
        if mode == "hang":
            time.sleep(3600)
    return None, [A, B]


def fake_builder(task, config, feature_fn):
    measure.instantiate(task, config)  # template errors become INSTANTIATION_ERROR
    return config, None


def fake_cost(config) -> float:
    """A smooth landscape with its optimum at tile_i inner 8, tile_j inner sizes (4, 2)."""
    ti = config["tile_i"].size
    tj = config["tile_j"].size
    score = abs(math.log2(ti[-1]) - 3) + abs(math.log2(tj[-1]) - 1) + abs(math.log2(tj[-2]) - 2)
    return 1e-4 * (1.0 + score)


def fake_runner(task, config, option, reference):
    mode = config["mode"].val if "mode" in config else "ok"
    if mode == "run_segv":
        ctypes.string_at(0)
    if mode == "run_hang":
        time.sleep(3600)
    if mode == "run_raise":
        raise ValueError("kernel launch failed")
    if reference is not None:
        host = measure.make_host_arrays(task.arg_specs)
        out = host[0] * (3.0 if mode == "wrong" else 2.0)
        measure.check_outputs(task.arg_specs, [host[0], out], reference)
    delay = float(os.environ.get("TF_FAKE_RUN_SECONDS", "0"))
    if delay:
        time.sleep(delay)
    return [fake_cost(config)] * option.repeat


def fake_option(**kwargs):
    kwargs.setdefault("number", 1)
    kwargs.setdefault("repeat", 1)
    kwargs.setdefault("timeout", 5)
    return tune.measure_option(builder=fake_builder, runner=fake_runner, **kwargs)


def fake_reference(task) -> list[np.ndarray]:
    host = measure.make_host_arrays(task.arg_specs)
    return [host[0] * 2.0]
