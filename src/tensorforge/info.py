"""`tensorforge info`: what this machine offers tensorforge."""

from __future__ import annotations

import os
import shutil


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return "not installed"


def collect_info() -> dict:
    import tensorforge
    from tensorforge.target import Target

    cpu = Target("llvm")
    info = {
        "tensorforge": tensorforge.__version__,
        "numpy": _version("numpy"),
        "llvmlite": _version("llvmlite"),
        "networkx": _version("networkx"),
        "xgboost": _version("xgboost")
        if _version("xgboost") != "not installed"
        else _version("xgboost-cpu"),
        "pycuda": _version("pycuda"),
        "cpu": cpu.mcpu,
        "vector_bits": cpu.vector_bits,
        "cpu_features": ",".join(f[1:] for f in cpu.features.split(",") if f.startswith("+")),
        "threads": int(os.environ.get("TF_NUM_THREADS", os.cpu_count() or 1)),
        "nvcc": shutil.which("nvcc") or "not found",
        "cache_dir": os.environ.get(
            "TENSORFORGE_CACHE_DIR", os.path.expanduser("~/.cache/tensorforge")
        ),
    }
    try:
        from tensorforge.runtime.cuda_driver import driver

        cuda = driver()
        dev = cuda.Device(0)
        major, minor = dev.compute_capability()
        info["cuda_device"] = f"{dev.name()} (sm_{major}{minor})"
    except Exception as exc:  # no pycuda, no driver or no GPU: DeviceError says which
        info["cuda_device"] = f"none ({str(exc).split(':')[0] if str(exc) else type(exc).__name__})"
    return info


def print_info() -> None:
    info = collect_info()
    width = max(len(k) for k in info)
    for key, value in info.items():
        print(f"{key:<{width}}  {value}")
