"""`mod.export_library(path)` and `load_module(path)`: a built Module in one file, and back.

llvm: the kernels' object code linked by the system C compiler into one shared library, with
the calling metadata inside the file (shared_lib.py). cuda: each kernel's cubin, its CUDA C
and its launch metadata. Loading compiles nothing (no llvmlite JIT, no nvcc) and gives a Module
whose functions check their arguments exactly as freshly built ones do: the same Signature is
built from the same Params. The file format is library_file.py's.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tensorforge.errors import ArgumentError, BuildError, DeviceError
from tensorforge.runtime import library_file
from tensorforge.runtime.device import cuda
from tensorforge.runtime.module import Module, UnavailableExecutable, no_cuda_device_reason
from tensorforge.runtime.shared_lib import LibraryExecutable, build_llvm_library, open_llvm_library
from tensorforge.target import enabled_features

if TYPE_CHECKING:
    from tensorforge.runtime.module import Function


def export_library(module: Module, path: str | os.PathLike) -> None:
    """Write `module` (all its functions) to the one file `path`; see load_module."""
    path = os.fspath(path)
    functions = [module[name] for name in module.function_names]
    metadata = {"target": str(module.target), "entry": module.entry_name}
    if module.type_key == "llvm":
        pairs = [(f.source, _optimized_ir(f)) for f in functions]
        data = build_llvm_library(pairs, module.target, metadata)
    else:
        data = _cuda_library(functions, module.target, metadata)
    try:
        library_file.write_atomically(path, data)
    except OSError as err:
        raise ArgumentError(f"export_library: cannot write {path}: {err}") from None


def load_module(path: str | os.PathLike) -> Module:
    """The Module saved at `path` by export_library, loaded without compiling anything."""
    file = library_file.read(path)
    metadata = file.metadata
    kind = metadata.get("kind")
    if kind == "llvm":
        _check_cpu(metadata.get("target", ""), file.path)
        kernels = open_llvm_library(file)
    elif kind == "cuda":
        kernels = _open_cuda_library(file)
    else:
        raise ArgumentError(f"load_module: {file.path} holds kernels of unknown kind {kind!r}")
    return Module(kernels, metadata.get("target"), metadata.get("entry"))


# -- llvm -----------------------------------------------------------------------------------------
def _optimized_ir(function: Function) -> str:
    executable = function.executable
    if isinstance(executable, LibraryExecutable):
        return executable.ir_text
    from tensorforge.runtime.llvm_exec import LLVMExecutable

    if isinstance(executable, LLVMExecutable):
        return executable.get_source("ll")
    raise BuildError(
        f"export_library: '{function.name}' has no compiled LLVM code to export "
        f"(its executable is a {type(executable).__name__})"
    )


def _check_cpu(target: str, path: str) -> None:
    """Refuse a library whose code needs CPU features this machine lacks (it would SIGILL)."""
    words = target.split()
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
            f"(e.g. target 'llvm -mcpu={name}')"
        )


# -- cuda -----------------------------------------------------------------------------------------
def _cuda_library(functions: list[Function], target: object, metadata: dict) -> bytes:
    payload = bytearray()
    entries = []
    for function in functions:
        image = _cuda_image(function, target)
        entries.append(
            {
                **library_file.source_to_json(function.source),
                "cuda": function.source.text,
                "blob": [len(payload), len(image)],
            }
        )
        payload += image
    return library_file.pack(bytes(payload), {"kind": "cuda", **metadata, "functions": entries})


def _cuda_image(function: Function, target: object) -> bytes:
    """The kernel's cubin: the one it runs, or nvcc's (through pycuda, or the nvcc on PATH)."""
    executable = function.executable
    for candidate in (executable, getattr(executable, "inner", None)):
        if hasattr(candidate, "image"):
            break
    else:
        from tensorforge.runtime.cuda_exec import CUDAExecutable

        candidate = CUDAExecutable(function.source, target)
    try:
        return candidate.image()
    except BuildError as err:
        raise BuildError(
            f"export_library: '{function.name}' needs its compiled kernel image (cubin), which "
            f"takes nvcc or a GPU with pycuda: {err}"
        ) from None


def _open_cuda_library(file: library_file.LibraryFile) -> list[tuple[object, object]]:
    from tensorforge.runtime.cuda_exec import CUDAExecutable

    target = file.metadata.get("target", "")
    usable = cuda(0).exist
    kernels = []
    for function in file.metadata["functions"]:
        source = library_file.source_from_json(function, function["cuda"])
        image = file.blob(function)
        if usable:
            try:
                executable = CUDAExecutable(source, target, image=image)
            except BuildError as err:
                raise BuildError(f"load_module: {file.path} ({target}): {err}") from None
        else:
            try:
                inner = CUDAExecutable(source, target, image=image)
            except (ImportError, DeviceError):
                inner = None
            executable = UnavailableExecutable(source, no_cuda_device_reason(source.entry), inner)
        kernels.append((source, executable))
    return kernels
