"""One runtime entry per target kind: the Module asks it (device, formats), never a kind string."""

import pytest
from runtime_fakes import NumpyExecutable, buffer, source

from tensorforge.errors import BuildError
from tensorforge.runtime import Module, cpu, cuda
from tensorforge.runtime.registry import RUNTIMES, runtime_for
from tensorforge.target import KINDS


@pytest.mark.parametrize("kind,device", [("llvm", cpu(0)), ("c", cpu(0)), ("cuda", cuda(0))])
def test_a_function_runs_on_its_kinds_device(kind, device):
    kernel = source([buffer("A", [2])], entry="f", target=kind)
    mod = Module([(kernel, NumpyExecutable(kernel))])
    assert mod["f"].device == device and mod.device == device
    assert mod.get_source() == f"{runtime_for(kind).source_formats[0]} of f"
    assert mod.imported_modules == ([mod] if KINDS[kind].device == "cuda" else [])


def test_a_kind_without_a_runtime_is_refused_by_name():
    kernel = source([buffer("A", [2])], entry="f", target="opencl")
    with pytest.raises(
        BuildError, match="no runtime for target kind 'opencl'; known: llvm, cuda, c"
    ):
        Module([(kernel, NumpyExecutable(kernel))])


def test_every_entry_names_importable_functions():
    for kind, entry in RUNTIMES.items():
        assert entry.kind == kind and entry.source_formats
        assert entry.device == KINDS[kind].device
        if kind != "cuda":  # cuda_exec imports without pycuda, but keep the test GPU-free
            assert callable(entry.executable_class())
