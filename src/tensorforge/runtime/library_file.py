"""The one-file container of exported kernels: payload, JSON metadata, a checked trailer.

    [payload bytes][metadata: UTF-8 JSON][trailer: metadata length (u64 LE), sha256, MAGIC]

For llvm the payload is a shared library that starts at byte 0, so the file itself is a loadable
ELF object (the loader reads only what the ELF headers point at; the rest rides along). For
cuda the payload is the functions' kernel images one after another. The sha256 covers payload
and metadata: a truncated or damaged file is refused before anything in it is loaded or run,
and what is loaded is the checked bytes themselves (shared_lib.py), not the file again.
Metadata says where each function's image lies (`blob`: offset, size) and how to call it; a
CUDA function of several kernels lists them (`kernels`, each with its launch) and the device
buffers the host allocates between them (`intermediates`): its one image holds every kernel.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import sys
import tempfile
from dataclasses import dataclass

from tensorforge.codegen.base import KernelSource, Launch, Param, TensorMap
from tensorforge.errors import ArgumentError, BuildError

FORMAT = "tensorforge-library"
FORMAT_VERSION = 2  # 2: typed KernelSource fields (num_threads_symbol, vector_alignment)
MAGIC = b"TFLIB\x00v2"  # the last 8 bytes of every file; the version is in it too
_TRAILER = struct.Struct("<Q32s8s")  # metadata length, sha256 of everything before, MAGIC


@dataclass(frozen=True)
class LibraryFile:
    """A container read and checked: where it came from, its metadata and its payload."""

    path: str
    metadata: dict
    payload: bytes

    def blob(self, function: dict) -> bytes:
        offset, size = function["blob"]
        return self.payload[offset : offset + size]


def tensorforge_version() -> str:
    # NOTE: read, not imported: the runtime layer does not import the package (STYLE.md §1).
    return getattr(sys.modules.get("tensorforge"), "__version__", "unknown")


def pack(payload: bytes, metadata: dict) -> bytes:
    """The file's bytes: `payload`, then `metadata` (format and version stamps added)."""
    metadata = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tensorforge_version": tensorforge_version(),
        **metadata,
    }
    try:
        text = json.dumps(metadata, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as err:
        raise BuildError(f"export: the calling metadata cannot be saved as JSON: {err}") from None
    body = payload + text
    return body + _TRAILER.pack(len(text), hashlib.sha256(body).digest(), MAGIC)


def write_atomically(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`.

    Readers see the old file or the whole new one, never a part (also across processes).
    """
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".tflib")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def read(path: str | os.PathLike) -> LibraryFile:
    """Read and check the container at `path`; ArgumentError if it is not a whole one."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ArgumentError(f"load_module: no such file: {path}") from None
    except OSError as err:
        raise ArgumentError(f"load_module: cannot read {path}: {err.strerror}") from None
    metadata, payload = _check(path, data)
    return LibraryFile(path, metadata, payload)


def _check(path: str, data: bytes) -> tuple[dict, bytes]:
    not_ours = f"load_module: {path} is not a tensorforge library"
    if len(data) < _TRAILER.size:
        raise ArgumentError(f"{not_ours} (only {len(data)} bytes: empty or truncated)")
    length, digest, magic = _TRAILER.unpack(data[-_TRAILER.size :])
    if magic != MAGIC:
        if magic[:6] == MAGIC[:6]:
            raise ArgumentError(
                f"load_module: {path} is a tensorforge library of another format "
                f"({magic[6:].decode(errors='replace')}); this tensorforge reads "
                f"{MAGIC[6:].decode()}: export it again with this version"
            )
        raise ArgumentError(
            f"{not_ours} (no tensorforge trailer at its end: another kind of file, or a "
            f"truncated one)"
        )
    body = data[: -_TRAILER.size]
    if length > len(body) or hashlib.sha256(body).digest() != digest:
        raise ArgumentError(
            f"load_module: {path} is damaged (its checksum does not match: truncated or "
            f"modified after it was written); export it again"
        )
    try:
        metadata = json.loads(body[len(body) - length :])
    except ValueError as err:
        raise ArgumentError(f"load_module: {path} has unreadable metadata: {err}") from None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise ArgumentError(f"{not_ours} (its metadata names no tensorforge format)")
    if metadata.get("format_version") != FORMAT_VERSION:
        raise ArgumentError(
            f"load_module: {path} has library format {metadata.get('format_version')!r} "
            f"(written by tensorforge {metadata.get('tensorforge_version')}); this tensorforge "
            f"reads format {FORMAT_VERSION}: export it again with this version"
        )
    return metadata, body[: len(body) - length]


# -- KernelSource <-> JSON ------------------------------------------------------------------------
def source_to_json(source: KernelSource) -> dict:
    """Everything about calling `source` except its text (entry, params, launch, target...)."""
    return {
        "target": source.target,
        "entry": source.entry,
        "params": [dataclasses.asdict(p) for p in source.params],
        "launch": dataclasses.asdict(source.launch) if source.launch is not None else None,
        "target_string": source.target_string,
        "num_threads_symbol": source.num_threads_symbol,
        "vector_alignment": [list(pair) for pair in source.vector_alignment],
        "symbol": source.symbol,
        "kernels": [source_to_json(k) for k in source.kernels],
        "intermediates": [dataclasses.asdict(p) for p in source.intermediates],
        "tensor_maps": [dataclasses.asdict(m) for m in source.tensor_maps],
    }


def source_from_json(data: dict, text: str) -> KernelSource:
    """The KernelSource `source_to_json` saved, with `text` as its text."""
    try:
        params = _params_from_json(data["params"])
        launch = data["launch"]
        if launch is not None:
            launch = Launch(
                grid=tuple(launch["grid"]),
                block=tuple(launch["block"]),
                shared_bytes=int(launch["shared_bytes"]),
            )
        return KernelSource(
            target=data["target"],
            entry=data["entry"],
            text=text,
            params=params,
            launch=launch,
            target_string=data["target_string"],
            num_threads_symbol=data["num_threads_symbol"],
            vector_alignment=tuple((str(n), int(b)) for n, b in data["vector_alignment"]),
            symbol=str(data.get("symbol", "")),
            kernels=tuple(source_from_json(k, text) for k in data.get("kernels", ())),
            intermediates=_params_from_json(data.get("intermediates", ())),
            tensor_maps=tuple(TensorMap(**m) for m in data.get("tensor_maps", ())),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ArgumentError(f"load_module: a function's metadata is incomplete ({err!r})") from None


def _params_from_json(data: list[dict]) -> tuple[Param, ...]:
    return tuple(
        Param(
            name=p["name"],
            kind=p["kind"],
            dtype=p["dtype"],
            shape=tuple(p["shape"]),
            bound_from_shape=bool(p["bound_from_shape"]),
            written=bool(p.get("written", False)),
        )
        for p in data
    )
