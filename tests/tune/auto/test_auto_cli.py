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
