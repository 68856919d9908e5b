"""`mod.export_library(path)` and `load_module(path)`: a built Module in one file, and back.

What the file holds depends on the target kind; each runtime entry (registry.py) saves and loads
its own: llvm, the kernels' object code linked by the system C compiler into one shared library
with the calling metadata inside (shared_lib.py); cuda, each kernel's cubin, its CUDA C and its
launch metadata (cuda_library.py). Loading compiles nothing (no llvmlite JIT, no nvcc) and gives
a Module whose functions check their arguments exactly as freshly built ones do: the same
Signature is built from the same Params. The container format is library_file.py's.
"""

from __future__ import annotations

import os

from tensorforge.errors import ArgumentError, BuildError
from tensorforge.runtime import library_file
from tensorforge.runtime.module import Module
from tensorforge.runtime.registry import RUNTIMES, runtime_for
from tensorforge.target import enabled_features


def export_library(module: Module, path: str | os.PathLike) -> None:
    """Write `module` (all its functions) to the one file `path`; see load_module."""
    path = os.fspath(path)
    functions = [module[name] for name in module.function_names]
    metadata = {"target": str(module.target), "entry": module.entry_name}
    data = runtime_for(module.type_key).export_library(functions, module.target, metadata)
    try:
        library_file.write_atomically(path, data)
    except OSError as err:
        raise ArgumentError(f"export_library: cannot write {path}: {err}") from None


def load_module(path: str | os.PathLike) -> Module:
    """The Module saved at `path` by export_library, loaded without compiling anything."""
    file = library_file.read(path)
    metadata = file.metadata
    kind = metadata.get("kind")
    runtime = RUNTIMES.get(kind) if isinstance(kind, str) else None
    if runtime is None:
        raise ArgumentError(f"load_module: {file.path} holds kernels of unknown kind {kind!r}")
    if runtime.device == "cpu":
        check_cpu_features(metadata.get("target", ""), file.path)
    kernels = runtime.load_library(file)
    return Module(kernels, metadata.get("target"), metadata.get("entry"))


def check_cpu_features(target: str, path: str) -> None:
    """Refuse a library whose code needs CPU features this machine lacks (it would SIGILL)."""
    words = target.split() or ["llvm"]
    wanted = next((w.split("=", 1)[1] for w in words if w.startswith("-mattr=")), "")
    needed = enabled_features(wanted)
    if not needed:
        return
    try:
        from tensorforge.target import host_cpu

        name, features = host_cpu()
    except ImportError:  # no llvmlite to ask: the library is trusted as it is
        return
    missing = sorted(needed - enabled_features(features))
    if missing:
        mcpu = next((w.split("=", 1)[1] for w in words if w.startswith("-mcpu=")), "?")
        raise BuildError(
            f"load_module: {path} was compiled for {mcpu} and uses CPU features this "
            f"{name} lacks: {', '.join(missing)}; export it again from a build for this CPU "
            f"(e.g. target '{words[0]} -mcpu={name}')"
        )
