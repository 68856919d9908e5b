"""Tests mirror the passes: `ir/passes/<pass>.py` has `tests/ir/passes/test_<pass>.py`."""

from pathlib import Path

import tensorforge.ir.passes as passes

HERE = Path(__file__).parent


def test_every_pass_has_its_test_file():
    names = sorted(
        p.stem for p in Path(passes.__file__).parent.glob("*.py") if p.stem != "__init__"
    )
    missing = [n for n in names if not (HERE / f"test_{n}.py").exists()]
    assert not missing, f"passes without tests/ir/passes/test_<pass>.py: {missing}"
