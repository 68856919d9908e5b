"""`Module.save(path, fmt)`: write a module's code in the format its suffix names (TVM's save).

".so" (or fmt "so") is export_library's file, which tf.runtime.load_module reads back; ".ll",
".s", ".cu", ".ptx" are the source texts, and ".o" the llvm kernels' object code: for reading
or for linking elsewhere (as in TVM, these are not loaded back).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tensorforge.errors import ArgumentError

if TYPE_CHECKING:
    from tensorforge.runtime.module import Module

# fmt -> (module kind, get_source format); None: not a text format
_TEXT = {
    "ll": ("llvm", "ll"),
    "llvm": ("llvm", "ll"),
    "s": ("llvm", "asm"),
    "asm": ("llvm", "asm"),
    "cu": ("cuda", "cuda"),
    "cuda": ("cuda", "cuda"),
    "ptx": ("cuda", "ptx"),
}


def save(module: Module, path: str | os.PathLike, fmt: str = "") -> None:
    """Write `module` to `path` in `fmt` (default: the suffix of path)."""
    path = os.fspath(path)
    fmt = (fmt or os.path.splitext(path)[1].lstrip(".")).lower()
    if fmt in ("so", "tf", "dll", "dylib"):
        module.export_library(path)
        return
    if fmt in ("o", "obj"):
        if module.type_key != "llvm":
            raise ArgumentError(
                f"save: object code ('.o') is for llvm modules, not {module.type_key}"
            )
        from tensorforge.runtime.object_code import emit_object

        functions = [module[name] for name in module.function_names]
        if len(functions) != 1:
            raise ArgumentError(
                "save: a module of several functions goes into one library: "
                "mod.export_library(path) (or save to a '.so' path)"
            )
        code, _ = emit_object(module.get_source("ll"), module.target, functions[0].name)
        _write(path, code)
        return
    if fmt not in _TEXT:
        raise ArgumentError(
            f"save: unknown format {fmt!r} for {path!r}; use a '.so' path (export_library: "
            f"tf.runtime.load_module reads it back), '.o', or a source format: "
            f"{', '.join(sorted(_TEXT))}"
        )
    kind, source_format = _TEXT[fmt]
    if kind != module.type_key:
        raise ArgumentError(f"save: {fmt!r} is a {kind} format; this is a {module.type_key} module")
    _write(path, module.get_source(source_format).encode())


def _write(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as err:
        raise ArgumentError(f"save: cannot write {path}: {err}") from None
