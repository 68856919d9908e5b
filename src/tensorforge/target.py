"""Target: what the code is generated for (CPU model and features, or GPU architecture)."""

from __future__ import annotations

import functools
import shlex
import threading

from tensorforge.errors import TargetError

_current = threading.local()


@functools.lru_cache(maxsize=1)
def host_cpu() -> tuple[str, str]:
    """(cpu name, feature string) of this machine as LLVM sees it."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


@functools.cache
def _llvm_rejects(cpu: str, features: str) -> str:
    """LLVM's complaints about a CPU name or feature string ('' when it knows them).

    NOTE: LLVM only prints "not a recognized processor" and goes on with a generic CPU, which
    later aborts the process in codegen; the warning is caught from fd 2 here instead.
    """
    import os
    import sys
    import tempfile

    import llvmlite.binding as llvm

    host_cpu()  # initializes LLVM's native target
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        lines = captured.read().decode(errors="replace").splitlines()
    return "; ".join(dict.fromkeys(line for line in lines if "not a recognized" in line))


_AVX512 = "+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx2,+fma,+avx,+sse4.2"
_AVX2 = "+avx2,+fma,+avx,+sse4.2"
_VECTOR_FEATURES = {  # what a named x86 CPU has that the schedules and math look at
    **dict.fromkeys(
        (
            "skylake-avx512",
            "cascadelake",
            "cooperlake",
            "cannonlake",
            "icelake-client",
            "icelake-server",
            "tigerlake",
            "rocketlake",
            "sapphirerapids",
            "emeraldrapids",
            "graniterapids",
            "znver4",
            "znver5",
            "x86-64-v4",
        ),
        _AVX512,
    ),
    **dict.fromkeys(
        (
            "haswell",
            "broadwell",
            "skylake",
            "alderlake",
            "raptorlake",
            "meteorlake",
            "arrowlake",
            "znver1",
            "znver2",
            "znver3",
            "x86-64-v3",
        ),
        _AVX2,
    ),
}


def enabled_features(features: str) -> frozenset[str]:
    """The features an LLVM feature string turns on: "+avx2,-avx512f,+fma" -> {avx2, fma}."""
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


def _implied_features(mcpu: str) -> str:
    """The vector features of a CPU named with -mcpu and no -mattr, so that `Target("llvm
    -mcpu=skylake-avx512")` schedules for 512-bit vectors as TVM users expect ('' if unknown:
    LLVM still uses all of the CPU's features in code generation)."""
    return _VECTOR_FEATURES.get(mcpu, "")


class Target:
    """A compilation target: `Target("llvm")`, `Target("llvm -mcpu=znver3")`, `Target("cuda -arch=sm_90")`.

    "llvm" means the host CPU with all its features; "cuda" without -arch detects the device's
    architecture (or falls back to sm_90 where no GPU is present). Usable as a context manager,
    which makes it `Target.current()`.
    """

    def __init__(self, spec: str | Target = "llvm"):
        if isinstance(spec, Target):
            spec = str(spec)
        if not isinstance(spec, str) or not spec.strip():
            raise TargetError(f"Target: expected a string such as 'llvm' or 'cuda', got {spec!r}")
        words = shlex.split(spec)
        self.kind = {"c": "llvm", "cpu": "llvm", "nvidia": "cuda"}.get(words[0], words[0])
        if self.kind not in ("llvm", "cuda"):
            raise TargetError(
                f"Target {spec!r}: unknown kind {words[0]!r}; expected 'llvm' or 'cuda'"
            )
        self.options: dict[str, str] = {}
        for w in words[1:]:
            if not w.startswith("-") or "=" not in w:
                raise TargetError(f"Target {spec!r}: option {w!r} should look like -key=value")
            key, value = w.lstrip("-").split("=", 1)
            self.options[key] = value
        if self.kind == "llvm":
            name, features = host_cpu()
            self.mcpu = self.options.get("mcpu", name)
            implied = features if self.mcpu == name else _implied_features(self.mcpu)
            self.features = self.options.get("mattr", implied)
            self.arch = ""
            if "mcpu" in self.options or "mattr" in self.options:
                complaint = _llvm_rejects(self.mcpu, self.features)
                if complaint:
                    raise TargetError(f"Target {spec!r}: LLVM says {complaint}")
        else:
            self.mcpu, self.features = "", ""
            self.arch = self.options.get("arch") or _detect_cuda_arch()

    # -- properties used by codegen and schedules ------------------------------------------------
    @property
    def vector_bits(self) -> int:
        """Width of the widest float vector register (512 with AVX-512, 256 with AVX2, ...)."""
        if self.kind != "llvm":
            return 128
        feats = self.cpu_features
        if "avx512f" in feats:
            return 512
        if "avx" in feats or "avx2" in feats:
            return 256
        return 128

    @property
    def cpu_features(self) -> frozenset[str]:
        """The CPU features the code may use, by LLVM's names ("avx512f"); empty for GPUs."""
        return enabled_features(self.features)

    def vector_lanes(self, dtype: str = "float32") -> int:
        from tensorforge.te.dtype import bits_of

        return max(1, self.vector_bits // bits_of(dtype))

    @property
    def max_threads_per_block(self) -> int:
        return 1024

    def __str__(self) -> str:
        if self.kind == "llvm":
            return f"llvm -mcpu={self.mcpu} -mattr={self.features}"
        return f"cuda -arch={self.arch}"

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Target) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    # -- context --------------------------------------------------------------------------------
    def __enter__(self) -> Target:
        stack = getattr(_current, "stack", [])
        stack.append(self)
        _current.stack = stack
        return self

    def __exit__(self, *exc) -> None:
        _current.stack.pop()

    @staticmethod
    def current(allow_none: bool = True) -> Target | None:
        stack = getattr(_current, "stack", [])
        if stack:
            return stack[-1]
        if allow_none:
            return None
        raise TargetError("no target in scope: use `with tf.Target(...):`")


def _detect_cuda_arch() -> str:
    try:
        import pycuda.driver as cuda  # noqa: F401 - only to see whether a GPU is usable

        cuda.init()
        major, minor = cuda.Device(0).compute_capability()
        return f"sm_{major}{minor}"
    except Exception:
        return "sm_90"


def as_target(target: str | Target | None) -> Target:
    if target is None:
        return Target.current() or Target("llvm")
    return target if isinstance(target, Target) else Target(target)
