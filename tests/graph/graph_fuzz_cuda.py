"""The graph fuzzer's random programs (graph_fuzz.py) run on a CUDA GPU: each compiled through
Dynamo for the GPU its inputs are on and compared with eager torch on that GPU, as
graph_fuzz_run.py compares them on the CPU (the same tolerances, the float32 reference of
bfloat16 programs, a second call at another size where the case is dynamic). Where
graph_fuzz_nvcc.py only compiles the kernels, this runs them: wrong answers, launch failures
and faults of the CUDA backend, on the odd shapes the fuzzer draws.

    python -m tests.graph.graph_fuzz_cuda --seed 0 --cases 200

TF32 is off (eager's cuDNN convolutions would use it by default), so float32 programs are held
to float32's tolerance. A program eager torch itself cannot run on the GPU is skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import Counter

import torch
import torch.nn.functional as F  # noqa: N812 (the generated source says F.)

from tests.graph import graph_fuzz_run
from tests.graph.graph_fuzz import HALF, Case, compile_source, generate, make_inputs


def _on_gpu(source: str) -> str:
    """The program with the tensors it makes itself (index lists) made on the GPU."""
    return source.replace("torch.tensor(", "_gpu_tensor(")


def _gpu_tensor(data, **kwargs):
    return torch.tensor(data, device="cuda", **kwargs)


def _compile_on_gpu(source: str):
    scope = {"torch": torch, "F": F, "H": HALF, "_gpu_tensor": _gpu_tensor}
    exec(_on_gpu(source), scope)  # noqa: S102 - the fuzzer's own generated program
    return scope["fn"]


def _inputs_on_gpu(case: Case, seed: int, shapes=None) -> list[torch.Tensor]:
    return [v.cuda() for v in make_inputs(case, seed, shapes)]


def _float32_reference_on_gpu(case: Case, outputs, values) -> list | None:
    if not any(s.dtype == HALF for s in case.inputs) and "H)" not in case.source(outputs):
        return None
    scope = {"torch": torch, "F": F, "H": torch.float32, "_gpu_tensor": _gpu_tensor}
    exec(_on_gpu(case.source(outputs)), scope)  # noqa: S102 - as above
    wide = [v.float() if v.dtype == HALF else v for v in values]
    result = scope["fn"](*wide)
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _resized_if_eager_accepts_on_cpu(case: Case, module) -> list | None:
    """graph_fuzz_run's resized inputs, where eager accepts the program at those sizes on the
    CPU first: on the GPU an index past a resized dimension is a device-side assert, which
    leaves the CUDA context unusable for every later case (a sweep shard ended in a CUDA error
    with each of its seeds passing alone), where the CPU raises an IndexError."""
    shapes = graph_fuzz_run.resized_shapes(case)
    if shapes is None:
        return None
    values, first = make_inputs(case, case.seed + 2, shapes), make_inputs(case, case.seed + 1)
    values = [o if s.constant and v.shape != o.shape else v for s, v, o in zip(case.inputs, values, first)]  # fmt: skip
    try:
        with torch.no_grad():
            compile_source(case.source())(*values)
    except Exception:  # noqa: BLE001 - the program does not generalize to that size
        return None
    return _RESIZED(case, module)


_RESIZED = graph_fuzz_run._resized


@contextlib.contextmanager
def on_gpu():
    """graph_fuzz_run's case runner with its inputs, index lists and reference on the GPU,
    TF32 off."""
    saved = (
        graph_fuzz_run.make_inputs,
        graph_fuzz_run.compile_source,
        graph_fuzz_run.float32_reference,
        graph_fuzz_run._resized,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
    )
    graph_fuzz_run._resized = _resized_if_eager_accepts_on_cpu
    graph_fuzz_run.make_inputs = _inputs_on_gpu
    graph_fuzz_run.compile_source = _compile_on_gpu
    graph_fuzz_run.float32_reference = _float32_reference_on_gpu
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        (
            graph_fuzz_run.make_inputs,
            graph_fuzz_run.compile_source,
            graph_fuzz_run.float32_reference,
            graph_fuzz_run._resized,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
        ) = saved


def runs_eagerly_on_gpu(case: Case) -> bool:
    """Whether eager torch runs the program on the GPU (some operators have no CUDA kernel for
    some dtypes; such programs are skipped)."""
    try:
        with torch.no_grad():
            _compile_on_gpu(case.source())(*_inputs_on_gpu(case, case.seed + 1))
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - eager's own limits: not the backend's to meet
        return False
    return True


def check(seed: int, minimize: bool = True) -> tuple[str, str]:
    """(kind, detail) of the seed's program on the GPU: "skip" where eager cannot run it."""
    case = generate(seed)
    with on_gpu():
        if not runs_eagerly_on_gpu(case):
            return "skip", ""
        outcome = graph_fuzz_run.run_case(case, "dynamo")
        if outcome.kind in ("ok", "suspect") or not minimize:
            return outcome.kind, outcome.detail
        outputs, outcome = graph_fuzz_run.minimize(case, "dynamo", outcome)
        return outcome.kind, f"{outcome.detail}\n{graph_fuzz_run.reproducer(case, outputs)}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz the torch.compile backend on a CUDA GPU")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--no-minimize", action="store_true")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("graph_fuzz_cuda: no CUDA GPU here (torch.cuda.is_available() is False)")
        return 2
    kinds: Counter = Counter()
    start = time.time()
    last = args.seed
    try:
        for last in range(args.seed, args.seed + args.cases):
            kind, detail = check(last, not args.no_minimize)
            kinds[kind] += 1
            if kind not in ("ok", "skip"):
                print(f"seed {last}: {kind}: {detail}", flush=True)
    except KeyboardInterrupt:
        print(f"\ninterrupted at seed {last}; resume with --seed {last} --cases "
              f"{args.seed + args.cases - last}")  # fmt: skip
        return 130
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    print(f"seeds {args.seed}-{last}: {summary} ({time.time() - start:.0f} s)")
    return 1 if kinds["wrong"] or kinds["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
