"""`tensorforge tune --auto FILE.py:FUNC`: the first guess with --trials 0, and its errors."""

from tensorforge.tune.cli import tune_main

WORKLOAD = """
from tensorforge import te

def scale_rows(n, m):
    x = te.placeholder((n, m), name="x")
    return [x, te.compute((n, m), lambda i, j: x[i, j] * 2.0, name="y")]
"""


def test_auto_first_guess_prints_the_schedule(tmp_path, capsys):
    path = tmp_path / "work.py"
    path.write_text(WORKLOAD)
    code = tune_main(["--auto", f"{path}:scale_rows", "--args", "[6, 35]", "--trials", "0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "s = te.create_schedule([y.op])" in out and ".vectorize(" in out


def test_auto_names_a_missing_function(tmp_path, capsys):
    path = tmp_path / "work.py"
    path.write_text(WORKLOAD)
    assert tune_main(["--auto", f"{path}:nope", "--trials", "0"]) == 2
    assert "no function 'nope'" in capsys.readouterr().err


def test_auto_trials_count_the_whole_run_and_resume_from_the_log(tmp_path, capsys):
    from tensorforge.tune.records import load_records

    path = tmp_path / "work.py"
    path.write_text(WORKLOAD)
    log = tmp_path / "auto.jsonl"
    base = ["--auto", f"{path}:scale_rows", "--args", "[6, 35]", "--log", str(log)]
    base += ["--no-progress", "--number", "1", "--repeat", "1", "--tuner", "random"]
    assert tune_main([*base, "--trials", "3"]) == 0
    assert len(load_records(log)) == 3
    assert tune_main([*base, "--trials", "3"]) == 0  # already 3: nothing more to measure
    out = capsys.readouterr().out
    assert "resuming: 3 trials already" in out and "best:" in out
    assert len(load_records(log)) == 3
    assert tune_main([*base, "--trials", "5"]) == 0
    assert len(load_records(log)) == 5


def test_auto_refuses_template_only_options(tmp_path, capsys):
    path = tmp_path / "work.py"
    path.write_text(WORKLOAD)
    base = ["--auto", f"{path}:scale_rows", "--args", "[6, 35]", "--trials", "2"]
    assert tune_main([*base, "--tuner", "grid"]) == 2
    assert "not on a grid" in capsys.readouterr().err
    assert tune_main([*base, "--early-stopping", "4"]) == 2
    assert "--early-stopping is for template tuners" in capsys.readouterr().err
