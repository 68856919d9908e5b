"""Code generators, one per target kind: lowered PrimFunc -> KernelSource."""

from tensorforge.codegen.c import CCodegen
from tensorforge.codegen.cuda import CUDACodegen
from tensorforge.codegen.llvm import LLVMCodegen

CODEGENS = {
    "llvm": LLVMCodegen(),
    "cuda": CUDACodegen(),
    "c": CCodegen(),
}
