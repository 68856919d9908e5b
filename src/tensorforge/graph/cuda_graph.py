"""The kernel sequence of a CUDA graph run as one CUDA graph: one launch instead of one per kernel.

At the sizes of a small model a GPU is launch-bound: each kernel launch costs microseconds of
host time, more than the kernel runs. Where every step of a compiled graph is a single CUDA
kernel (no eager torch step between them) and the sizes are static, the kernels become the
nodes of a CUDA driver graph, in a chain, built once (`cuGraphAddKernelNode`) and instantiated.
A call then only changes the arguments that moved (the inputs' and outputs' addresses: the
intermediates' and constants' stay put) with `cuGraphExecKernelNodeSetParams`, and launches the
graph on torch's current stream, so it is ordered with torch's own work.

The driver is reached with ctypes (libcuda), in the primary context that torch and the runtime
share. `Node` and `kernel_params` are plain data and tested without a GPU; `Driver` is the thin
layer of driver calls, replaceable by a fake in tests.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from tensorforge.errors import DeviceError

_CTYPES = {
    "bool": ctypes.c_bool, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8,
    "int16": ctypes.c_int16, "uint16": ctypes.c_uint16, "int32": ctypes.c_int32,
    "uint32": ctypes.c_uint32, "int64": ctypes.c_int64, "uint64": ctypes.c_uint64,
    "float16": ctypes.c_uint16, "float32": ctypes.c_float, "float64": ctypes.c_double,
}  # fmt: skip


@dataclass(frozen=True)
class Node:
    """One kernel of the chain: its image and entry symbol, launch geometry, parameter types
    ("ptr" for a buffer, else the scalar's dtype)."""

    image: bytes
    symbol: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    kinds: tuple[str, ...]  # (a "ptr" first for each tensor map)
    maps: tuple = ()  # (TensorMap, index of its buffer's argument) of bulk tensor copies
    device_id: int = 0


def node_of(executable, raw_args: list) -> Node | None:
    """The graph node of one built CUDA kernel at these arguments (None: it cannot be one,
    e.g. a sequence of several kernels with intermediates of their own)."""
    if not hasattr(executable, "launch") or hasattr(executable, "steps"):
        return None
    grid = tuple(int(entry(raw_args)) for entry in executable._grid)
    if min(grid) <= 0:  # an empty problem: plain launches skip it
        return None
    launch = executable.launch
    kinds = tuple("ptr" if p.kind == "buffer" else p.dtype for p in executable.source.params)
    if any(k != "ptr" and k not in _CTYPES for k in kinds):
        return None
    symbol = executable.source.symbol or executable.source.entry
    maps = tuple(getattr(executable, "_maps", ()))
    kinds = ("ptr",) * len(maps) + kinds
    return Node(executable.image(), symbol, grid, tuple(launch.block), launch.shared_bytes, kinds, maps, executable.device_id)  # fmt: skip


def with_maps(node: Node, args: list) -> list:
    """A node's kernel arguments: the device addresses of its tensor maps (encoded for the
    buffers' addresses in `args`, cached per address: runtime/cuda_tensor_map.py), then `args`."""
    if not node.maps:
        return args
    from tensorforge.runtime import cuda_tensor_map

    return [*(cuda_tensor_map.device_map(m, int(args[i]), node.device_id) for m, i in node.maps), *args]  # fmt: skip


class KernelParams:
    """The `void **kernelParams` of one launch: a slot per parameter, rewritable in place."""

    def __init__(self, kinds: tuple[str, ...], values: list):
        self.kinds = kinds
        self.slots = [
            ctypes.c_uint64(0) if k == "ptr" else _CTYPES[k]()
            for k in kinds  # one object per parameter: its address is what the driver reads
        ]
        self.array = (ctypes.c_void_p * max(1, len(kinds)))(
            *[ctypes.cast(ctypes.pointer(s), ctypes.c_void_p) for s in self.slots]
        )
        self.values: list = [None] * len(kinds)
        self.set(values)

    def set(self, values: list) -> bool:
        """Store `values`; True if any differs from what was stored."""
        changed = False
        for k, (slot, value) in enumerate(zip(self.slots, values)):
            if self.values[k] != value:
                slot.value = int(value) if self.kinds[k] == "ptr" else value
                self.values[k] = value
                changed = True
        return changed


class CudaGraph:
    """A chain of kernel nodes, instantiated once; `launch(args_per_node, stream)` updates the
    nodes whose arguments changed and runs the graph."""

    def __init__(self, nodes: list[Node], args: list[list], driver=None):
        self.driver = driver or Driver()
        self.nodes = nodes
        self.params = [KernelParams(n.kinds, with_maps(n, a)) for n, a in zip(nodes, args)]
        self.functions = [self.driver.function(n.image, n.symbol, n.shared) for n in nodes]
        self.graph = self.driver.graph_create()
        self.handles = []
        previous = None
        for node, function, params in zip(nodes, self.functions, self.params):
            handle = self.driver.add_kernel_node(self.graph, previous, function, node, params)
            self.handles.append(handle)
            previous = handle
        self.exec = self.driver.instantiate(self.graph)

    def launch(self, args: list[list], stream: int = 0, nodes: list[int] | None = None) -> int:
        """Run the graph with these arguments (of `nodes` only, where given: the others'
        are known unchanged); returns how many nodes were updated."""
        updated = 0
        for k in range(len(self.nodes)) if nodes is None else nodes:
            params = self.params[k]
            if params.set(with_maps(self.nodes[k], args[k])):
                self.driver.set_kernel_node(
                    self.exec, self.handles[k], self.functions[k], self.nodes[k], params
                )
                updated += 1
        self.driver.launch(self.exec, stream)
        return updated


# -- the driver ---------------------------------------------------------------------------------


class _NodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS (v2: v1's fields, then the kernel and context, left null)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


def _node_params(function, node: Node, params: KernelParams) -> _NodeParams:
    return _NodeParams(
        function,
        *node.grid,
        *node.block,
        node.shared,
        ctypes.cast(params.array, ctypes.c_void_p),
        None,
        None,
        None,
    )


class Driver:
    """The few CUDA driver calls a graph needs, through ctypes (the current context: the
    primary one, made current by the runtime before a graph is built or launched)."""

    _modules: dict[tuple[bytes, str], tuple] = {}  # loaded once per (image, symbol)

    def __init__(self):
        try:
            self.cuda = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise DeviceError(f"no CUDA driver library for a CUDA graph: {error}") from None

    def _call(self, name: str, *args) -> None:
        fn = getattr(self.cuda, name + "_v2", None) if name in _V2 else None
        fn = fn or getattr(self.cuda, name)
        status = fn(*args)
        if status != 0:
            text = ctypes.c_char_p()
            self.cuda.cuGetErrorString(status, ctypes.byref(text))
            raise DeviceError(f"{name} failed: {(text.value or b'').decode()} ({status})")

    def function(self, image: bytes, symbol: str, shared: int = 0):
        key = (image, symbol)
        if key not in Driver._modules:
            module, function = ctypes.c_void_p(), ctypes.c_void_p()
            self._call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(image))
            self._call("cuModuleGetFunction", ctypes.byref(function), module, symbol.encode())
            Driver._modules[key] = (module, function)
        function = Driver._modules[key][1]
        if shared:  # this module's handle, not the runtime's: its own limit (any dynamic bytes:
            # with the static arrays they may pass 48 KiB, runtime/cuda_exec.py)
            self._call(
                "cuFuncSetAttribute",
                function,
                ctypes.c_int(_MAX_DYNAMIC_SHARED),
                ctypes.c_int(shared),
            )
        return function

    def graph_create(self):
        graph = ctypes.c_void_p()
        self._call("cuGraphCreate", ctypes.byref(graph), ctypes.c_uint(0))
        return graph

    def add_kernel_node(self, graph, previous, function, node: Node, params: KernelParams):
        handle = ctypes.c_void_p()
        deps = (ctypes.c_void_p * 1)(previous) if previous is not None else None
        desc = _node_params(function, node, params)
        count = ctypes.c_size_t(0 if previous is None else 1)
        self._call(
            "cuGraphAddKernelNode", ctypes.byref(handle), graph, deps, count, ctypes.byref(desc)
        )
        return handle

    def instantiate(self, graph):
        exec_ = ctypes.c_void_p()
        self._call("cuGraphInstantiateWithFlags", ctypes.byref(exec_), graph, ctypes.c_ulonglong(0))
        return exec_

    def set_kernel_node(self, exec_, handle, function, node: Node, params: KernelParams) -> None:
        desc = _node_params(function, node, params)
        self._call("cuGraphExecKernelNodeSetParams", exec_, handle, ctypes.byref(desc))

    def launch(self, exec_, stream: int) -> None:
        self._call("cuGraphLaunch", exec_, ctypes.c_void_p(stream))


_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_V2 = {"cuGraphAddKernelNode", "cuGraphExecKernelNodeSetParams"}
