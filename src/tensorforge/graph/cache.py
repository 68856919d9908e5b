"""Compiled graphs on disk: compiling the same model again (in another process, at the same
shapes) loads its kernels from one library file instead of scheduling, lowering, generating and
compiling each of them again.

The key is a hash of what the kernels are made from: the ATen graph (its code, each node's
operator, shape and dtype, symbolic sizes by their expressions, which inputs are constants), the
full target string, torch's TF32 flags (options.Float32Precision), the tuning log's content, the
`TENSORFORGE_*` settings, the tensorforge version and a fingerprint of its source files. Weight
values are not in it: lowering decides nothing by them, and it runs again on every compile (a few
hundred milliseconds), so what it derives from the live weights (batch norms folded into
convolution weights, packed matrices) is always recomputed, never served from the cache. The entry
holds the kernels' compiled code (runtime/library_file.py's format, checked before it is loaded: on
the CPU one shared library, on CUDA each kernel's cubin with its launch) and, per kernel, the names
the lowering gave it and its buffers: an entry that does not match the program lowered now is
deleted and the graph compiled as if it were not there. Kernels alike (program.py's
`structure_key`) are one function in the entry, as in the build. A CUDA graph (cuda_graph.py) is
made of the loaded kernels as of built ones: both are CUDAExecutables with their image and launch.

Entries lie in $TENSORFORGE_CACHE_DIR/graphs (the kernel disk cache's folder, runtime/
disk_cache.py, whose settings apply: TENSORFORGE_CACHE=0 turns this cache off too, and the
least recently used entries go past TENSORFORGE_CACHE_MAX_MB); the first level keyed on
Dynamo's graph (front_cache.py) lies beside them. Writing a CPU entry makes object code of
every distinct kernel and links it (about 3 s for ResNet-18 here): it is done as the compile
ends, not in the background, so it never shares the CPUs with the compiled model's first calls
(a benchmark's timing included). Graphs are cached where their kernels can run: a CUDA build
on a machine without a GPU (code generation alone) writes no entry.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import torch

from tensorforge.errors import TensorForgeError
from tensorforge.graph.lowered import KernelSpec, Program
from tensorforge.graph.options import Float32Precision
from tensorforge.runtime import disk_cache, library_file
from tensorforge.runtime.device import Device
from tensorforge.runtime.native_call import num_threads
from tensorforge.runtime.registry import runtime_for

FORMAT = 3  # bump when the entry's layout or what the key covers changes
_SETTINGS_IGNORED = (
    "TENSORFORGE_CACHE",
    "TENSORFORGE_GRAPH_STRICT",
    "TENSORFORGE_CUDA_GRAPH",
    "TENSORFORGE_BUILD_JOBS",  # (the same kernels, however many processes build them)
)


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    rejected: int = 0
    write_errors: int = 0
    last_error: str = ""


STATS = Stats()


def enabled(target) -> bool:
    """Cache graphs for `target`? Where its kernels can run (module docstring)."""
    return disk_cache.enabled() and Device(runtime_for(target.kind).device, 0).exist


def graphs_dir() -> str:
    return os.path.join(disk_cache.cache_dir(), "graphs")


# -- the key --------------------------------------------------------------------------------------
def graph_key(
    gm: torch.fx.GraphModule,
    constants: dict,
    target,
    tuning_log: str | None = None,
    schedule: str = "auto",
    precision: Float32Precision | None = None,
) -> str:
    """The hash naming the entry of this ATen graph compiled for `target` with these options
    and float32 `precision` (options.Float32Precision; None: exact), module docstring."""
    parts = [*options_parts(target, tuning_log, schedule, precision), gm.code]
    for node in gm.graph.nodes:
        parts += [node.op, node.name, node.target, _value_signature(node.meta.get("val"))]
        if node.op == "get_attr":
            parts.append(_value_signature(getattr(gm, node.target, None)))
    parts.append("constants")
    parts += sorted(constants)
    parts += [_value_signature(constants[k]) for k in sorted(constants)]
    return digest_of(parts)


def options_parts(
    target, tuning_log: str | None, schedule: str, precision: Float32Precision | None = None
) -> list:
    """What a key holds besides the graph: formats, versions, target, options, torch's float32
    precision flags (TF32) and settings."""
    settings = sorted(
        (k, v)
        for k, v in os.environ.items()
        if k.startswith("TENSORFORGE_") and not k.startswith(_SETTINGS_IGNORED)
    )
    tuning = _file_digest(tuning_log) if tuning_log else ""
    version = library_file.tensorforge_version()
    # the first guess plans its parallel loops for the build's thread count (none for 1)
    threads = num_threads()
    return [
        *("format", FORMAT, version, source_fingerprint(), target),
        *("tuning", tuning, "schedule", schedule, "settings", *settings, "threads", threads),
        *("float32", precision or Float32Precision()),
    ]


def digest_of(parts: list) -> str:
    digest = hashlib.sha256()
    for item in parts:
        digest.update(str(item).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _value_signature(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"T{tuple(str(s) for s in value.shape)}{value.dtype}{value.device.type}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_value_signature(v) for v in value) + ")"
    if isinstance(value, (int, float, bool, str, torch.SymInt, torch.SymFloat)) or value is None:
        return f"{type(value).__name__}:{value}"
    return type(value).__name__


def _file_digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return f"unreadable:{path}"


_FINGERPRINT: str | None = None


def source_fingerprint() -> str:
    """A hash of tensorforge's source files (path, size, mtime): an edited compiler never
    loads a graph the old one compiled (the version string alone would not change)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        digest = hashlib.sha256()
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    info = os.stat(path)
                    rel = os.path.relpath(path, root)
                    digest.update(f"{rel}:{info.st_size}:{info.st_mtime_ns}\0".encode())
        _FINGERPRINT = digest.hexdigest()
    return _FINGERPRINT


# -- loading --------------------------------------------------------------------------------------
def entry_path(key: str) -> str:
    return os.path.join(graphs_dir(), f"{key}.tflib")


def load(key: str, program: Program, target) -> list | None:
    """The program's steps with every kernel loaded from the entry `key`, or None (a miss)."""
    from tensorforge.graph.program import BuiltKernel, plan_from
    from tensorforge.runtime.module import Module

    path = entry_path(key)
    try:
        file = library_file.read(path)
    except TensorForgeError:
        if os.path.exists(path):  # there but damaged: never loaded
            _reject(path)
        STATS.misses += 1
        return None
    specs = [s for s in program.steps if isinstance(s, KernelSpec)]
    meta = file.metadata
    kernels = meta.get("graph_kernels")
    if (
        meta.get("graph_key") != key
        or meta.get("kind") != target.kind
        or not isinstance(kernels, list)
        or [k.get("fingerprint") for k in kernels] != [kernel_fingerprint(s) for s in specs]
    ):
        _reject(path)
        STATS.misses += 1
        return None
    try:
        loaded = runtime_for(target.kind).load_library(file)
    except TensorForgeError:
        _reject(path)
        STATS.misses += 1
        return None
    by_entry = {source.entry: (source, executable) for source, executable in loaded}
    built, at = [], 0
    for step in program.steps:
        if not isinstance(step, KernelSpec):
            built.append(step)
            continue
        info = kernels[at]
        at += 1
        source, executable = by_entry[info["entry"]]
        module = Module([(source, executable)], target)
        positions = info["positions"]
        plan = plan_from(step, positions)
        built.append(
            BuiltKernel(step, executable.call, plan, info["rule"], module, executable, positions)
        )
    STATS.hits += 1
    try:
        os.utime(path)  # least recently used goes first: a hit makes the entry recent
    except OSError:
        pass
    return built


def kernel_fingerprint(spec: KernelSpec) -> str:
    """What of a kernel the entry must agree with: its name and its buffers' names and shapes."""
    buffers = [*spec.reads, *spec.written]
    return spec.name + "|" + ";".join(f"{b.name}{[str(s) for s in b.shape]}" for b in buffers)


def _evict(folder: str, limit: int) -> None:
    """Delete the least recently used entries until the folder holds at most `limit` bytes
    (TENSORFORGE_CACHE_MAX_MB, as for the kernels': each an edited compiler leaves behind)."""
    entries, total = [], 0
    for entry in os.scandir(folder):
        if entry.name.endswith((".tflib", ".front")) and not entry.name.startswith("."):
            try:
                info = entry.stat()
            except OSError:
                continue
            entries.append((info.st_mtime, info.st_size, entry.path))
            total += info.st_size
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        try:
            os.unlink(path)
        except OSError:
            pass
        total -= size


def _reject(path: str) -> None:
    STATS.rejected += 1
    try:
        os.unlink(path)
    except OSError:
        pass


# -- storing --------------------------------------------------------------------------------------
def store(key: str, steps: list, target) -> None:
    """Write the entry of these built steps (object code of each kernel, linked: seconds)."""
    from tensorforge.graph.program import BuiltKernel

    kernels = [s for s in steps if isinstance(s, BuiltKernel)]
    if not kernels:
        return
    functions, seen, described = [], set(), []
    for k in kernels:
        function = k.module[k.module.entry_name]
        if function.name not in seen:
            seen.add(function.name)
            functions.append(function)
        described.append(
            {
                "fingerprint": kernel_fingerprint(k.spec),
                "entry": function.name,
                "rule": k.source,
                "positions": k.positions,
            }
        )
    _write(entry_path(key), key, functions, target, described)


def _write(path: str, key: str, functions: list, target, described: list) -> None:
    try:
        metadata = {"target": str(target), "graph_key": key, "graph_kernels": described}
        data = runtime_for(target.kind).export_library(functions, target, metadata)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        library_file.write_atomically(path, data)
        STATS.writes += 1
        _evict(os.path.dirname(path), disk_cache.max_bytes())
    except Exception as err:  # noqa: BLE001 - the cache is best effort, never an error
        STATS.write_errors += 1
        STATS.last_error = f"{type(err).__name__}: {err}"
