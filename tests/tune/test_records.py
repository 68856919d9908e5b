"""Tuning logs: schema, durability, and apply_history_best's matching rules."""

import json
import logging
import warnings

import pytest

import tensorforge as tf
from tensorforge import te, tune
from tensorforge.tune import records
from tensorforge.tune.measure import MeasureErrorNo, MeasureInput, MeasureResult

chosen = []


@tune.template("test/records_tmpl")
def records_tmpl(n):
    cfg = tune.get_config()
    cfg.define_knob("k", [1, 2, 4, 8])
    chosen.append(cfg["k"].val)
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    return te.create_schedule(B.op), [A, B]


def _result(cost, error_no=0):
    costs = (cost,) if error_no == 0 else ()
    return MeasureResult(costs, error_no, "" if error_no == 0 else "boom", 0.1, 1700000000.0)


def _write_log(path, task, entries):
    handle = records.open_log(path)
    for index, cost, error_no in entries:
        records.append_line(
            handle, records.encode(MeasureInput(task, task.config(index)), _result(cost, error_no))
        )
    handle.close()


def test_record_roundtrip_and_schema(tmp_path):
    task = tune.create_task("test/records_tmpl", (16,))
    log = tmp_path / "log.jsonl"
    _write_log(log, task, [(2, 1e-3, 0), (3, 0.0, MeasureErrorNo.RUNTIME_ERROR)])
    lines = log.read_text().splitlines()
    data = json.loads(lines[0])
    assert set(data) == {
        "v",
        "template",
        "args",
        "workload_hash",
        "target",
        "flop",
        "config",
        "result",
    }
    assert data["v"] == 1 and data["template"] == "test/records_tmpl" and data["args"] == [16]
    assert data["target"] == str(tf.Target("llvm")) and "-mcpu=" in data["target"]
    assert data["config"] == {"index": 2, "knobs": {"k": 4}}
    loaded = tune.load_records(log)
    assert [r.config["index"] for r in loaded] == [2, 3]
    assert (
        loaded[0].result.costs == (1e-3,)
        and loaded[1].result.error_no == MeasureErrorNo.RUNTIME_ERROR
    )
    assert loaded[0].key == task.key


def test_truncated_last_line_is_skipped_and_appending_continues(tmp_path):
    task = tune.create_task("test/records_tmpl", (16,))
    log = tmp_path / "log.jsonl"
    _write_log(log, task, [(0, 3e-3, 0), (1, 2e-3, 0)])
    text = log.read_text()
    log.write_text(text + text.splitlines()[0][:37])  # a run killed mid-write
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(tune.load_records(log)) == 2
    _write_log(log, task, [(2, 1e-3, 0)])  # the half record is cut off; the next starts clean
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.config["index"] for r in tune.load_records(log)] == [0, 1, 2]
    # a bad line in the middle is skipped with a warning
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:1] + ["{not json"] + lines[1:]) + "\n")
    with pytest.warns(UserWarning, match="unreadable"):
        assert len(tune.load_records(log)) == 3


def test_apply_history_best_picks_the_fastest(tmp_path):
    task = tune.create_task("test/records_tmpl", (16,))
    log = tmp_path / "log.jsonl"
    _write_log(
        log,
        task,
        [(0, 4e-3, 0), (3, 1e-3, 0), (2, 0.5e-3, MeasureErrorNo.WRONG_ANSWER), (1, 2e-3, 0)],
    )
    chosen.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tune.apply_history_best(str(log)) as ctx:
            s, args = records_tmpl(16)
    assert chosen[-1] == 8  # config 3: the fastest that succeeded
    assert len(ctx.applied) == 1 and ctx.applied[0][1].config["index"] == 3
    chosen.clear()
    records_tmpl(16)  # outside the context: the default again
    assert chosen == [1]


def test_apply_history_best_rejects_another_target(tmp_path, caplog):
    task = tune.create_task("test/records_tmpl", (16,))
    log = tmp_path / "log.jsonl"
    handle = records.open_log(log)
    line = json.loads(records.encode(MeasureInput(task, task.config(3)), _result(1e-3)))
    line["target"] = "llvm -mcpu=some-other-cpu -mattr=+avx2"
    records.append_line(handle, json.dumps(line))
    handle.close()
    chosen.clear()
    with caplog.at_level(logging.WARNING, logger="tensorforge.tune"):
        with pytest.warns(UserWarning, match="another target"):
            with tune.apply_history_best(log) as ctx:
                with tf.Target("llvm"):
                    records_tmpl(16)
    assert chosen[-1] == 1  # the default config, not the other machine's best
    assert ctx.missed and not ctx.applied
    assert any("another target" in r.getMessage() for r in caplog.records)


def test_apply_history_best_warns_when_nothing_matches(tmp_path):
    task = tune.create_task("test/records_tmpl", (16,))
    log = tmp_path / "log.jsonl"
    _write_log(log, task, [(3, 1e-3, 0)])
    chosen.clear()
    with pytest.warns(UserWarning, match="no record for it|no tuned config"):
        with tune.apply_history_best(log):
            records_tmpl(32)  # other arguments
    assert chosen[-1] == 1
