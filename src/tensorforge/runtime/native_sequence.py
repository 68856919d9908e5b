"""Several compiled CPU kernels called one after another by one native function.

A compiled graph calls its kernels in a fixed order with mostly fixed arguments (weights and
intermediates stay put; the inputs and outputs change each call). Calling each through ctypes
costs a few microseconds of Python a kernel, and more where the kernels before it streamed
megabytes of weights through the cache and the interpreter's own data must come back from
memory. `NativeSequence` is one JIT-compiled function `void run(int64 *slots)`: every kernel's
arguments are read from `slots` (buffers as addresses, sizes as integers) and the kernels are
called in order; the caller writes the slots that change and makes one ctypes call.
"""

from __future__ import annotations

import ctypes

from tensorforge.errors import BuildError
from tensorforge.runtime.native_call import NativeKernel

_INTS = {
    "bool": "i1",
    "int8": "i8",
    "uint8": "i8",
    "int16": "i16",
    "uint16": "i16",
    "int32": "i32",
    "uint32": "i32",
    "int64": "i64",
    "uint64": "i64",
}


def function_address(kernel: NativeKernel) -> int:
    """The address of a CPU kernel's entry (JIT-compiled or loaded from a library)."""
    address = ctypes.cast(kernel._function, ctypes.c_void_p).value
    if not address:
        raise BuildError(f"'{kernel.source.entry}' has no callable address")
    return address


def parameter_types(kernel: NativeKernel) -> list[str]:
    """The LLVM type of each parameter: "ptr" for a buffer, "iN" for an integer scalar.
    BuildError for a parameter a sequence cannot pass (a float scalar)."""
    types = []
    for p in kernel.source.params:
        if p.kind == "buffer":
            types.append("ptr")
        elif p.dtype in _INTS:
            types.append(_INTS[p.dtype])
        else:
            raise BuildError(
                f"'{kernel.source.entry}': scalar parameter '{p.name}' ({p.dtype}) cannot be "
                f"passed by a native sequence"
            )
    return types


def sequence_ir(calls: list[tuple[int, list[str], list[int]]], name: str = "tf_sequence") -> str:
    """LLVM IR of `void name(ptr slots)`: for each (address, parameter types, slot indices),
    the function at `address` called with slot k of each parameter (converted to its type)."""
    lines = [f"define void @{name}(ptr noalias readonly %slots) {{", "entry:"]
    value = 0
    for address, types, indices in calls:
        if len(types) != len(indices):
            raise BuildError("native sequence: one slot per parameter is needed")
        args = []
        for ty, index in zip(types, indices):
            gep, raw = f"%g{value}", f"%r{value}"
            lines.append(f"  {gep} = getelementptr inbounds i64, ptr %slots, i64 {index}")
            lines.append(f"  {raw} = load i64, ptr {gep}, align 8")
            if ty == "ptr":
                lines.append(f"  %v{value} = inttoptr i64 {raw} to ptr")
            elif ty == "i64":
                lines.append(f"  %v{value} = add i64 {raw}, 0")
            else:
                lines.append(f"  %v{value} = trunc i64 {raw} to {ty}")
            args.append(f"{ty} %v{value}")
            value += 1
        lines.append(f"  %f{value} = inttoptr i64 {address} to ptr")
        lines.append(f"  call void %f{value}({', '.join(args)})")
        value += 1
    lines += ["  ret void", "}", ""]
    return "\n".join(lines)


class NativeSequence:
    """`run(slots_address)` calls `kernels` in order, kernel k with the slots `indices[k]`.

    The kernels' thread-count globals are not set here (the caller sets them); a kernel whose
    heap allocation failed is reported by `raise_alloc_errors` after the run.
    """

    def __init__(self, kernels: list[NativeKernel], indices: list[list[int]]):
        import llvmlite.binding as llvm

        from tensorforge.runtime import llvm_exec

        calls = [(function_address(k), parameter_types(k), idx) for k, idx in zip(kernels, indices)]
        self.text = sequence_ir(calls)
        self.kernels = list(kernels)
        target = llvm_exec.as_target("llvm")
        with llvm_exec._lock:
            llvm_exec._initialize()
            try:
                module = llvm.parse_assembly(self.text)
                module.verify()
            except RuntimeError as err:
                raise BuildError(f"native sequence: invalid IR: {err}") from err
            # NOTE: the engine owns the module; self keeps the engine (and the code) alive
            self._engine = llvm.create_mcjit_compiler(module, llvm_exec._target_machine(target))
            self._engine.finalize_object()
            address = self._engine.get_function_address("tf_sequence")
        if not address:
            raise BuildError("native sequence: the JIT found no function")
        self.run = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
        self._errors = [k for k in self.kernels if k._alloc_error is not None]

    def raise_alloc_errors(self) -> None:
        for kernel in self._errors:
            kernel.check_allocation()
