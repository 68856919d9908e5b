"""The c target's runtime: C source -> a shared library made by the system C compiler, loaded
and called through ctypes; export and load of such libraries.

Flags: -O3 (without the loop vectorizer) and -march=native for the host (-march=<cpu>, and -m flags for an explicit -mattr,
for another CPU), GNU C11, contraction into FMAs as the llvm backend allows it, no errno from
libm, -fopenmp where the kernel has PARALLEL loops. A compiled kernel keeps its library's bytes:
the disk cache and export_library store them as they are (the payload is each kernel's shared
object, one after another), and loading one needs no compiler.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tensorforge.codegen.base import ALLOC_ERROR_SYMBOL, KernelSource
from tensorforge.errors import ArgumentError, BuildError
from tensorforge.runtime import library_file
from tensorforge.runtime.native_call import (
    AllocErrorSlot,
    NativeKernel,
    argtypes,
    make_gomp_fork_safe,
)
from tensorforge.runtime.shared_lib import (
    GCC_FEATURES,
    dlopen_image,
    march_options,
    run_c_compiler,
)
from tensorforge.target import Target, as_target, host_cpu

if TYPE_CHECKING:
    from tensorforge.runtime.module import Function

COMPILE_TIMEOUT_S = 300


def compiler_flags(target: Target, openmp: bool) -> list[str]:
    """The C compiler's options for kernels of `target`."""
    flags = ["-O3", "-std=gnu11", "-fPIC", "-ffp-contract=fast", "-fno-math-errno"]
    # NOTE: the compiler's loop vectorizer is off, as LLVM's is for the llvm target: loops are
    # vectorized by the schedule (vector extensions), and GCC 12's -O3 loop vectorizer
    # miscompiled a fuzz case (a guarded store to a one-element stack buffer read back in the
    # same iteration: if-converted into masked stores, 24 of 26 outputs wrong). SLP stays on.
    flags.append("-fno-tree-loop-vectorize")
    # signed integers wrap around, as torch's tensors do: without it GCC takes an int32 product
    # that overflows for undefined and folds (a * 3) / 3 to a
    flags.append("-fwrapv")
    flags += ["-Wno-unused-variable", "-Wno-unused-function", "-Wno-psabi"]
    name, features = host_cpu()
    if target.mcpu == name and target.features == features:
        flags.append("-march=native")
    else:
        flags += march_options(target.mcpu, target.cpu_features)
        for feature in target.features.split(","):
            if feature[1:] in GCC_FEATURES:
                flags.append(f"-m{feature[1:]}" if feature[0] == "+" else f"-mno-{feature[1:]}")
    return flags + (["-fopenmp"] if openmp else [])


def uses_openmp(text: str) -> bool:
    return "#include <omp.h>" in text


def compile_library(source: KernelSource, target: Target, assembly: bool = False) -> bytes:
    """The shared library (or, with `assembly`, the assembly text as bytes) of C `source`."""
    output = "kernel.s" if assembly else "kernel.so"
    arguments = compiler_flags(target, uses_openmp(source.text))
    if assembly:
        arguments += ["-S", "-o", output, "kernel.c"]
    else:
        arguments += ["-shared", "-o", output, "kernel.c", "-Wl,-Bsymbolic", "-lm"]
    return run_c_compiler(
        f"'{source.entry}'",
        "compiling the generated C",
        {"kernel.c": source.text},
        arguments,
        output,
        COMPILE_TIMEOUT_S,
    )


class CExecutable(NativeKernel):
    """The compiled entry of a c KernelSource: `call(raw_args)` runs it (as LLVMExecutable's).

    `image` is the shared library's bytes: made now by the C compiler, or given (a library
    loaded from a file or the disk cache).
    """

    def __init__(self, source: KernelSource, target: Target | str, image: bytes | None = None):
        self.source = source
        self.target = as_target(target)
        self.image = image if image is not None else compile_library(source, self.target)
        self._asm: str | None = None
        library = dlopen_image(self.image, source.entry)
        if uses_openmp(source.text):
            make_gomp_fork_safe()
        try:
            function = library[source.entry]
        except AttributeError:
            raise BuildError(
                f"'{source.entry}': the compiled library has no such function"
            ) from None
        function.argtypes = argtypes(source)
        function.restype = None
        self._threads = None  # no PARALLEL loop: no thread-count global
        if source.num_threads_symbol:
            self._threads = ctypes.c_int32.in_dll(library, source.num_threads_symbol)
        self._alloc_error = None  # no heap-allocated intermediate
        if ALLOC_ERROR_SYMBOL in source.text:
            self._alloc_error = AllocErrorSlot.in_dll(library, ALLOC_ERROR_SYMBOL)
        self._library = library  # keeps the code mapped while the function is callable
        self._function = function

    def get_source(self, fmt: str = "c") -> str:
        """The C source ("c"), or the compiler's assembly of it ("asm")."""
        if fmt in ("c", ""):
            return self.source.text
        if fmt in ("asm", "s"):
            if self._asm is None:
                self._asm = compile_library(self.source, self.target, assembly=True).decode()
            return self._asm
        raise ArgumentError(f"get_source: unknown format {fmt!r} for a c kernel; use 'c' or 'asm'")

    def cache_entry(self, metadata: dict) -> bytes:
        """This kernel as a one-function library file (the disk cache's entry)."""
        return _pack([(self.source, self.image)], metadata)


def export_c_library(functions: Sequence[Function], target: object, metadata: dict) -> bytes:
    """The library file of c `functions` (export_library; see registry.py)."""
    pairs = []
    for function in functions:
        image = getattr(function.executable, "image", None)
        if not isinstance(image, bytes):
            raise BuildError(
                f"export_library: '{function.name}' has no compiled C library to export "
                f"(its executable is a {type(function.executable).__name__})"
            )
        pairs.append((function.source, image))
    return _pack(pairs, metadata)


def _pack(pairs: Sequence[tuple[KernelSource, bytes]], metadata: dict) -> bytes:
    payload = bytearray()
    entries = []
    for source, image in pairs:
        json = library_file.source_to_json(source)
        entries.append({**json, "c": source.text, "blob": [len(payload), len(image)]})
        payload += image
    return library_file.pack(bytes(payload), {"kind": "c", **metadata, "functions": entries})


def open_c_library(
    file: library_file.LibraryFile, sources: dict[str, KernelSource] | None = None
) -> list[tuple[KernelSource, CExecutable]]:
    """(source, executable) for each kernel of the c library `file`; compiles nothing."""
    target = file.metadata.get("target") or "c"
    kernels = []
    for function in file.metadata["functions"]:
        source = (sources or {}).get(function["entry"]) or library_file.source_from_json(
            function, function["c"]
        )
        kernels.append((source, CExecutable(source, target, image=file.blob(function))))
    return kernels
