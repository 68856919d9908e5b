"""Run generated CUDA C: compile it with nvcc (through pycuda), load it, launch it by its Launch.

`CUDAExecutable(source, target)` compiles at construction where a GPU is usable (so build
errors come at build time) and otherwise waits: `get_source("cuda")` always works, and `call`
raises DeviceError("no CUDA device is available: ..."). Compiled images are cached in memory by
(source text, arch); pycuda also keeps nvcc's output on disk.
"""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tensorforge.codegen.base import KernelSource, Launch
from tensorforge.errors import AllocationError, ArgumentError, BuildError, DeviceError
from tensorforge.runtime import cuda_driver, cuda_tensor_map

# NOTE: no --use_fast_math: results must match numpy; the code asks for fast intrinsics itself.
COMPILE_OPTIONS = ("-O3", "-lineinfo")
_MAX_GRID = (2**31 - 1, 65535, 65535)
_STRUCT_CHARS = {
    "bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i",
    "uint32": "I", "int64": "q", "uint64": "Q", "float16": "e", "float32": "f", "float64": "d",
}  # fmt: skip

_lock = threading.Lock()
_deferring = threading.local()  # .pending: the executables whose load deferred_loads put off
_images: dict[tuple[str, str, str], bytes] = {}  # (text, arch, "cubin"|"ptx") -> nvcc output
_loaded: dict[
    tuple[str, str, int, str], tuple[Any, Any]
] = {}  # (text, arch, device, entry) -> (module, function)


def compile_cuda(text: str, arch: str, target: str = "cubin") -> bytes:
    """nvcc's `target` output ("cubin" or "ptx") for `text`, cached in memory."""
    key = (text, arch, target)
    with _lock:
        if key in _images:
            return _images[key]
    try:
        from pycuda.compiler import compile as pycuda_compile
    except Exception:  # no pycuda, or no CUDA driver to load it: call nvcc ourselves
        pycuda_compile = None
    if pycuda_compile is not None:
        import pycuda.driver

        try:
            image = pycuda_compile(
                text, no_extern_c=True, arch=arch, options=list(COMPILE_OPTIONS), target=target
            )
        except pycuda.driver.CompileError as error:
            raise BuildError(
                f"nvcc failed to compile the generated CUDA C for {arch}:\n{error}"
            ) from None
    else:
        image = _nvcc(text, arch, target)
    with _lock:
        _images[key] = image
    return image


@contextlib.contextmanager
def deferred_loads() -> Iterator[list]:
    """CUDA executables made in this block (by this thread) are listed, not compiled and loaded
    as they are made: `load_all(listed)` then compiles their images side by side and loads
    them. A model's kernels are built one after another; their nvcc runs need not be (ResNet-18:
    23 kernels, 8.4 s of nvcc one by one)."""
    outer = getattr(_deferring, "pending", None)
    pending: list = []
    _deferring.pending = pending
    try:
        yield pending
    finally:
        _deferring.pending = outer


def load_all(executables: Sequence[Any]) -> list[tuple[Any, BuildError]]:
    """Compile the executables' images (one nvcc process per distinct source, up to one per
    core) and load each; (executable, error) for those that failed to build or load."""
    compile_images(executables)
    failed = []
    for executable in executables:
        try:
            executable._load()
        except BuildError as error:
            failed.append((executable, error))
    return failed


def compile_images(executables: Sequence[Any]) -> None:
    """Fill the image cache for these executables' sources, nvcc processes side by side. A
    source nvcc rejects is left out: its executable's own load reports the error."""
    if shutil.which("nvcc") is None:
        return
    keys = {(e.source.text, e.arch) for e in executables}
    with _lock:
        todo = [k for k in keys if (*k, "cubin") not in _images]
    if len(todo) < 2:
        return

    def compile_one(key: tuple[str, str]) -> None:
        try:
            image = _nvcc(*key, "cubin")
        except BuildError:
            return
        with _lock:
            _images[(*key, "cubin")] = image

    with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool:
        list(pool.map(compile_one, todo))


def _nvcc(text: str, arch: str, target: str) -> bytes:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise BuildError(f"cannot produce {target}: neither pycuda nor nvcc is available here")
    with tempfile.TemporaryDirectory(prefix="tensorforge-cuda-") as folder:
        source = os.path.join(folder, "kernel.cu")
        output = os.path.join(folder, f"kernel.{target}")
        with open(source, "w") as f:
            f.write(text)
        command = [nvcc, f"-arch={arch}", f"--{target}", *COMPILE_OPTIONS, "-o", output, source]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BuildError(
                f"nvcc failed to compile the generated CUDA C for {arch}:\n{result.stderr}"
            )
        with open(output, "rb") as f:
            return f.read()


class CUDAExecutable:
    """One compiled CUDA kernel: `call(raw_args)` launches it (buffers as device pointers).

    A source of several kernels (`source.kernels`) makes a CUDASequence instead.
    """

    def __new__(cls, source: KernelSource, *args: Any, **kwargs: Any) -> Any:
        if cls is CUDAExecutable and source.kernels:
            return CUDASequence(source, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        source: KernelSource,
        target: Any = None,
        image: bytes | None = None,
        device_id: int = 0,
    ) -> None:
        if source.target != "cuda":
            raise BuildError(f"CUDAExecutable: '{source.entry}' is {source.target} code, not CUDA")
        self.source = source
        self.arch = _arch_of(target, source)
        self.device_id = device_id
        self.launch = source.launch or Launch()
        self._image = image
        self._function: Any = None
        self._prepared = False
        params = source.params
        self._scalar_index = {p.name: i for i, p in enumerate(params) if p.kind == "scalar"}
        self._grid = [_grid_entry(g, self._scalar_index, source.entry) for g in self.launch.grid]
        self._format = "P" * len(source.tensor_maps) + "".join(
            "P" if p.kind == "buffer" else _STRUCT_CHARS[p.dtype] for p in params
        )
        index = {p.name: i for i, p in enumerate(params)}
        self._maps = [(m, index[m.param]) for m in source.tensor_maps]
        alignment = dict(source.vector_alignment)
        self._aligned = [
            (i, p.name, alignment[p.name]) for i, p in enumerate(params) if p.name in alignment
        ]
        if cuda_driver.available():
            pending = getattr(_deferring, "pending", None)
            if pending is not None:  # compiled with the others built beside it (load_all)
                pending.append(self)
            else:
                self._load()  # compile now: nvcc errors belong to build time

    # -- compiling and loading ------------------------------------------------------------------
    def image(self) -> bytes:
        """The compiled kernel (cubin) for this GPU architecture: what export_library saves."""
        if self._image is None:
            self._image = compile_cuda(self.source.text, self.arch, "cubin")
        return self._image

    def _load(self) -> None:
        cuda = cuda_driver.driver()
        cuda_driver.activate(self.device_id)
        symbol = self.source.symbol or self.source.entry
        key = (self.source.text, self.arch, self.device_id, symbol)
        with _lock:
            loaded = _loaded.get(key)
        if loaded is None:
            image = self.image()
            try:
                module = cuda.module_from_buffer(image)
                function = module.get_function(symbol)
            except cuda.Error as error:
                raise BuildError(
                    f"loading CUDA kernel '{self.source.entry}' failed: {error}"
                ) from None
            shared = self.launch.shared_bytes
            # (dynamic bytes: asked for even at or under the static limit, which they and the
            # kernel's static arrays, its mbarriers, may pass together: 48 + 1 KiB)
            if shared:
                try:
                    function.set_attribute(
                        cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared
                    )
                except Exception as error:
                    raise BuildError(
                        f"'{self.source.entry}' needs {shared} bytes of shared memory and the "
                        f"device refused them: {error}"
                    ) from None
            loaded = (module, function)
            with _lock:
                loaded = _loaded.setdefault(key, loaded)
        self._function = loaded[1]
        try:
            self._function.prepare(self._format)
            self._prepared = True
        except Exception:  # NOTE: older pycuda: fall back to unprepared calls (slower packing)
            self._prepared = False

    # -- running --------------------------------------------------------------------------------
    def call(self, raw_args: Sequence[Any]) -> None:
        """Launch on `raw_args` (device pointers as ints for buffers, numbers for scalars)."""
        if self._function is None:
            self._load()  # raises DeviceError without a GPU
        params = self.source.params
        if len(raw_args) != len(params):
            raise ArgumentError(
                f"{self.source.entry}: expected {len(params)} raw arguments "
                f"({', '.join(p.name for p in params)}), got {len(raw_args)}"
            )
        for i, name, align in self._aligned:
            if int(raw_args[i]) % align:
                raise ArgumentError(
                    f"{self.source.entry}: argument '{name}' is at address {int(raw_args[i]):#x}, "
                    f"but the kernel reads it with {align}-byte vector accesses; pass an array "
                    f"that starts on a {align}-byte boundary (e.g. a fresh copy, not an offset view)"
                )
        grid = tuple(entry(raw_args) for entry in self._grid)
        for axis, (size, limit) in enumerate(zip(grid, _MAX_GRID)):
            if size > limit:
                raise ArgumentError(
                    f"{self.source.entry}: grid size along {'xyz'[axis]} is {size} "
                    f"(from {self.launch.grid[axis]}), more than the {limit} CUDA allows"
                )
        if min(grid) <= 0:
            return  # an empty problem: nothing to launch
        cuda = cuda_driver.driver()
        cuda_driver.activate(self.device_id)
        block = self.launch.block
        if self._maps:  # the bulk tensor copies' descriptors (in device memory) go first
            maps = [cuda_tensor_map.device_map(m, int(raw_args[i]), self.device_id) for m, i in self._maps]  # fmt: skip
            raw_args = [*maps, *raw_args]
        try:
            if self._prepared:
                self._function.prepared_call(
                    grid, block, *raw_args, shared_size=self.launch.shared_bytes
                )
            else:
                self._function(
                    *self._numpy_args(raw_args),
                    grid=grid,
                    block=block,
                    shared=self.launch.shared_bytes,
                )
        except cuda.Error as error:
            raise DeviceError(
                f"launching '{self.source.entry}' with grid {grid} and block {block} failed: {error}"
            ) from None

    def _numpy_args(self, raw_args: Sequence[Any]) -> list[Any]:
        import numpy as np

        out = [np.uintp(int(m)) for m in raw_args[: len(self._maps)]]
        for p, arg in zip(self.source.params, raw_args[len(self._maps) :]):
            out.append(np.uintp(int(arg)) if p.kind == "buffer" else np.dtype(p.dtype).type(arg))
        return out

    def synchronize(self) -> None:
        """Wait for the launched kernels to finish (errors of a failed kernel surface here)."""
        cuda_driver.synchronize(self.device_id)

    # -- inspection -----------------------------------------------------------------------------
    def get_source(self, fmt: str = "cuda") -> str:
        """ "cuda" (or "cu"): the CUDA C; "ptx": nvcc's PTX for this architecture."""
        if fmt in ("cuda", "cu", ""):
            return self.source.text
        if fmt == "ptx":
            return compile_cuda(self.source.text, self.arch, "ptx").decode()
        raise ArgumentError(f"get_source: unknown format {fmt!r} for CUDA; valid: 'cuda', 'ptx'")


class CUDASequence:
    """A function of several kernels: `call(raw_args)` launches each in order on the same stream.

    The intermediates between them live in device memory this object allocates (once per set of
    sizes, kept for the next call); each kernel gets its arguments by parameter name.
    """

    def __init__(
        self,
        source: KernelSource,
        target: Any = None,
        image: bytes | None = None,
        device_id: int = 0,
    ) -> None:
        self.source = source
        self.arch = _arch_of(target, source)
        self.device_id = device_id
        # NOTE: every kernel's text is the whole source, so one image (cubin) holds them all
        self.steps = [
            CUDAExecutable(k, target, image=image, device_id=device_id) for k in source.kernels
        ]
        where = {p.name: ("arg", i) for i, p in enumerate(source.params)}
        where |= {p.name: ("tmp", i) for i, p in enumerate(source.intermediates)}
        self._routes = [[where[p.name] for p in k.params] for k in source.kernels]
        scalars = {p.name: i for i, p in enumerate(source.params) if p.kind == "scalar"}
        self._sizes = [
            [_grid_entry(extent, scalars, source.entry) for extent in p.shape]
            for p in source.intermediates
        ]
        self._itemsize = [_itemsize(p.dtype) for p in source.intermediates]
        self._buffers: tuple[tuple[int, ...], list[Any]] | None = None

    def call(self, raw_args: Sequence[Any]) -> None:
        counts = tuple(
            _product(size(raw_args) for size in sizes) * itemsize
            for sizes, itemsize in zip(self._sizes, self._itemsize)
        )
        if self._buffers is None or self._buffers[0] != counts:
            cuda = cuda_driver.driver()
            cuda_driver.activate(self.device_id)
            self._buffers = None  # free the old ones before taking new ones
            allocations = []
            for p, n in zip(self.source.intermediates, counts):
                try:
                    allocations.append(cuda.mem_alloc(max(n, 1)))
                except (cuda.Error, MemoryError, OverflowError) as error:
                    for taken in allocations:  # nothing stays allocated
                        taken.free()
                    raise AllocationError(
                        f"'{self.source.entry}' could not allocate its intermediate buffer "
                        f"'{p.name}' on the GPU: {n} bytes ({p.dtype}{list(p.shape)}): "
                        f"{type(error).__name__}: {error}"
                    ) from None
            self._buffers = (counts, allocations)
        temps = [int(a) for a in self._buffers[1]]
        for step, route in zip(self.steps, self._routes):
            step.call([raw_args[i] if kind == "arg" else temps[i] for kind, i in route])

    def synchronize(self) -> None:
        cuda_driver.synchronize(self.device_id)

    def image(self) -> bytes:
        """The compiled kernels (one cubin holds them all): what export_library saves."""
        return self.steps[0].image()

    def get_source(self, fmt: str = "cuda") -> str:
        return self.steps[0].get_source(fmt)


def _itemsize(dtype: str) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize


def _product(values: Any) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _arch_of(target: Any, source: KernelSource) -> str:
    arch = getattr(target, "arch", None)
    if not arch and isinstance(target, str) and "-arch=" in target:
        arch = target.split("-arch=")[1].split()[0]
    if not arch and "-arch=" in source.target_string:
        arch = source.target_string.split("-arch=")[1].split()[0]
    arch = arch or "sm_90"
    if arch == "sm_90" and "wgmma.mma_async" in source.text:
        arch = "sm_90a"  # wgmma exists only in the architecture-specific sm_90a
    return arch


# -- the grid: ints, scalar parameter names, or expressions over them ---------------------------

_ALLOWED = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Constant, ast.Call,
    ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.USub,
)  # fmt: skip


def _grid_entry(
    entry: int | str, scalars: dict[str, int], kernel: str
) -> Callable[[Sequence[Any]], int]:
    if isinstance(entry, int):
        return lambda args: entry
    if entry in scalars:
        index = scalars[entry]
        return lambda args: int(args[index])
    try:
        tree = ast.parse(entry, mode="eval")
    except SyntaxError:
        raise BuildError(f"{kernel}: launch size {entry!r} is not an expression") from None
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise BuildError(f"{kernel}: launch size {entry!r} uses {type(node).__name__}")
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in ("min", "max")
        ):
            raise BuildError(f"{kernel}: launch size {entry!r} calls something other than min/max")
        if isinstance(node, ast.Name) and node.id not in ("min", "max"):
            if node.id not in scalars:
                raise BuildError(
                    f"{kernel}: launch size {entry!r} uses '{node.id}', not a scalar parameter"
                )
            names.add(node.id)
    code = compile(tree, f"<launch size of {kernel}>", "eval")
    used = [(name, scalars[name]) for name in sorted(names)]
    builtins = {"min": min, "max": max}

    def evaluate(args: Sequence[Any]) -> int:
        env = {name: int(args[i]) for name, i in used}
        return int(eval(code, {"__builtins__": builtins}, env))

    return evaluate
