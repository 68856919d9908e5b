"""Native shared libraries of llvm kernels: link object code with the system C compiler, load and
call one with ctypes.

Making a library needs llvmlite (object_code.py, imported on use) and a C compiler; loading one
needs neither: the dynamic loader maps it and ctypes calls its symbols. A library is stored in
the container of library_file.py: the shared object first (the file stays loadable as it is),
then the calling metadata of each function (params, symbol, thread-count global, optimized IR).
"""

from __future__ import annotations

import ctypes
import functools
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tensorforge.codegen.base import ALLOC_ERROR_SYMBOL, KernelSource
from tensorforge.errors import ArgumentError, BuildError
from tensorforge.runtime.library_file import LibraryFile, pack, source_from_json, source_to_json
from tensorforge.runtime.native_call import (
    AllocErrorSlot,
    NativeKernel,
    argtypes,
    make_gomp_fork_safe,
)

if TYPE_CHECKING:
    from tensorforge.runtime.module import Function

LINK_TIMEOUT_S = 120


# -- making a library -----------------------------------------------------------------------------
def c_compiler() -> list[str] | None:
    """The system C compiler's command line: $CC, else cc, gcc or clang on PATH; None if none."""
    configured = shlex.split(os.environ.get("CC", ""))
    if configured and shutil.which(configured[0]):
        return configured
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return [found]
    return None


# LLVM feature names GCC and Clang take as -m<name> / -mno-<name> (the ones that shape vector code)
GCC_FEATURES = frozenset(
    "sse sse2 sse3 ssse3 sse4.1 sse4.2 sse4a avx avx2 fma fma4 f16c xop bmi bmi2 popcnt lzcnt "
    "avx512f avx512vl avx512bw avx512dq avx512cd avx512vnni avx512bf16 avx512fp16 avx512ifma "
    "avx512vbmi avx512vbmi2 avx512bitalg avx512vpopcntdq avxvnni".split()
)
# the x86-64 micro-architecture levels, newest first, and the features each needs beyond the last
_X86_LEVELS = (
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ("x86-64-v3", {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe"}),
    ("x86-64-v2", {"cx16", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"}),
)


@functools.cache
def compiler_knows_cpu(cpu: str) -> bool:
    """Does the system C compiler take -march=`cpu`? (LLVM names CPUs an older GCC does not
    know: GCC 12 has no znver4 or znver5.)"""
    compiler = c_compiler()
    if compiler is None:
        return False
    try:
        result = subprocess.run(
            [*compiler, f"-march={cpu}", "-x", "c", "-E", "-o", os.devnull, "-"],
            input="",
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def march_options(cpu: str, features: frozenset[str]) -> list[str]:
    """The C compiler's -march for LLVM CPU `cpu` having `features` (LLVM names): -march=`cpu`
    where the compiler knows it; else the newest x86-64 level the features reach and an -m
    switch for each feature beyond it, so the code still uses every vector instruction."""
    if compiler_knows_cpu(cpu):
        return [f"-march={cpu}"]
    level = "x86-64"
    for index, (name, _) in enumerate(_X86_LEVELS):
        needs = set().union(*(needed for _, needed in _X86_LEVELS[index:]))
        if needs <= features:
            level = name
            break
    return [f"-march={level}", *sorted(f"-m{f}" for f in features & GCC_FEATURES)]


def uses_gomp(ir_text: str) -> bool:
    """Whether the kernel calls libgomp (PARALLEL loops), as llvm_exec.py decides it."""
    return "GOMP_parallel" in ir_text or "omp_get_" in ir_text


def run_c_compiler(
    who: str,
    purpose: str,
    files: dict[str, str | bytes],
    arguments: Sequence[str],
    output: str,
    timeout: float,
    background: bool = False,
) -> bytes:
    """The bytes of `output` after the system C compiler ran with `arguments`, in a temporary
    folder holding `files` (name -> text or bytes; `arguments` name them as they are).

    BuildError, beginning with `who`, where there is no compiler, it cannot run or it fails
    (`purpose` says for what). With `background`, it runs at the lowest CPU priority.
    """
    compiler = c_compiler()
    if compiler is None:
        raise BuildError(
            f"{who}: {purpose} needs a C compiler, and none was found "
            f"(set $CC, or put cc, gcc or clang on PATH)"
        )
    command = [*compiler, *arguments]
    nice = shutil.which("nice") if background else None
    if nice:
        command = [nice, "-n", "19", *command]
    with tempfile.TemporaryDirectory(prefix="tensorforge-cc-") as folder:
        for name, data in files.items():
            with open(os.path.join(folder, name), "wb" if isinstance(data, bytes) else "w") as f:
                f.write(data)
        try:
            result = subprocess.run(
                command, cwd=folder, capture_output=True, text=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise BuildError(f"{who}: running the C compiler failed: {err}") from None
        if result.returncode != 0:
            raise BuildError(
                f"{who}: {purpose} failed:\n  {shlex.join(command)}\n"
                f"{result.stderr.strip()[-4000:]}"
            )
        with open(os.path.join(folder, output), "rb") as f:
            return f.read()


def link(objects: Sequence[bytes], needs_gomp: bool, background: bool = False) -> bytes:
    """One shared library made of relocatable `objects`, linked by the system C compiler
    (at the lowest CPU priority if `background`)."""
    files = {f"kernel{i}.o": code for i, code in enumerate(objects)}
    # -Bsymbolic: the kernels' references to their own globals (the thread count) bind inside
    # the library, whatever else the process has loaded.
    arguments = ["-shared", "-o", "library.so", *files, "-Wl,-Bsymbolic"]
    arguments += ["-lgomp", "-lm"] if needs_gomp else ["-lm"]
    return run_c_compiler(
        "export_library",
        "linking a shared library",
        files,
        arguments,
        "library.so",
        LINK_TIMEOUT_S,
        background,
    )


def build_llvm_library(
    functions: Sequence[tuple[KernelSource, str]],
    target: object,
    metadata: dict,
    objects: Sequence[bytes] | None = None,
    background: bool = False,
) -> bytes:
    """The file bytes of a library of `functions` ((source, optimized LLVM IR) pairs).

    `target` (a Target or its string) is the CPU the IR was optimized for; `metadata` adds
    top-level fields (entry, target string, cache key...). `objects`, the functions' object
    code where it is at hand already (one function's, whose symbols keep their names), spares
    making it again from the IR.
    """
    several = len(functions) > 1
    assert objects is None or (len(objects) == 1 and not several)
    entries = []
    if objects is None:
        emitted = _emit_objects(functions, target, several)
    for i, (source, ir_text) in enumerate(functions):
        threads_global = source.num_threads_symbol
        if objects is None:
            code, symbols = emitted[i]
            threads_symbol = symbols.get(threads_global) if threads_global else None
            error_symbol = symbols.get(ALLOC_ERROR_SYMBOL)
        else:  # the symbols keep their names; looked up at load, if there
            code, threads_symbol, error_symbol = objects[i], threads_global, ALLOC_ERROR_SYMBOL
        entries.append(
            {
                **source_to_json(source),
                "symbol": source.entry,
                "threads_symbol": threads_symbol,
                "error_symbol": error_symbol,
                "ll": ir_text,
                "object": code,
            }
        )
    needs_gomp = any(uses_gomp(ir_text) for _, ir_text in functions)
    library = link([entry.pop("object") for entry in entries], needs_gomp, background)
    for entry in entries:
        entry["blob"] = [0, len(library)]
    return pack(
        library, {"kind": "llvm", **metadata, "needs_gomp": needs_gomp, "functions": entries}
    )


def _emit_objects(functions: Sequence[tuple[KernelSource, str]], target, several: bool) -> list:
    """(object code, symbols) of each function, made on every core (build_workers.py): a
    model's library of a hundred kernels takes seconds of LLVM, one call at a time per
    process."""
    from tensorforge.runtime import build_workers, object_code  # llvmlite: only where needed

    def emit(i):
        source, ir_text = functions[i]
        suffix = source.entry if several else None
        return object_code.emit_object(ir_text, target, source.entry, suffix=suffix)

    return build_workers.build_all(len(functions), emit, emit, lambda i, made: made)


def export_llvm_library(functions: Sequence[Function], target: object, metadata: dict) -> bytes:
    """The library file of llvm `functions` (export_library; see registry.py)."""
    return build_llvm_library([(f.source, _optimized_ir(f)) for f in functions], target, metadata)


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


# -- loading one ----------------------------------------------------------------------------------
def open_llvm_library(
    file: LibraryFile, sources: dict[str, KernelSource] | None = None
) -> list[tuple[KernelSource, LibraryExecutable]]:
    """(source, executable) for each function of the checked llvm library `file`.

    `sources` (entry -> KernelSource) replaces the sources rebuilt from the metadata, whose
    text is the optimized IR (the disk cache passes the source it was asked for).
    """
    metadata = file.metadata
    library = dlopen_image(file.payload, file.path)
    if metadata.get("needs_gomp"):
        make_gomp_fork_safe()
    kernels = []
    for function in metadata["functions"]:
        ir_text = function.get("ll", "")
        source = (sources or {}).get(function["entry"]) or source_from_json(function, ir_text)
        executable = LibraryExecutable(
            library,
            source,
            function["symbol"],
            function.get("threads_symbol"),
            ir_text,
            metadata.get("target") or source.target_string,
            error_symbol=function.get("error_symbol"),
        )
        kernels.append((source, executable))
    return kernels


def dlopen_image(image: bytes, path: str) -> ctypes.CDLL:
    """Load the shared object `image` (the checked bytes of the file at `path`).

    NOTE: dlopen hands back an object already loaded under the same name or from the same
    inode, so a path overwritten with another library (or a reused /proc/self/fd/N) would give
    the old code. Each load therefore gets a private in-memory file (a fresh inode, and never
    on a noexec /tmp) reached through a link whose random name is used once.
    """
    name = f"tensorforge-{secrets.token_hex(16)}"
    link = os.path.join(tempfile.gettempdir(), f"{name}.so")
    fd = None
    try:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create(name, os.MFD_CLOEXEC)
            rest = memoryview(image)
            while rest:
                rest = rest[os.write(fd, rest) :]
            os.symlink(f"/proc/self/fd/{fd}", link)
        else:
            with open(link, "xb") as f:
                f.write(image)
        return ctypes.CDLL(link)
    except OSError as err:
        raise BuildError(f"load_module: the dynamic loader refused {path}: {err}") from None
    finally:
        try:
            os.unlink(link)  # the loaded object stays mapped
        except OSError:
            pass
        if fd is not None:
            os.close(fd)


class LibraryExecutable(NativeKernel):
    """One function of a loaded shared library: `call(raw_args)`, as LLVMExecutable's.

    raw_args are in `source.params` order: buffers as integer addresses, scalars as numbers.
    """

    def __init__(
        self,
        library: ctypes.CDLL,
        source: KernelSource,
        symbol: str,
        threads_symbol: str | None,
        ir_text: str,
        target: str,
        error_symbol: str | None = None,
    ):
        self.source = source
        self.target = target
        self.ir_text = ir_text
        self._asm: str | None = None
        try:
            function = library[symbol]
        except AttributeError as err:
            raise BuildError(
                f"load_module: the library has no function '{symbol}': {err}"
            ) from None
        self._threads = None  # no PARALLEL loop: no thread-count global
        if threads_symbol:
            try:
                self._threads = ctypes.c_int32.in_dll(library, threads_symbol)
            except ValueError:
                pass
        self._alloc_error = None  # no heap-allocated intermediate (or a library made before)
        if error_symbol:
            try:
                self._alloc_error = AllocErrorSlot.in_dll(library, error_symbol)
            except ValueError:
                pass
        function.argtypes = argtypes(source)
        function.restype = None
        self._function = function

    def get_source(self, fmt: str = "ll") -> str:
        """The optimized LLVM IR ("ll"); "asm" is made from it again, where llvmlite is here."""
        if fmt in ("ll", "llvm", ""):
            return self.ir_text
        if fmt in ("asm", "s"):
            if self._asm is None:
                try:
                    from tensorforge.runtime.object_code import emit_assembly
                except ImportError:
                    raise ArgumentError(
                        f"get_source('asm'): '{self.source.entry}' was loaded from a shared "
                        f"library, which holds no assembly, and llvmlite (which could make it "
                        f"from the IR) is not installed; get_source('ll') shows the IR"
                    ) from None
                self._asm = emit_assembly(self.ir_text, self.target, self.source.entry)
            return self._asm
        raise ArgumentError(
            f"get_source: unknown format {fmt!r} for an llvm kernel; use 'll' or 'asm'"
        )
