"""Every tutorial runs as a script (at a small size) and finishes cleanly."""

import os
import pathlib
import subprocess
import sys

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).parents[2] / "tutorials").glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("script", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(script, tmp_path):
    env = dict(os.environ, TF_TUTORIAL_SMALL="1", MPLBACKEND="Agg")
    result = subprocess.run(
        [sys.executable, str(script), "--small"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"{script.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
