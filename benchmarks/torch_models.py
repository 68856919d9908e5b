"""Whole models, float32 inference: eager torch vs torch.compile(inductor) vs tensorforge.

    python benchmarks/torch_models.py [--models mlp1,mlp64,resnet18,gpt2] [--threads 1,2]
                                      [--backends eager,inductor,tensorforge] [--repeats 5]
                                      [--small] [--json out.jsonl] [--dtype bfloat16]
                                      [--target "llvm -mcpu=znver3" ...]
                                      [--tf32 torch|on|off]

Same process, interleaved: each repeat times every backend in turn (a few calls each), and the
median over repeats is reported, with each backend's ratio to eager and tensorforge's to
inductor (> 1: tensorforge is faster). Each model's output is checked against eager torch in
float32 (relative error = max abs error / max abs value; `_error`), with TF32 off: on CUDA,
eager's cuDNN convolutions use TF32 by default (10-bit mantissas), so eager as timed is itself
that far from float32 (its `eager_error`); `_error64` is each one's against eager in float64.
Models are written in plain torch below. `--target` (repeatable) compiles tensorforge for each
CPU target given (options={"target": ...}), each its own column `tensorforge@<mcpu>`, timed in
the same interleaved rounds (AVX2 code on an AVX-512 host: `--target llvm --target "llvm
-mcpu=znver3"`). `--dtype float16` or `bfloat16` runs the models, weights and inputs, in that
dtype; the reference is then the float32 model on the same (rounded) weights and inputs, so
`eager_error` is eager's own half-precision error. `--tf32` sets torch's TF32 flags, which every
backend follows alike (eager's cuDNN / cuBLAS, Inductor, tensorforge: read when it compiles):
"torch" keeps torch's defaults (convolutions in TF32, matrix products in float32), "on" adds the
products (`set_float32_matmul_precision("high")`), "off" is float32 throughout; each row says
which (`tf32`: "conv", "conv+matmul" or "off"; only CUDA float32 models use it).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from tensorforge.graph import backend as tf_backend


class MLP(nn.Module):
    def __init__(self, d=768, hidden=3072):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU()
        )
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(self.stem(x), 3, 2, 1)
        x = F.adaptive_avg_pool2d(self.layers(x), 1).flatten(1)
        return self.fc(x)


class GPT2Block(nn.Module):
    def __init__(self, d=768, heads=12):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.heads) ** 0.5)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def models(small: bool) -> dict:
    scale = 4 if small else 1
    return {
        "mlp1": (lambda: MLP(768 // scale, 3072 // scale), (1, 768 // scale)),
        "mlp64": (lambda: MLP(768 // scale, 3072 // scale), (64, 768 // scale)),
        "resnet18": (ResNet18, (1, 3, 224 // scale, 224 // scale)),
        "gpt2": (lambda: GPT2Block(768 // scale, 12 // scale), (1, 128 // scale, 768 // scale)),
    }


def references(model, x) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager outputs in float32 (TF32 off for cuDNN and cuBLAS) and in float64."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        fp32 = model(x)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    return fp32, copy.deepcopy(model).double()(x.double())


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got - expected).abs().max() / expected.abs().max()).item()


def emit(row: dict, json_path: str | None) -> None:
    """One result as a JSON line: printed as it lands, and appended to `json_path` if given."""
    print(json.dumps(row), flush=True)
    if json_path:
        with open(json_path, "a") as f:
            f.write(json.dumps(row) + "\n")


def time_calls(fn, x, calls: int) -> float:
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    sync()
    return (time.perf_counter() - start) / calls


def add_target_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        action="append",
        help='a CPU target for tensorforge (repeatable: a column each), e.g. "llvm -mcpu=znver3"',
    )


def tensorforge_backends(targets: list[str] | None) -> dict[str, str | None]:
    """Backend column name -> tensorforge's target option: "tensorforge" alone without
    `targets`, else "tensorforge@<mcpu>" per target ("tensorforge@znver3")."""
    if not targets:
        return {"tensorforge": None}
    from tensorforge.target import Target

    return {f"tensorforge@{Target(t).mcpu}": t for t in targets}


def run_model(
    name, make, shape, backends, repeats, threads, device="cpu", targets=None, dtype="float32"
) -> dict:
    torch.manual_seed(0)
    # NOTE: a reset per model: MLP b1 and b64 share one forward, and Dynamo compiles a forward
    # it saw at another shape again with that size symbolic (automatic dynamic shapes), which
    # would time MLP b64 through the symbolic-size kernels
    torch._dynamo.reset()
    model = make().eval().to(device, getattr(torch, dtype))
    x = torch.randn(*shape).to(device, getattr(torch, dtype))
    fns, compile_s, errors = {}, {}, {}
    tf_targets = tensorforge_backends(targets)
    with torch.no_grad():
        if dtype == "float32":
            expected, exact = references(model, x)
        else:  # float32 on the same half values
            expected, exact = references(copy.deepcopy(model).float(), x.float())
        for b in backends:
            start = time.perf_counter()
            if b == "eager":
                fn = model
            elif b == "inductor-ro":  # Inductor with CUDA graphs
                fn = torch.compile(copy.deepcopy(model), mode="reduce-overhead")
            elif b in tf_targets:
                options = {"target": tf_targets[b]} if tf_targets[b] else None
                fn = torch.compile(copy.deepcopy(model), backend=tf_backend, options=options)
            else:  # NOTE: a copy each, no Dynamo reset between: a reset would make the earlier
                # compiled functions compile again on their next call, inside the timing
                fn = torch.compile(copy.deepcopy(model), backend=b)
            got = fn(x)  # compiles
            compile_s[b] = time.perf_counter() - start
            errors[b] = relative_error(got.float(), expected), relative_error(got.double(), exact)
            fns[b] = fn
            fn(x), fn(x)  # warm: reduce-overhead and tensorforge make CUDA graphs on later calls
        once = time_calls(fns["eager"], x, 1)
        calls = max(1, min(50, int(0.05 / max(once, 1e-6))))
        samples = {b: [] for b in backends}
        for _ in range(repeats):  # interleaved: each repeat times every backend in turn
            for b in backends:
                samples[b].append(time_calls(fns[b], x, calls))
    median = {b: statistics.median(s) for b, s in samples.items()}
    row = {"model": name, "threads": threads, "shape": list(shape), "device": device}
    row["dtype"] = dtype
    row["tf32"] = tf32_in_use() if device == "cuda" and dtype == "float32" else "off"
    for b in backends:
        row[f"{b}_ms"] = round(median[b] * 1e3, 3)
        row[f"{b}_compile_s"] = round(compile_s[b], 2)
        row[f"{b}_error"], row[f"{b}_error64"] = errors[b]
        row[f"{b}_vs_eager"] = round(median["eager"] / median[b], 3)
    for b in tf_targets:
        if "inductor" in backends and b in backends:
            row[f"{b}_vs_inductor"] = round(median["inductor"] / median[b], 3)
    return row


TF32_FLAGS = {"torch": None, "on": (True, True), "off": (False, False)}


def set_tf32(choice: str) -> None:
    """torch's (cuDNN convolution, cuBLAS matmul) TF32 flags, as `--tf32` asks."""
    if TF32_FLAGS[choice] is not None:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = TF32_FLAGS[choice]


def tf32_in_use() -> str:
    """Which float32 products the flags put in TF32 now: "conv", "matmul", "conv+matmul", "off"."""
    kinds = [k for k, on in (("conv", torch.backends.cudnn.allow_tf32),
                             ("matmul", torch.backends.cuda.matmul.allow_tf32)) if on]  # fmt: skip
    return "+".join(kinds) or "off"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp1,mlp64,resnet18,gpt2")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument(
        "--backends",
        default="eager,inductor,tensorforge",
        help="also: inductor-ro (Inductor's mode='reduce-overhead', CUDA graphs)",
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="quarter-size models (a smoke run)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--json", default=None, help="append one JSON line per case here")
    parser.add_argument(
        "--tf32",
        default="torch",
        choices=list(TF32_FLAGS),
        help="torch's TF32 flags for every backend (CUDA float32): torch's defaults "
        "(convolutions only), on (convolutions and matmuls) or off",
    )
    add_target_option(parser)
    args = parser.parse_args(argv)
    set_tf32(args.tf32)
    backends = args.backends.split(",")
    if "tensorforge" in backends:  # one column per --target
        at = backends.index("tensorforge")
        backends[at : at + 1] = list(tensorforge_backends(args.target))
    if "eager" not in backends:
        backends.insert(0, "eager")
    table = models(args.small)
    rows = []
    threads_list = [int(t) for t in args.threads.split(",")]
    if args.device == "cuda":
        threads_list = threads_list[:1]  # the host threads hardly matter to a GPU run
    for threads in threads_list:
        torch.set_num_threads(threads)
        os.environ["TF_NUM_THREADS"] = str(threads)
        for name in args.models.split(","):
            make, shape = table[name]
            row = run_model(
                name,
                make,
                shape,
                backends,
                args.repeats,
                threads,
                args.device,
                args.target,
                args.dtype,
            )
            rows.append(row)
            emit(row, args.json)
    print()
    nan = float("nan")
    for tf in [b for b in backends if b.startswith("tensorforge")] or ["tensorforge"]:
        print(f"{tf}:")
        header = f"{'model':10} {'thr':>3} " + " ".join(f"{b + ' ms':>15}" for b in backends)
        header += (
            f" {'tf/eager':>9} {'tf/ind':>7} {'tf err':>8} {'eager err':>9} {'tf compile s':>12}"
            f" {'tf32':>11}"
        )
        print(header)
        for r in rows:
            line = f"{r['model']:10} {r['threads']:>3} " + " ".join(
                f"{r[b + '_ms']:>15.3f}" for b in backends
            )
            line += f" {r.get(tf + '_vs_eager', nan):>9.2f} {r.get(tf + '_vs_inductor', nan):>7.2f}"
            line += f" {r.get(tf + '_error', nan):>8.1e} {r['eager_error']:>9.1e}"
            line += f" {r.get(tf + '_compile_s', nan):>12.1f} {r['tf32']:>11}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
