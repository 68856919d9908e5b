"""LLVM IR text -> native code in this process: parse, optimize at O3, MCJIT, call through ctypes.

One process-wide LLVM initialization; the host Target and its feature string are looked up once.
Each executable owns its ExecutionEngine, which owns a TargetMachine of its own (llvmlite hands the
machine to the engine), and keeps the engine alive as long as the function pointer is callable.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading

import llvmlite.binding as llvm

from tensorforge.codegen.base import ALLOC_ERROR_SYMBOL, KernelSource
from tensorforge.errors import BuildError
from tensorforge.runtime import packed_func
from tensorforge.runtime.native_call import (
    AllocErrorSlot,
    NativeKernel,
    argtypes,
    make_gomp_fork_safe,
)
from tensorforge.target import Target, as_target

_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _initialize() -> llvm.Target:
    """Initialize LLVM's native target once per process; the host llvm.Target."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_triple(llvm.get_process_triple())


@functools.lru_cache(maxsize=1)
def _load_libgomp() -> None:
    """Make libgomp's symbols (GOMP_parallel, omp_get_thread_num) visible to JIT-compiled code."""
    name = ctypes.util.find_library("gomp") or "libgomp.so.1"
    try:
        llvm.load_library_permanently(name)
    except RuntimeError as err:
        raise BuildError(
            f"PARALLEL loops need libgomp, which could not be loaded ({name}): {err}"
        ) from err
    make_gomp_fork_safe(name)


def _target_machine(target: Target) -> llvm.TargetMachine:
    """A fresh TargetMachine for target's CPU (an ExecutionEngine takes ownership of one)."""
    return _initialize().create_target_machine(
        cpu=target.mcpu, features=target.features, opt=3, jit=True
    )


@functools.lru_cache(maxsize=8)
def _optimizer(mcpu: str, features: str) -> tuple[llvm.TargetMachine, object]:
    """(machine, tuning options) for O3 with SLP vectorization, made once per CPU.

    NOTE: LLVM's loop vectorizer is off. Loops are vectorized by the schedule (`vectorize`), as
    in TVM and Halide, and the fuzzer found four LLVM 22 loop-vectorizer failures on scalar
    loops: two miscompiles (a maxnum reduction; a fused, unrolled matmul), an assertion abort
    (a triangular max) and, with SLP, an invalid-IR abort.
    """
    machine = _initialize().create_target_machine(cpu=mcpu, features=features, opt=3, jit=True)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = False
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    return machine, tuning


def _optimize(module: llvm.ModuleRef, target: Target) -> None:
    """Run the O3 pipeline on `module` (in place) with the target's cost model."""
    machine, tuning = _optimizer(target.mcpu, target.features)
    # NOTE: a fresh PassBuilder per module: llvmlite registers per-run instrumentation callbacks
    # on the builder that would outlive the run if the builder were reused.
    passes = llvm.create_pass_builder(machine, tuning)
    passes.getModulePassManager().run(module, passes)


class LLVMExecutable(NativeKernel):
    """The compiled entry of an llvm KernelSource: `call(raw_args)` runs it.

    raw_args are in `source.params` order: buffers as integer addresses, scalars as numbers.
    """

    def __init__(self, source: KernelSource, target: Target | str):
        self.source = source
        self.target = target = as_target(target)
        types = argtypes(source)
        self._asm: str | None = None
        self._threads: ctypes.c_int32 | None = None
        self._alloc_error: AllocErrorSlot | None = None  # kernels with heap intermediates
        # NOTE: llvmlite parses into LLVM's global context, which is not thread-safe, and ctypes
        # releases the GIL inside LLVM: one compile at a time per process.
        with _lock:
            address = self._compile(source, target)
        self._function = ctypes.CFUNCTYPE(None, *types)(address)

    def _compile(self, source: KernelSource, target: Target) -> int:
        _initialize()
        try:
            module = llvm.parse_assembly(source.text)
            module.verify()
        except RuntimeError as err:
            raise BuildError(f"'{source.entry}': the generated LLVM IR is invalid: {err}") from err
        _optimize(module, target)
        self._optimized_ir = str(module)
        if "GOMP_parallel" in source.text or "omp_get_" in source.text:
            _load_libgomp()
        threads_global = source.num_threads_symbol
        globals_ = {g.name for g in module.global_variables}
        has_threads_global = threads_global in globals_
        external = [
            f.name for f in module.functions if f.is_declaration and not f.name.startswith("llvm.")
        ]
        if packed_func.PACKED_SYMBOL in external:  # calls of tf.register_func'ed functions
            llvm.add_symbol(packed_func.PACKED_SYMBOL, packed_func.callback_address())
        # NOTE: the engine owns the module and a machine of its own; self keeps the engine alive,
        # and with it the code the function pointer points into.
        self._engine = llvm.create_mcjit_compiler(module, _target_machine(target))
        for name in external:  # MCJIT would silently bind a missing symbol to address 0
            if not llvm.address_of_symbol(name):  # (the process's symbols are visible from here on)
                raise BuildError(f"'{source.entry}' calls '{name}', which this process cannot find")
        self._engine.finalize_object()
        address = self._engine.get_function_address(source.entry)
        if not address:
            raise BuildError(f"'{source.entry}': the JIT found no function of that name")
        if has_threads_global:
            self._threads = ctypes.c_int32.from_address(
                self._engine.get_global_value_address(threads_global)
            )
        if ALLOC_ERROR_SYMBOL in globals_:
            self._alloc_error = AllocErrorSlot.from_address(
                self._engine.get_global_value_address(ALLOC_ERROR_SYMBOL)
            )
        return address

    def get_source(self, fmt: str = "ll") -> str:
        """The optimized LLVM IR ("ll") or the machine code as assembly ("asm")."""
        if fmt in ("ll", "llvm", ""):
            return self._optimized_ir
        if fmt in ("asm", "s"):
            if self._asm is None:
                machine, _ = _optimizer(self.target.mcpu, self.target.features)
                with _lock:
                    self._asm = machine.emit_assembly(llvm.parse_assembly(self._optimized_ir))
            return self._asm
        raise BuildError(
            f"get_source: unknown format {fmt!r} for an llvm kernel; use 'll' or 'asm'"
        )

    def cache_entry(self, metadata: dict) -> bytes:
        """This kernel as a one-function library file (the disk cache's entry), linked at the
        lowest CPU priority: the disk cache makes it in the background."""
        from tensorforge.runtime.shared_lib import build_llvm_library

        functions = [(self.source, self._optimized_ir)]
        return build_llvm_library(
            functions, self.target, metadata, objects=[self.object_code()], background=True
        )

    def object_code(self) -> bytes:
        """The optimized module as a relocatable, position-independent ELF object (for export).

        It defines the entry symbol and, where there are PARALLEL loops, the int32 global
        NUM_THREADS_SYMBOL (0 lets libgomp choose) and needs libgomp (-lgomp) and libm.
        """
        machine = _initialize().create_target_machine(
            cpu=self.target.mcpu,
            features=self.target.features,
            opt=3,
            reloc="pic",
            codemodel="default",
        )
        with _lock:
            return machine.emit_object(llvm.parse_assembly(self._optimized_ir))
