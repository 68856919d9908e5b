"""Target: what the code is generated for (CPU model and features, or GPU architecture)."""

from __future__ import annotations

import functools
import re
import shlex
import threading
from dataclasses import dataclass

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
_VNNI = _AVX512 + ",+avx512vnni"
_BF16 = _VNNI + ",+avx512bf16"
_AMX = _BF16 + ",+amx-tile,+amx-int8,+amx-bf16"
# what a named x86 CPU has that the schedules, the math and the dot-product kernels look at
_VECTOR_FEATURES = {
    **dict.fromkeys(("skylake-avx512", "cannonlake", "x86-64-v4"), _AVX512),
    **dict.fromkeys(
        ("cascadelake", "icelake-client", "icelake-server", "tigerlake", "rocketlake"), _VNNI
    ),
    **dict.fromkeys(("cooperlake", "znver4", "znver5"), _BF16),
    **dict.fromkeys(("sapphirerapids", "emeraldrapids", "graniterapids"), _AMX),
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


# per-core L1 data cache and L2 of named CPUs, in KiB (this host's are read from the OS)
_CACHE_KIB = {
    **dict.fromkeys(("haswell", "broadwell", "skylake"), (32, 256)),
    **dict.fromkeys(("skylake-avx512", "cascadelake", "cooperlake"), (32, 1024)),
    **dict.fromkeys(("icelake-client", "rocketlake"), (48, 512)),
    **dict.fromkeys(("icelake-server", "tigerlake", "alderlake", "raptorlake"), (48, 1280)),
    **dict.fromkeys(("sapphirerapids", "emeraldrapids", "graniterapids"), (48, 2048)),
    **dict.fromkeys(("znver1", "znver2", "znver3"), (32, 512)),
    "znver4": (32, 1024),
    "znver5": (48, 1024),
}


# CPUs whose AVX-512 instructions run as two 256-bit halves (one zmm FMA a cycle, the rate of
# two ymm ones): their register tiles follow AVX2's shapes, in zmm registers
_DOUBLE_PUMPED_AVX512 = ("znver4",)


@functools.cache
def host_cache_bytes() -> tuple[int, int] | None:
    """(L1 data, L2) bytes of one core of this machine, from Linux's sysfs; None elsewhere."""
    import glob
    import os

    sizes: dict[str, int] = {}
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(index, "level")) as f:
                level = f.read().strip()
            with open(os.path.join(index, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(index, "size")) as f:
                text = f.read().strip()
        except OSError:
            continue
        scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
        if text.rstrip("KM").isdigit() and kind in ("Data", "Unified"):
            sizes[level] = int(text.rstrip("KM")) * scale
    if "1" not in sizes or "2" not in sizes:
        return None
    return sizes["1"], sizes["2"]


def vector_bits_of(features: frozenset[str]) -> int:
    """The widest float vector register of an x86 CPU with `features` (LLVM names)."""
    if "avx512f" in features:
        return 512
    if "avx" in features or "avx2" in features:
        return 256
    return 128


def enabled_features(features: str) -> frozenset[str]:
    """The features an LLVM feature string turns on: "+avx2,-avx512f,+fma" -> {avx2, fma}."""
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


def _implied_features(mcpu: str) -> str:
    """The vector features of a CPU named with -mcpu and no -mattr, so that `Target("llvm
    -mcpu=skylake-avx512")` schedules for 512-bit vectors as TVM users expect ('' if unknown:
    LLVM still uses all of the CPU's features in code generation)."""
    return _VECTOR_FEATURES.get(mcpu, "")


@dataclass(frozen=True)
class KindFacts:
    """What one target kind is: where its kernels run and which -key=value options it takes."""

    device: str  # "cpu" | "cuda": the device kind its kernels run on
    options: tuple[str, ...]  # the options a target string of this kind may carry
    description: str
    # its kernels compute in bfloat16 themselves; if not, the pipeline computes bfloat16 in
    # float32 (legalize_bfloat16) and codegen only converts between the two
    bfloat16_arithmetic: bool = False


# NOTE: a backend's Target entry: one line here (its codegen sits in codegen.CODEGENS and its
# runtime in runtime.registry.RUNTIMES, under the same name).
KINDS: dict[str, KindFacts] = {
    "llvm": KindFacts("cpu", ("mcpu", "mattr", "mtriple"), "this CPU, through LLVM IR"),
    "cuda": KindFacts(
        "cuda", ("arch",), "an NVIDIA GPU, through CUDA C and nvcc", bfloat16_arithmetic=True
    ),
    "c": KindFacts("cpu", ("mcpu", "mattr", "mtriple"), "this CPU, through C and the system cc"),
}
_ALIASES = {"cpu": "llvm", "nvidia": "cuda"}  # other spellings of a kind
_ARCH = re.compile(r"sm_([1-9][0-9]{1,2})a?")  # sm_90, sm_90a, sm_120


class TargetKind(str):
    """A target kind: its name (`kind == "llvm"` works as for the string) and its facts.

    `target.kind.name` is TVM's spelling of the name; `.device` is "cpu" or "cuda".
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self)

    @property
    def facts(self) -> KindFacts:
        return KINDS[self]

    @property
    def device(self) -> str:
        return KINDS[self].device

    @property
    def is_gpu(self) -> bool:
        return self.device != "cpu"


class Target:
    """A compilation target: `Target("llvm")`, `Target("llvm -mcpu=znver3")`, `Target("cuda -arch=sm_90")`.

    "llvm" means the host CPU with all its features; "cuda" without -arch detects the device's
    architecture (or falls back to sm_90 where no GPU is present). `host` is the CPU target of
    the host side (TVM's `Target(target, host)`). Usable as a context manager, which makes it
    `Target.current()`. A string it cannot honor (an unknown kind or option, another machine's
    -mtriple, a malformed -arch) raises TargetError.
    """

    def __init__(self, spec: str | Target = "llvm", host: str | Target | None = None):
        if isinstance(spec, Target):
            host = spec.host if host is None else host
            spec = str(spec)
        if not isinstance(spec, str) or not spec.strip():
            raise TargetError(f"Target: expected a string such as 'llvm' or 'cuda', got {spec!r}")
        try:
            words = shlex.split(spec)
        except ValueError as err:
            raise TargetError(f"Target {spec!r}: cannot be split into words ({err})") from None
        name = _ALIASES.get(words[0], words[0])
        if name not in KINDS:
            raise TargetError(
                f"Target {spec!r}: unknown kind {words[0]!r}; expected one of "
                f"{', '.join(repr(k) for k in KINDS)}"
            )
        self.kind = TargetKind(name)
        self.options: dict[str, str] = {}
        for w in words[1:]:
            if not w.startswith("-") or "=" not in w:
                raise TargetError(f"Target {spec!r}: option {w!r} should look like -key=value")
            key, value = w.lstrip("-").split("=", 1)
            if key not in self.kind.facts.options:
                known = ", ".join(f"-{o}" for o in self.kind.facts.options)
                raise TargetError(
                    f"Target {spec!r}: unknown option '-{key}' for kind '{name}' (it takes {known})"
                )
            self.options[key] = value
        if self.kind.is_gpu:
            self.mcpu, self.features = "", ""
            self.arch = self.options.get("arch") or _detect_cuda_arch()
            if not _ARCH.fullmatch(self.arch):
                raise TargetError(
                    f"Target {spec!r}: -arch={self.arch} is not a GPU architecture; "
                    f"expected sm_XY, e.g. sm_80 or sm_90"
                )
        else:
            _check_triple(spec, self.options.get("mtriple"))
            cpu_name, features = host_cpu()
            self.mcpu = self.options.get("mcpu", cpu_name)
            implied = features if self.mcpu == cpu_name else _implied_features(self.mcpu)
            self.features = self.options.get("mattr", implied)
            self.arch = ""
            if "mcpu" in self.options or "mattr" in self.options:
                complaint = _llvm_rejects(self.mcpu, self.features)
                if complaint:
                    raise TargetError(f"Target {spec!r}: LLVM says {complaint}")
        self.host: Target | None = None
        if host is not None:
            self.host = host if isinstance(host, Target) else Target(host)
            if self.host.is_gpu:
                raise TargetError(f"Target {spec!r}: host {self.host} is not a CPU target")

    # -- facts used by codegen, runtime and schedules ---------------------------------------------
    @staticmethod
    def list_kinds() -> list[str]:
        """The kinds a target string may start with (TVM's `Target.list_kinds()`)."""
        return list(KINDS)

    @property
    def device_kind(self) -> str:
        """ "cpu" or "cuda": the kind of device the kernels run on."""
        return self.kind.device

    @property
    def is_gpu(self) -> bool:
        return self.kind.is_gpu

    @property
    def vector_bits(self) -> int:
        """Width of the widest float vector register (512 with AVX-512, 256 with AVX2, ...)."""
        return 128 if self.is_gpu else vector_bits_of(self.cpu_features)

    @property
    def vector_datapath_bits(self) -> int:
        """Width of the vector units' datapath: `vector_bits`, but 256 on a CPU that runs
        512-bit instructions as two halves (Zen 4)."""
        if self.vector_bits > 256 and self.mcpu in _DOUBLE_PUMPED_AVX512:
            return 256
        return self.vector_bits

    @property
    def cpu_features(self) -> frozenset[str]:
        """The CPU features the code may use, by LLVM's names ("avx512f"); empty for GPUs."""
        return enabled_features(self.features)

    @property
    def cache_bytes(self) -> tuple[int, int]:
        """(L1 data, L2) bytes of one core: this host's as the OS reports them, a named CPU's
        from a table, else the smallest of its vector width's CPUs (32 KiB; L2 1 MiB with
        AVX-512, 512 KiB below). Schedules size their blocks by them."""
        if self.is_gpu:
            raise TargetError(f"Target {self}: cache sizes are facts of a CPU target")
        if (self.mcpu, self.features) == host_cpu():
            measured = host_cache_bytes()
            if measured:
                return measured
        l1, l2 = _CACHE_KIB.get(self.mcpu, (32, 1024 if self.vector_bits >= 512 else 512))
        return l1 * 1024, l2 * 1024

    def vector_lanes(self, dtype: str = "float32") -> int:
        from tensorforge.te.dtype import bits_of

        return max(1, self.vector_bits // bits_of(dtype))

    @property
    def max_threads_per_block(self) -> int:
        return 1024

    # -- GPU facts (CUDA, every architecture since sm_70 unless the table says otherwise) --------
    @property
    def warp_size(self) -> int:
        return 32

    @property
    def registers_per_thread(self) -> int:
        """The most 32-bit registers one thread may hold."""
        return 255

    @property
    def max_shared_memory_per_block(self) -> int:
        """Bytes of shared memory a block gets without opting in to more (static arrays)."""
        return 48 * 1024

    @property
    def sm_version(self) -> int:
        """The architecture's compute capability as a number (sm_90a: 90); 0 off CUDA."""
        match = re.match(r"sm_(\d+)", self.arch or "")
        return int(match.group(1)) if match else 0

    @property
    def max_shared_memory_opt_in(self) -> int:
        """Bytes of shared memory a block may have by opting in (dynamic shared memory:
        cudaDevAttrMaxSharedMemoryPerBlockOptin); the static 48 KiB on an architecture the table
        does not know. The CUDA code generator refuses a kernel past it."""
        return _SHARED_OPT_IN.get(self.sm_version, self.max_shared_memory_per_block)

    @property
    def sm_count(self) -> int:
        """Streaming multiprocessors of the usual part of this architecture (H100 SXM: 132,
        A100: 108); a schedule needs at least this many blocks to fill the GPU."""
        return _SM_COUNT.get(self.arch, 80)

    @property
    def max_threads_per_sm(self) -> int:
        """Threads one SM holds at once (2048 on sm_70, sm_80 and sm_90; fewer on sm_75, sm_86
        and sm_89); with sm_count, the threads a launch needs to fill the GPU."""
        return _THREADS_PER_SM.get(self.arch, 2048)

    def __str__(self) -> str:
        if self.is_gpu:
            return f"{self.kind} -arch={self.arch}"
        return f"{self.kind} -mcpu={self.mcpu} -mattr={self.features}"

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


# by compute capability (sm_90a: 90): 227, 163, 99, 96 or 64 KiB
_SHARED_OPT_IN = {
    70: 96 << 10, 72: 96 << 10, 75: 64 << 10, 80: 163 << 10, 86: 99 << 10, 87: 163 << 10,
    89: 99 << 10, 90: 227 << 10, 100: 227 << 10, 103: 227 << 10, 120: 99 << 10,
}  # fmt: skip
_SM_COUNT = {"sm_90": 132, "sm_90a": 132, "sm_89": 128, "sm_86": 84, "sm_80": 108, "sm_75": 72}
_THREADS_PER_SM = {"sm_89": 1536, "sm_86": 1536, "sm_75": 1024}


def _check_triple(spec: str, triple: str | None) -> None:
    """Refuse an -mtriple for another machine: code is generated for this one only."""
    if triple is None:
        return
    import llvmlite.binding as llvm

    host = llvm.get_process_triple()
    arch = {"amd64": "x86_64", "x86-64": "x86_64", "arm64": "aarch64"}
    wanted = arch.get(triple.split("-")[0], triple.split("-")[0])
    if wanted != arch.get(host.split("-")[0], host.split("-")[0]):
        raise TargetError(
            f"Target {spec!r}: -mtriple={triple} is another architecture than this machine's "
            f"({host}); tensorforge compiles for the machine it runs on"
        )


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
