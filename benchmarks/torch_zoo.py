"""Common model blocks, float32 inference: eager vs torch.compile(inductor) vs tensorforge.

    python benchmarks/torch_zoo.py [--models mbv2,vit,bert_mask,llama,unet,embed,lstm]
                                   [--threads 1] [--repeats 7] [--json out.jsonl]
                                   [--target "llvm -mcpu=znver3" ...] [--device cuda]
    python benchmarks/torch_zoo.py --device cuda --models unet,groupnorm,groupnorm_small,softmax_row
    python benchmarks/torch_zoo.py --models tv:resnet50,tv:swin_t [--batch 8] [--dtype float16]
                                   [--no-inductor]   (torchvision's classifiers, if installed)

On CPU by default; `--device cuda`: the blocks on the GPU (TF32 off), Inductor in
mode="reduce-overhead" (CUDA graphs, as tensorforge's), each timing ending in a synchronize.
Besides the blocks, single operators of few long rows (not in the default list): the UNet
block's two GroupNorms alone at batch 1 (`groupnorm`: 8 groups of 16 x 64 x 64,
`groupnorm_small`: 8 of 8 x 32 x 32) and a softmax along one row of 65536 (`softmax_row`).
`--whole-rows`: tensorforge without splitting such rows in chunks (graph/lower_split_rows.py:
a block per row, as before it), the compiled-graph cache off; run with and without it.

The blocks (tests/graph/zoo_models.py, plain torch) at modest sizes: MobileNetV2 inverted
residuals, a ViT encoder block and a BERT one with an additive attention mask (SDPA), a LLaMA
block (RMSNorm, rotary embeddings, causal SDPA, SiLU-gated MLP), a UNet block (GroupNorm,
nearest upsample, cat, transposed conv), an embedding classifier, an LSTM. Same process,
interleaved: each repeat times every backend in turn, the median over repeats is reported;
`tf/eager` and `tf/ind` > 1: tensorforge is faster. `fallbacks`: nodes tensorforge ran in eager
torch inside its graphs (its `report`), `graphs`: the graphs Dynamo handed it (0: Dynamo ran the
model itself, as it does an LSTM's). `--target` (repeatable): tensorforge compiled for each CPU
target given, a column `tensorforge@<mcpu>` each, timed in the same rounds (torch_models.py's).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import re
import statistics
import sys
import time

import torch
from torch_models import (  # benchmarks/: the folder
    add_target_option,
    emit,
    relative_error,
    tensorforge_backends,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tensorforge.graph import backend as tf_backend  # noqa: E402
from tests.graph import zoo_models as zoo  # noqa: E402


def cases() -> dict:
    """name -> (model maker, input maker)."""
    return {
        "mbv2": (lambda: zoo.MobileNetV2Blocks(32), lambda: (torch.randn(1, 32, 56, 56),)),
        "vit": (lambda: zoo.EncoderBlock(384, 6), lambda: (torch.randn(1, 197, 384),)),
        "bert_mask": (
            lambda: zoo.EncoderBlock(384, 6, approximate="tanh"),
            lambda: (torch.randn(1, 128, 384), torch.randn(1, 1, 128, 128)),
        ),
        "llama": (lambda: zoo.LlamaBlock(512, 8, 1376), lambda: (torch.randn(1, 128, 512),)),
        "unet": (
            lambda: zoo.UNetBlock(64, 8),
            lambda: (torch.randn(1, 64, 32, 32), torch.randn(1, 64, 64, 64)),
        ),
        "embed": (
            lambda: zoo.EmbeddingClassifier(1000, 256, 512, 10),
            lambda: (torch.randint(0, 1000, (8, 128)),),
        ),
        "lstm": (lambda: zoo.RecurrentClassifier(64, 128), lambda: (torch.randn(4, 32, 64),)),
        "groupnorm": (lambda: torch.nn.GroupNorm(8, 128), lambda: (torch.randn(1, 128, 64, 64),)),
        "groupnorm_small": (
            lambda: torch.nn.GroupNorm(8, 64),
            lambda: (torch.randn(1, 64, 32, 32),),
        ),
        "softmax_row": (lambda: torch.nn.Softmax(-1), lambda: (torch.randn(1, 65536),)),
    }


DEFAULT_MODELS = "mbv2,vit,bert_mask,llama,unet,embed,lstm"  # the blocks


def torchvision_case(name: str, batch: int):
    """`tv:<name>`: a torchvision classifier, randomly initialized (no weights are downloaded);
    parameters initialized to zeros (some heads, some norms' biases) are drawn again, so every
    layer shapes the output."""

    def make():
        import torchvision  # not a dependency: only these cases need it

        model = getattr(torchvision.models, name)(weights=None)
        gen = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for p in model.parameters():
                if not p.any():
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        return model

    side = 299 if name == "inception_v3" else 224
    return make, lambda: (torch.randn(batch, 3, side, side),)


def time_calls(fn, args, calls: int) -> float:
    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def fallbacks_of(model, args, target: str | None = None) -> tuple[int, int]:
    """(graphs, fallbacks) of tensorforge's compile of the model, from its report."""
    report = io.StringIO()
    options = {"report": True, **({"target": target} if target else {})}
    with contextlib.redirect_stderr(report):
        torch.compile(copy.deepcopy(model), backend=tf_backend, options=options)(*args)
    text = report.getvalue()
    counts = [int(n) for n in re.findall(r"^  fallbacks: (\d+)", text, flags=re.M)]
    return len(counts), sum(counts)


def run_case(
    name, make, inputs, repeats: int, threads: int, targets=None, device="cpu", **how
) -> dict:
    """`how`: dtype= (the model's and its floating inputs'), inductor=False (no Inductor column)."""
    torch.manual_seed(0)
    dtype = getattr(torch, how.get("dtype", "float32"))
    model = zoo.randomize_norms(make()).eval().to(device, dtype)
    args = tuple(a.to(device, dtype) if a.is_floating_point() else a.to(device) for a in inputs())
    tf_targets = tensorforge_backends(targets)
    backends = ("eager", *(("inductor",) if how.get("inductor", True) else ()), *tf_targets)
    fns, errors, compile_s = {}, {}, {}
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(*args)
        for b in backends:
            start = time.perf_counter()
            if b == "eager":
                fn = model
            else:  # NOTE: a copy each, no reset between: a reset would make the earlier
                # compiled functions compile again on their next call, inside the timing
                chosen = tf_backend if b in tf_targets else b
                options = {"target": tf_targets[b]} if tf_targets.get(b) else None
                mode = "reduce-overhead" if b == "inductor" and device == "cuda" else None
                if mode:  # CUDA graphs, as tensorforge's (options and mode exclude each other)
                    fn = torch.compile(copy.deepcopy(model), backend=chosen, mode=mode)
                else:
                    fn = torch.compile(copy.deepcopy(model), backend=chosen, options=options)
            got = fn(*args)
            compile_s[b] = time.perf_counter() - start
            errors[b] = relative_error(got, expected)
            fns[b] = fn
            fn(*args), fn(*args)  # reduce-overhead and tensorforge record CUDA graphs late
        once = time_calls(fns["eager"], args, 1)
        calls = max(1, min(50, int(0.05 / max(once, 1e-6))))
        samples = {b: [] for b in backends}
        for _ in range(repeats):
            for b in backends:
                samples[b].append(time_calls(fns[b], args, calls))
        graphs, fallbacks = fallbacks_of(model, args, next(iter(tf_targets.values())))
    median = {b: statistics.median(s) for b, s in samples.items()}
    row = {"model": name, "threads": threads, "device": device, "dtype": str(dtype)[6:]}
    row.update(graphs=graphs, fallbacks=fallbacks)
    for b in backends:
        row[f"{b}_ms"] = round(median[b] * 1e3, 3)
        row[f"{b}_error"] = errors[b]
        row[f"{b}_compile_s"] = round(compile_s[b], 2)
    for b in tf_targets:
        suffix = "" if b == "tensorforge" else b.removeprefix("tensorforge")
        row[f"tf{suffix}_vs_eager"] = round(median["eager"] / median[b], 3)
        if "inductor" in median:
            row[f"tf{suffix}_vs_inductor"] = round(median["inductor"] / median[b], 3)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    table = cases()
    parser.add_argument("--models", default=DEFAULT_MODELS, help=f"of {','.join(table)}")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--whole-rows", action="store_true", help="no chunks of long rows")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None, help="append one JSON line per model here")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--batch", type=int, default=1, help="of the torchvision models (tv:)")
    parser.add_argument("--no-inductor", action="store_true", help="eager and tensorforge only")
    add_target_option(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ["TF_NUM_THREADS"] = str(args.threads)
    if args.whole_rows:
        from tensorforge.graph import lower_split_rows

        lower_split_rows.MAX_CHUNKS = 1  # row_chunks splits nothing
        os.environ["TENSORFORGE_CACHE"] = "0"  # (the cache's key does not cover the setting)
    if args.device == "cuda":  # fp32 products as fp32 in every backend (all follow the flags)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    rows = []
    for name in args.models.split(","):
        if name.startswith("tv:"):
            make, inputs = torchvision_case(name[3:], args.batch)
        elif name in table:
            make, inputs = table[name]
        else:
            parser.error(
                f"unknown model {name!r}: one of {', '.join(table)} or tv:<torchvision name>"
            )
        how = {"dtype": args.dtype, "inductor": not args.no_inductor}
        row = run_case(
            name, make, inputs, args.repeats, args.threads, args.target, args.device, **how
        )
        rows.append(row)
        emit(row, args.json)
    for b in tensorforge_backends(args.target):
        suffix = "" if b == "tensorforge" else b.removeprefix("tensorforge")
        print(f"\n{b}:")
        print(
            f"{'model':15} {'eager ms':>9} {'ind ms':>9} {'tf ms':>9} {'tf/eager':>8} {'tf/ind':>7}"
            f" {'tf err':>8} {'graphs':>6} {'fallbacks':>9}"
        )
        for r in rows:
            print(
                f"{r['model']:15} {r['eager_ms']:9.3f} {r.get('inductor_ms', float('nan')):9.3f} "
                f"{r[b + '_ms']:9.3f} {r[f'tf{suffix}_vs_eager']:8.2f} "
                f"{r.get(f'tf{suffix}_vs_inductor', float('nan')):7.2f} "
                f"{r[b + '_error']:8.1e} {r['graphs']:6d} {r['fallbacks']:9d}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
