"""The backend's options (API.md §9): `torch.compile(m, backend="tensorforge", options={...})`,
and the float32 precision torch's flags ask for (read when a graph is compiled)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from tensorforge.errors import ArgumentError

SCHEDULES = ("auto", "rules", "first_guess")


@dataclass(frozen=True)
class Options:
    """target: "llvm" (the host CPU) or "cuda" (default: where the inputs live);
    tuning_log: a tuning log applied while the kernels are built; check: compare every kernel
    with eager torch and report the largest error; report: print the kernels (fused operators,
    schedule source, time) and the fallbacks after the first call; schedule: where a kernel
    with no tuning record gets its schedule: "auto" (the auto-scheduler's first guess, except
    where the rules' schedule is better: matmul anchors, transposes, softmax over rows of whole
    vectors, layer norms of gathered rows; schedules.py's _hand_scheduled), "rules"
    (the graph layer's rule-based schedules, schedules.py), "first_guess" (always the first
    guess, where it applies: CPU kernels with static sizes)."""

    target: str | None = None
    tuning_log: str | None = None
    check: bool = False
    report: bool = False
    # check: the relative error (max abs error / max abs value) past which a kernel is named;
    # a float16 / bfloat16 kernel's is at least 4 of its dtype's eps (report.HALF_ROUNDINGS),
    # a float32 one's in a graph with TF32 products 4 of TF32's (2^-10)
    tolerance: float = 1e-4
    schedule: str = "auto"

    @staticmethod
    def of(options: dict | None) -> Options:
        options = dict(options or {})
        known = {f.name for f in fields(Options)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ArgumentError(
                f"torch.compile(backend='tensorforge'): unknown option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        schedule = options.get("schedule", "auto")
        if schedule not in SCHEDULES:
            raise ArgumentError(
                f"torch.compile(backend='tensorforge'): options['schedule'] is {schedule!r}; "
                f"known: {', '.join(SCHEDULES)}"
            )
        return Options(**options)


@dataclass(frozen=True)
class Float32Precision:
    """Where float32 products may run in TF32 on tensor cores (CUDA sm_80+: 10-bit mantissas,
    float32 accumulation), as torch's own kernels do: convolutions while
    `torch.backends.cudnn.allow_tf32` (True by default), matrix products (mm, addmm, bmm,
    linear) while `torch.backends.cuda.matmul.allow_tf32` (`set_float32_matmul_precision`
    "high" or "medium"); on torch 2.9+ the same as its per-operator settings say them
    (`torch.backends.cudnn.conv.fp32_precision`, `torch.backends.cuda.matmul.fp32_precision`:
    "tf32"), which both APIs set. Read when a graph is compiled, and part of its cache key: a
    graph compiled under other flags never loads this one's kernels (Dynamo's own guard
    recompiles a model when the matmul flag flips, not the cuDNN one). The default, both
    off, is exact float32."""

    conv_tf32: bool = False
    matmul_tf32: bool = False

    @staticmethod
    def of(target) -> Float32Precision:
        """torch's flags now, for a CUDA target (elsewhere float32 is float32: both off)."""
        if target.kind != "cuda":
            return Float32Precision()
        import torch

        backends = torch.backends
        conv = getattr(backends.cudnn, "conv", None)
        if conv is not None and hasattr(backends.cuda.matmul, "fp32_precision"):
            # torch 2.9+: the legacy flags' getters raise once the new API has set either
            return Float32Precision(
                conv_tf32=conv.fp32_precision == "tf32",
                matmul_tf32=backends.cuda.matmul.fp32_precision == "tf32",
            )
        return Float32Precision(
            conv_tf32=bool(backends.cudnn.allow_tf32),
            matmul_tf32=bool(backends.cuda.matmul.allow_tf32),
        )
