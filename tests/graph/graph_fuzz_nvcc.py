"""The graph fuzzer's random programs (graph_fuzz.py) built for CUDA targets and compiled by
nvcc, here, without a GPU: every kernel a program lowers to on sm_90 (wgmma, TMA-free) and
sm_80 (mma.sync) must generate CUDA that nvcc and ptxas accept (operands, registers, shared
memory). What runs on a GPU is the `-m cuda` tests'; this finds the kernels that would not
even load, on the odd shapes the fuzzer draws.

    python -m tests.graph.graph_fuzz_nvcc --seed 0 --cases 200
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import traceback
from pathlib import Path

import torch

from tests.graph.graph_fuzz import Case, compile_source, generate, make_inputs

ARCHES = ("sm_90a", "sm_80")


def cuda_modules(case: Case, arch: str) -> list:
    """The built modules of the case's program compiled for `arch` (the CUDA target's code,
    generated here: nothing is loaded)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions
    from tensorforge.graph.program import BuiltKernel

    fn = compile_source(case.source())
    values = make_inputs(case, case.seed + 1)
    with torch.no_grad():
        gm = make_fx(fn, decomposition_table=decompositions())(*values)
    known = {k: v for k, (s, v) in enumerate(zip(case.inputs, values)) if s.constant}
    target = f"cuda -arch={arch.rstrip('a')}"
    compiled = compile_aten(gm, values, known, Options(target=target))
    while not hasattr(compiled, "steps") and hasattr(compiled, "compiled"):  # (output views)
        compiled = compiled.compiled
    steps = getattr(compiled, "steps", [])  # (none: the whole graph runs eagerly)
    modules = {id(s.module): s.module for s in steps if isinstance(s, BuiltKernel)}
    return list(modules.values())


def nvcc_errors(modules: list, arch: str) -> str | None:
    """nvcc's complaint about the modules' CUDA sources, or None where all compile to cubins.
    One nvcc run for them all (`one_translation_unit`: nvcc's start-up dominated these checks,
    12 s for a graph's 30 kernels); where that fails, each module alone, naming the first
    that fails."""
    with tempfile.TemporaryDirectory() as tmp:
        if len(modules) > 1:
            joined = one_translation_unit([m.get_source("cuda") for m in modules])
            if _nvcc(Path(tmp) / "all.cu", joined, arch) is None:
                return None
        for k, module in enumerate(modules):
            error = _nvcc(Path(tmp) / f"k{k}.cu", module.get_source("cuda"), arch)
            if error is not None:
                return error
    return None


def one_translation_unit(sources: list[str]) -> str:
    """CUDA sources as one file: their includes first, each source in a namespace of its own
    with C++ linkage (kernels of different modules may share names, and so may helpers)."""
    lines = [src.splitlines() for src in sources]
    headers = sorted({x for src in lines for x in src if x.startswith("#include")})
    bodies = [
        "\n".join(x for x in src if not x.startswith("#include")).replace('extern "C" ', "")
        for src in lines
    ]
    # (#undef: a source's include guards, e.g. ops/wgmma.py's TF_TENSOR_MAP, are its own)
    return "\n".join([*headers, *(f"#undef TF_TENSOR_MAP\nnamespace tf{k} {{\n{b}\n}}" for k, b in enumerate(bodies))])  # fmt: skip


def _nvcc(source: Path, text: str, arch: str) -> str | None:
    source.write_text(text)
    command = [
        "nvcc",
        f"-arch={arch}",
        "-cubin",
        "-o",
        str(source.with_suffix(".cubin")),
        str(source),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode:
        return f"{result.stderr[-3000:]}\n--- source ---\n{text[-4000:]}"
    return None


def check(seed: int, arch: str) -> str | None:
    """What went wrong building the seed's program for `arch` (None: nothing)."""
    try:
        case = generate(seed)
    except Exception as err:  # noqa: BLE001 - the generator's own fault, reported
        return f"generating: {type(err).__name__}: {err}"
    try:
        modules = cuda_modules(case, arch)
    except Exception as err:  # noqa: BLE001 - the sweep reports it
        return f"lowering for {arch}: {type(err).__name__}: {err}\n{traceback.format_exc(limit=-4)}\n{case.source()}"  # fmt: skip
    if not modules:  # (a pass would say nothing)
        return f"lowering for {arch}: no kernel built, nothing for nvcc\n{case.source()}"
    errors = nvcc_errors(modules, arch)
    return None if errors is None else f"nvcc for {arch}:\n{errors}\n{case.source()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=100)
    args = parser.parse_args()
    failed = 0
    for seed in range(args.seed, args.seed + args.cases):
        for arch in ARCHES:
            problem = check(seed, arch)
            if problem is not None:
                failed += 1
                print(f"=== seed {seed} ({arch})\n{problem}\n", flush=True)
    print(f"{args.cases} programs x {len(ARCHES)} targets: {failed} failed", flush=True)


if __name__ == "__main__":
    main()
