"""Fixtures for runtime tests: modules around fake executables (see runtime_fakes.py)."""

import pytest
from runtime_fakes import NumpyExecutable, source

from tensorforge.runtime.module import Module


@pytest.fixture
def make_module():
    """make_module(params, fn=None, entry="main") -> (Module, NumpyExecutable)."""

    def make(params, fn=None, entry="main", target="llvm"):
        kernel = source(params, entry=entry, target=target)
        executable = NumpyExecutable(kernel, fn=fn)
        return Module([(kernel, executable)]), executable

    return make
