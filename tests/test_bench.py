"""`tensorforge bench` runs its cases in a child per thread count and writes JSON rows."""

import json

import pytest

from tensorforge.bench import bench_main


def test_bench_writes_a_row_per_case_and_thread_count(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    assert bench_main(["--cases", "copy", "--threads", "1", "--json", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["case"], r["threads"]) for r in rows] == [("copy", 1)]
    (row,) = rows
    assert row["unit"] == "GB/s" and row["rate"] > 0 and row["numpy_seconds"] > 0
    # the copy's limit is the faster of its own and numpy's copy, so its fraction is at most 1
    assert 0 < row["limit_fraction"] <= 1.0
    assert row["ratio_vs_numpy"] == row["numpy_seconds"] / row["seconds"]
    assert "copy" in capsys.readouterr().out


def test_bench_rejects_an_unknown_case(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench_main(["--cases", "gemm7"])
    assert exit_info.value.code == 2
    assert "unknown case(s) gemm7" in capsys.readouterr().err


def test_a_row_without_a_reference_or_a_limit_prints_dashes_not_nan(capsys):
    from tensorforge.bench import Row, print_table, run_cases

    row = Row("gemm1024", 1, 0.01, 200.0, "GFLOP/s", 0.0, 0.05)
    assert row.ratio is None and row.limit_fraction is None
    print_table([row])
    line = capsys.readouterr().out.splitlines()[1]
    assert "nan" not in line and line.split()[-3:-1] == ["-", "-"]
    json.dumps(row.__dict__ | {"ratio_vs_numpy": row.ratio}, allow_nan=False)  # null, not NaN
    assert run_cases([], 1) == []
