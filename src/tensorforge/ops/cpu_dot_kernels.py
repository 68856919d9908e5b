"""The C micro-kernels behind ops.cpu_dot's tensor intrinsics, and how they are compiled for a
Target: C[mr, nr] (+)= A[mr, kc] @ B on a row-major A and C and a B packed in VNNI panels
(`b[k / step][nr][step]`: the `step` = 4 (int8) / 2 (bfloat16) consecutive k of a column in one
32-bit lane, so 16 columns x step are one 64-byte vector and one row of an AMX B tile).

Four code paths, chosen by the target's features when compiled (and, for AMX, by the OS's
permission when first called): AVX-512 register tiles (`vpdpbusd` / `vdpbf16ps`: up to 6 rows
x 4 zmm accumulators, the B vectors loaded straight from the panel, A's k-quads / pairs
broadcast); AMX tiles (`tdpbusd` / `tdpbf16ps`: 2 x 2 16 x 16 accumulator tiles); for CPUs
without the dot instructions, register tiles of int8 widened to int16 `vpmaddwd` and bfloat16
shifted into float FMAs, on zmm (AVX-512) or ymm (AVX2) (512^3, 1 thread, against plain C:
znver3 int8 28.7 -> 2.4 ms, bf16 17.1 -> 2.8, fp32 GEMM 2.1; skylake-avx512 int8 28.3 -> 1.3,
bf16 15.0 -> 1.5, fp32 GEMM 1.1); plain C.
Each library's symbols carry a tag of its features (`tf_dot_int8_vnni_amx`), so libraries for
several targets can be loaded in one process. `tf_pack_*` lay B's rows out as the panels
(SSE2 unpacks: 4 / 2 rows interleaved per 16 columns).
"""

from __future__ import annotations

import functools
import re

from tensorforge.ops.cpu_dot_source import SOURCE
from tensorforge.target import Target, as_target, host_cpu

# the LLVM feature names that select a path in the C source (gcc takes them as -m<name>)
FEATURES = ("avx512vnni", "avx512bf16", "amx-tile", "amx-int8", "amx-bf16")


def features_of(target: Target | None = None) -> frozenset[str]:
    """The FEATURES that `target` (default: the current target, else this host) has."""
    target = as_target(target)
    return frozenset(f for f in FEATURES if f in target.cpu_features)


def march(target: Target | None = None) -> str:
    """gcc's -march for `target`: native for this host as it is (as the C backend does)."""
    target = as_target(target)
    name, features = host_cpu()
    return "native" if (target.mcpu, target.features) == (name, features) else target.mcpu


def vector_path(kind: str, target: Target | None = None) -> str:
    """The register-tile path the library compiled for `target` runs for `kind` ("int8" /
    "bfloat16") where AMX does not: its AVX-512 dot instruction's feature; without it, widened
    multiply-adds (int8) or FMAs (bfloat16) on zmm ("avx512bw" / "avx512f") or ymm ("avx2");
    else "plain C"."""
    features = as_target(target).cpu_features
    dot, wide = ("avx512vnni", "avx512bw") if kind == "int8" else ("avx512bf16", "avx512f")
    if dot in features and "avx512bw" in features:
        return dot
    if wide in features:
        return wide
    if "avx2" in features and "fma" in features:
        return "avx2"
    return "plain C"


def tag(target: Target | None = None) -> str:
    """The suffix of a library's symbols: its features and -march, e.g.
    '_avx512vnni_native' or '_skylake_avx512' (none of the features)."""
    names = [f.replace("-", "") for f in sorted(features_of(target))]
    return "_" + "_".join([*names, re.sub(r"[^0-9A-Za-z]", "_", march(target))])


def compile_options(target: Target | None = None) -> tuple[str, ...]:
    """Compiler flags for the micro-kernels: the target's CPU, each path's feature switched on
    or off as the target has it (whatever the CPU implies), and the symbols' tag."""
    from tensorforge.runtime.shared_lib import march_options

    target = as_target(target)
    have = features_of(target)
    switches = tuple(f"-m{'' if f in have else 'no-'}{f}" for f in FEATURES)
    cpu = march(target)
    arch = ["-march=native"] if cpu == "native" else march_options(cpu, target.cpu_features)
    return ("-O3", *arch, *switches, f"-DTF_TAG={tag(target)}")


def library(target: Target | None = None) -> str:
    """Compile and load the micro-kernels for `target` (default: the current target, else this
    host) once; the path."""
    return _library(as_target(target))


@functools.cache
def _library(target: Target) -> str:
    from tensorforge.runtime import compile_c

    return compile_c(SOURCE, compile_options(target))


def load(target: Target | None = None) -> str:
    """library(target), for kernels built afterwards; the symbols' tag."""
    library(target)
    return tag(target)


def amx_runs(kind: str, target: Target | None = None) -> bool:
    """Does the library's AMX path for `kind` ("int8" / "bfloat16") run on this host (compiled
    in, and the tile state granted by the OS)?"""
    import ctypes

    uses_amx = getattr(ctypes.CDLL(library(target)), "tf_dot_uses_amx" + tag(target))
    return bool(uses_amx(0 if kind == "int8" else 1))
