"""STYLE.md's stated style holds: `ruff format --check` and `ruff check` pass on the whole tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = ["src", "tests", "tutorials", "benchmarks"]


def _ruff() -> list[str]:
    if shutil.which("ruff"):
        return ["ruff"]
    try:
        import ruff  # noqa: F401
    except ImportError:
        pytest.skip("ruff is not installed (it comes with the test extra)")
    return [sys.executable, "-m", "ruff"]


@pytest.mark.parametrize("command", [["format", "--check"], ["check"]], ids=["format", "check"])
def test_ruff_passes(command):
    result = subprocess.run(
        [*_ruff(), *command, *TREES], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
