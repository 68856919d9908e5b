"""Optimized LLVM IR text -> position-independent object code or assembly, for shared libraries.

export_library makes its objects here: the code is what `LLVMExecutable.object_code()` emits
(same CPU, features, O3, PIC), and this module can also rename symbols, so that several kernels
share one library. Each call parses into an LLVM context of its own with a TargetMachine of its
own (NOTE: llvmlite still runs one LLVM call at a time per process, whatever the context).
"""

from __future__ import annotations

import functools

import llvmlite.binding as llvm

from tensorforge.errors import BuildError
from tensorforge.target import Target, as_target


@functools.lru_cache(maxsize=1)
def _host_target() -> llvm.Target:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_triple(llvm.get_process_triple())


def _machine(target: Target) -> llvm.TargetMachine:
    return _host_target().create_target_machine(
        cpu=target.mcpu, features=target.features, opt=3, reloc="pic", codemodel="default"
    )


def _parse(ir_text: str, entry: str) -> llvm.ModuleRef:
    _host_target()
    try:
        module = llvm.parse_assembly(ir_text, llvm.create_context())
        module.verify()
    except RuntimeError as err:
        raise BuildError(f"'{entry}': its LLVM IR cannot be compiled to a library: {err}") from None
    return module


def emit_object(
    ir_text: str, target: Target | str, entry: str, suffix: str | None = None
) -> tuple[bytes, dict[str, str]]:
    """(object code of the optimized IR `ir_text`, {name in the IR: symbol in the object}).

    The map lists every symbol the module defines for other objects to see. With `suffix`,
    each of them except `entry` becomes `name.suffix`, so kernels linked into one library do
    not clash (each kernel defines its own `__tf_num_threads`).
    """
    module = _parse(ir_text, entry)
    symbols: dict[str, str] = {}
    for value in [*module.global_variables, *module.functions]:
        if value.is_declaration or value.name.startswith("llvm."):
            continue
        if value.linkage in (llvm.Linkage.internal, llvm.Linkage.private):
            continue
        name = value.name
        if suffix is not None and name != entry:
            value.name = f"{name}.{suffix}"
        symbols[name] = value.name
    return _machine(as_target(target)).emit_object(module), symbols


def emit_assembly(ir_text: str, target: Target | str, entry: str) -> str:
    """The assembly of the optimized IR `ir_text` as a shared library holds it."""
    return _machine(as_target(target)).emit_assembly(_parse(ir_text, entry))
