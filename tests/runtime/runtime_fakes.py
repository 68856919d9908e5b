"""Fake executables and kernel descriptions: Module and argument handling without a codegen."""

import ctypes

import numpy as np

from tensorforge.codegen.base import KernelSource, Param


class NumpyExecutable:
    """Runs `fn` on numpy views rebuilt from the raw arguments (addresses and numbers), as a
    compiled kernel would see them; records every call's raw arguments."""

    def __init__(self, source, target=None, fn=None):
        self.source = source
        self.target = target
        self.fn = fn
        self.calls = []

    def call(self, raw_args):
        self.calls.append(list(raw_args))
        if self.fn is None:
            return
        sizes = {p.name: v for p, v in zip(self.source.params, raw_args) if p.kind == "scalar"}
        values = []
        for param, raw in zip(self.source.params, raw_args):
            if param.kind == "scalar":
                values.append(raw)
                continue
            shape = tuple(sizes[d] if isinstance(d, str) else d for d in param.shape)
            dtype = np.dtype(param.dtype)
            nbytes = int(np.prod(shape)) * dtype.itemsize
            memory = (ctypes.c_char * nbytes).from_address(raw)
            values.append(np.frombuffer(memory, dtype=dtype).reshape(shape))
        self.fn(*values)

    def get_source(self, fmt):
        return f"{fmt} of {self.source.entry}"


def buffer(name, shape, dtype="float32"):
    return Param(name, "buffer", dtype, tuple(shape))


def scalar(name, dtype="int32", bound=False):
    return Param(name, "scalar", dtype, (), bound)


def source(params, entry="main", target="llvm", text="; fake kernel"):
    return KernelSource(target=target, entry=entry, text=text, params=tuple(params))


def vector_add_params():
    """add(A, B, C) over a symbolic n bound from the shapes."""
    return [buffer("A", ["n"]), buffer("B", ["n"]), buffer("C", ["n"]), scalar("n", bound=True)]


def vector_add(a, b, c, n):
    c[:] = a + b
