"""CUDA modules in one library file (export_library / load_module): each kernel's cubin one
after another as the payload, its CUDA C and launch metadata in the metadata. Loading needs no
nvcc: the cubin is handed to the driver as it is (or, without a GPU, kept for get_source)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorforge.codegen.base import KernelSource
from tensorforge.errors import BuildError, DeviceError
from tensorforge.runtime import library_file
from tensorforge.runtime.device import cuda
from tensorforge.runtime.module import UnavailableExecutable, no_device_reason

if TYPE_CHECKING:
    from tensorforge.runtime.module import Function


def export_cuda_library(functions: list[Function], target: object, metadata: dict) -> bytes:
    """The library file of CUDA `functions`: each one's cubin, CUDA C and launch metadata."""
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


def open_cuda_library(
    file: library_file.LibraryFile, sources: dict[str, KernelSource] | None = None
) -> list[tuple[KernelSource, object]]:
    """(source, executable) for each kernel of the CUDA library `file` (see registry.py)."""
    from tensorforge.runtime.cuda_exec import CUDAExecutable

    target = file.metadata.get("target", "")
    usable = cuda(0).exist
    kernels = []
    for function in file.metadata["functions"]:
        source = (sources or {}).get(function["entry"]) or library_file.source_from_json(
            function, function["cuda"]
        )
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
            executable = UnavailableExecutable(source, no_device_reason(source), inner)
        kernels.append((source, executable))
    return kernels
