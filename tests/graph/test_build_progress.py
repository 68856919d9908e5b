"""Progress lines of a long kernel build (graph/build_progress.py), on a fake clock."""

import pytest

from tensorforge.graph import build_progress
from tensorforge.graph.build_progress import BuildProgress
from tensorforge.target import Target


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(build_progress.time, "perf_counter", lambda: now[0])
    monkeypatch.delenv("TENSORFORGE_PROGRESS", raising=False)
    return now


def test_a_short_build_prints_nothing(clock, capsys):
    with BuildProgress(3, Target("llvm")) as progress:
        for _ in range(3):
            clock[0] += 1.0
            progress.step()
    assert capsys.readouterr().err == ""


def test_a_long_build_says_how_far_it_is_then_done(clock, capsys):
    with BuildProgress(40, Target("llvm")) as progress:
        for _ in range(40):
            clock[0] += 1.0
            progress.step()
    lines = capsys.readouterr().err.splitlines()
    # after 5 s, then every 10 s, then the end
    assert lines == [
        "tensorforge: built 5 of 40 CPU kernels (5 s)",
        "tensorforge: built 15 of 40 CPU kernels (15 s)",
        "tensorforge: built 25 of 40 CPU kernels (25 s)",
        "tensorforge: built 35 of 40 CPU kernels (35 s)",
        "tensorforge: built 40 CPU kernels in 40 s",
    ]


def test_ctrl_c_says_where_it_stopped(clock, capsys):
    with pytest.raises(KeyboardInterrupt):
        with BuildProgress(9, Target("llvm")) as progress:
            clock[0] += 2.0
            progress.step()
            raise KeyboardInterrupt
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tensorforge: compile interrupted after 1 of 9 kernels (2 s)")


def test_silenced_by_the_environment(clock, capsys, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_PROGRESS", "0")
    with BuildProgress(20, Target("llvm")) as progress:
        for _ in range(20):
            clock[0] += 1.0
            progress.step()
    assert capsys.readouterr().err == ""
