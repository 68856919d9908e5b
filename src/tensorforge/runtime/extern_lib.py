"""C code for extern calls: `compile_c(source)` builds it into a shared library and
`load_library(path)` makes a library's symbols visible to the kernels JIT-compiled afterwards
(what tf.tir.call_extern and tensor intrinsics call)."""

from __future__ import annotations

import hashlib
import os
import tempfile

from tensorforge.errors import BuildError
from tensorforge.runtime.shared_lib import c_compiler, run_c_compiler

_LOADED: dict[str, str] = {}  # path -> path, for libraries loaded into this process


def load_library(path: str | os.PathLike) -> str:
    """Load the shared library at `path` for good, its symbols visible to kernels built later."""
    import llvmlite.binding as llvm

    path = os.path.abspath(os.fspath(path))
    if path in _LOADED:
        return path
    try:
        llvm.load_library_permanently(path)
    except RuntimeError as err:
        raise BuildError(f"load_library: cannot load {path}: {err}") from None
    _LOADED[path] = path
    return path


def compile_c(source: str, options: tuple[str, ...] = ("-O3", "-march=native")) -> str:
    """Compile C `source` into a shared library (cached by its hash) and load it; its path.

    Kernels built afterwards can call its functions with tf.tir.call_extern."""
    compiler = c_compiler()
    if compiler is None:
        raise BuildError(
            "compile_c: no C compiler was found (set $CC, or put cc, gcc or clang on PATH)"
        )
    key = hashlib.sha256("\0".join([source, *options, *compiler]).encode()).hexdigest()[:24]
    folder = os.path.join(tempfile.gettempdir(), f"tensorforge-extern-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"extern-{key}.so")
    if not os.path.exists(path):
        arguments = [*options, "-shared", "-fPIC", "-o", "extern.so", "extern.c", "-lm"]
        library = run_c_compiler(
            "compile_c", "compiling the C code", {"extern.c": source}, arguments, "extern.so", 120
        )
        partial = f"{path}.{os.getpid()}.tmp"
        with open(partial, "wb") as f:
            f.write(library)
        os.replace(partial, path)  # atomic: other processes see the whole library or none
    return load_library(path)
