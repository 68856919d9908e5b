"""One runtime entry per target kind: how its kernels become callable, what `get_source` shows,
how `export_library`/`load_module` save and load them, and whether the disk cache keeps them.

The runtime's half of a backend (its codegen sits in `codegen.CODEGENS`, its Target facts in
`target.KINDS`, under the same name). Code that must treat kinds differently asks the entry
here, never compares kind strings. The functions are named as "module:attribute" and imported
on first use, so that llvmlite, a C compiler or pycuda load only when a kernel needs them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensorforge.errors import BuildError
from tensorforge.target import KINDS


@dataclass(frozen=True)
class RuntimeEntry:
    """The runtime of one target kind.

    - `executable`: the class made as `cls(source, target)`, offering `call(raw_args)` (buffers
      as addresses, scalars as numbers) and optionally `get_source(fmt)`, `synchronize()` and
      `cache_entry(metadata) -> bytes` (a one-kernel library file for the disk cache);
    - `source_formats`: what `get_source` accepts; the first is the kernel's own text;
    - `export(functions, target, metadata) -> bytes`: a library file holding `functions`;
    - `load(file, sources=None) -> [(source, executable)]`: its kernels back, compiling nothing
      (`sources`, entry -> KernelSource, replaces the sources rebuilt from the metadata);
    - `disk_cacheable`: compiled kernels are kept in the on-disk cache (disk_cache.py).
    """

    kind: str
    source_formats: tuple[str, ...]
    executable: str
    export: str
    load: str
    disk_cacheable: bool = False

    @property
    def device(self) -> str:
        """ "cpu" or "cuda": the device kind its kernels run on (the Target's fact)."""
        return KINDS[self.kind].device

    def executable_class(self) -> type:
        return _resolve(self.executable)

    def export_library(self, functions: list, target: object, metadata: dict) -> bytes:
        return _resolve(self.export)(functions, target, metadata)

    def load_library(self, file: Any, sources: dict | None = None) -> list[tuple[Any, Any]]:
        return _resolve(self.load)(file, sources)


RUNTIMES: dict[str, RuntimeEntry] = {
    "llvm": RuntimeEntry(
        "llvm",
        source_formats=("ll", "asm"),
        executable="tensorforge.runtime.llvm_exec:LLVMExecutable",
        export="tensorforge.runtime.shared_lib:export_llvm_library",
        load="tensorforge.runtime.shared_lib:open_llvm_library",
        disk_cacheable=True,
    ),
    "cuda": RuntimeEntry(
        "cuda",
        source_formats=("cuda", "ptx"),
        executable="tensorforge.runtime.cuda_exec:CUDAExecutable",
        export="tensorforge.runtime.cuda_library:export_cuda_library",
        load="tensorforge.runtime.cuda_library:open_cuda_library",
    ),
    "c": RuntimeEntry(
        "c",
        source_formats=("c", "asm"),
        executable="tensorforge.runtime.c_exec:CExecutable",
        export="tensorforge.runtime.c_exec:export_c_library",
        load="tensorforge.runtime.c_exec:open_c_library",
        disk_cacheable=True,
    ),
}


def runtime_for(kind: str) -> RuntimeEntry:
    """The runtime registered for target kind `kind` (BuildError if there is none)."""
    try:
        return RUNTIMES[kind]
    except (KeyError, TypeError):
        raise BuildError(
            f"no runtime for target kind {kind!r}; known: {', '.join(RUNTIMES)}"
        ) from None


def _resolve(name: str) -> Callable[..., Any]:
    module, attribute = name.split(":")
    return getattr(importlib.import_module(module), attribute)
