"""The README's second command, `tensorforge demo`, runs end to end (at a small size)."""

import subprocess
import sys


def test_demo_runs_and_matches_numpy(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tensorforge.cli", "demo", "--size", "64", "--trials", "4"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "def main(A: float32[64, 64]" in out  # the lowered IR of the tuned matmul
    assert "ratio" in out and "numpy" in out  # speed beside numpy
    assert "both kernels match numpy." in out
