"""The graph's large half products on the GPU against eager (cuBLAS), one kernel at a time, with
the wgmma tiles forced per variant: GPU time a call (torch.profiler), ours / eager in one run.

    python benchmarks/gpu_graph_products.py [--only k0,k1] [--variants base,tma,128x128s6t]
    python benchmarks/gpu_graph_products.py --emit DIR   # write the CUDA sources (no GPU)

`nows` leaves out the hand-written warp-specialized kernel (graph/lower_ws_product.py), `main`
gives it session 19's cooperative plan, `ws_all` takes it for every product (short reductions
and more than three waves of tiles too), `s20` only for 32+ k steps over one wave (session
20's first rule), `nofuse` leaves bias, GELU and residual to a kernel of their own, `nocopy`
keeps a left matrix that is a view of a buffer on the scheduled kernel, `fuseres` adds the
residual in the kernel's epilogue too. A
variant `BMxBNsS[t]` forces block tiles BM x BN with S stages, `t` bulk tensor (TMA)
fills (the product alone: k is never split); `base` is the
lowering's own choice, `tma` the same with TMA fills.

H200 (2026-11-28), us of GPU time a call, eager (cuBLAS) in the same run:
    k0  2048 x 3072 x 768 + GELU (eager 25.2): 128 x 128 s3 (2 an SM) 28.9, TMA fills 29.0,
        128 x 192 s4t 29.1, 256 x 192 s3t 25.1, 256 x 128 s4t 33.1, 128 x 256 s4t 34.0
    k1  2048 x 768 x 3072 + bias (eager 15.1): 64 x 128 s4 (2 an SM) 31.7, TMA 31.9, 128 x 128
        s4t 32.0, s6t 33.7, 64 x 192 s6t 31.3, 128 x 192 s4t 36.5, 128 x 256 s4t 42.9
    qkv 2048 x 2304 x 768 (eager 13.4): 22.7, 128 x 192 s4t 21.8
    Session 19, one run, nows (the scheduled kernels) -> base (long reductions on the
    warp-specialized kernel, graph/lower_ws_product.py): k1 31.5 -> 22.2 (eager 15.2), fc2r
    31.9 -> 22.4 (eager 17.3), MLP of 2048 rows 56.5 -> 48.4 (eager 42.2).
    Pairs of blocks sharing B's tile by multicast (a cluster of 2, tried and removed): k1 128 x
    128 s4t 57.3, k0 49.2. Each warpgroup's multiplies in independent accumulator chains of 64
    or 128 columns (tried and removed): k1 on 64 x 128 31.0 against 31.3, on 128 x 256 45.3-49.3
    against 42.9. Each k step of 64 took a block about 650 ns whatever its tile up to
    128 x 192 (890 at 128 x 256): not the stages, the fill (TMA or cp.async) nor the bytes.
    Session 20, one run, main -> base (the hand kernel's ping-pong plans with staged stores)
    -> ws_all: k0 25.1 -> 25.1 -> 26.0 (eager 25.3), k1 22.1 -> 18.0 -> 18.0 (15.1), qkv 21.9
    -> 21.9 -> 18.0 (13.4), fc2r 22.3 -> 18.2 -> 18.1 (17.3), k0s 8.2 (6.6) and k1s 8.6 (7.0)
    unchanged (too few tiles for the hand kernel), mlp 48.1 -> 43.8 -> 46.2 (42.1-42.3).
    Session 20 later (bias, GELU and residual in the hand kernel's epilogue, from 12 k steps
    and up to 3 waves), one run, base with the residual fused / s20 / nofuse: vqkv 12.0 / 23.6
    / 14.9 (eager 10.5), vfc1 19.6 / 30.4 / 23.1 (19.7), vfc2r 17.8 / 17.7 / 17.3 (14.6),
    vproj 8.5 / 11.3 / 7.9 (7.4); mlp 37.7 (eager 41.7). The residual add then went back to a
    kernel of its own (lower_ws_product.FUSE_RESIDUAL).
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import replace

import torch
import torch.nn.functional as F

os.environ["TENSORFORGE_CACHE"] = "0"  # (a cached program would outlive the variant)

import tensorforge.graph.lower_tensor_core as L  # noqa: E402
import tensorforge.graph.lower_ws_product as WS  # noqa: E402

SHAPES = {  # name: (rows, in, out, epilogue)
    "k0": (2048, 768, 3072, "gelu"),  # MLP 768-3072-768's first product, GELU fused
    "k1": (2048, 3072, 768, "bias"),  # its second
    "fc2r": (2048, 3072, 768, "residual"),  # GPT-2's second MLP product and the residual add
    "qkv": (2048, 768, 2304, "bias"),
    "k1s": (256, 3072, 768, "bias"),  # MLP of 256 rows
    "k0s": (256, 768, 3072, "gelu"),
    "sq4k": (4096, 4096, 4096, "bias"),
    "vqkv": (1576, 768, 2304, "bias"),  # ViT-B/16 batch 8's products (197 x 8 rows)
    "vfc1": (1576, 768, 3072, "gelu"),
    "vfc2r": (1576, 3072, 768, "residual"),
    "vproj": (1576, 768, 768, "residual"),
    "mlp": (2048, 768, 3072, "mlp"),  # the whole MLP 768-3072-768 (k0, GELU, k1, bias)
    "mlp256": (256, 768, 3072, "mlp"),
}


class Product(torch.nn.Module):
    """epilogue(x @ w.T + b): the weights are parameters, constants to the backend."""

    def __init__(self, k: int, m: int, rows: int, epilogue: str):
        super().__init__()
        self.linear, self.epilogue = torch.nn.Linear(k, m), epilogue
        self.residual = torch.nn.Parameter(torch.randn(rows, m), requires_grad=False)

    def forward(self, x):
        y = self.linear(x)
        if self.epilogue == "gelu":
            return F.gelu(y)
        return y + self.residual if self.epilogue == "residual" else y


def model(name: str, device: str):
    rows, k, m, epilogue = SHAPES[name]
    torch.manual_seed(0)
    if epilogue == "mlp":
        mlp = torch.nn.Sequential(torch.nn.Linear(k, m), torch.nn.GELU(), torch.nn.Linear(m, k))
        return mlp.half().eval().to(device), torch.randn(rows, k).half().to(device)
    module = Product(k, m, rows, epilogue).half().eval().to(device)
    return module, torch.randn(rows, k).half().to(device)


WS_KNOBS = ("WS_PRODUCTS", "MAX_WAVES", "MIN_STEPS", "PINGPONG", "FUSE_EPILOGUES", "FUSE_RESIDUAL", "COPY_VIEWS")  # fmt: skip
WS_DEFAULTS = {k: getattr(WS, k) for k in WS_KNOBS}


def force(variant: str) -> None:
    """Set the lowering's knobs for `variant` (see the module doc)."""
    L.TMA_FILLS = variant == "tma"
    for key, value in WS_DEFAULTS.items():
        setattr(WS, key, value)
    WS.WS_PRODUCTS = variant != "nows"  # nows: the scheduled kernels alone (main before s19)
    if variant == "ws_all":  # the hand kernel past three waves and on short reductions
        WS.MAX_WAVES, WS.MIN_STEPS = 99, 1
    if variant in ("s20", "main"):  # session 20's first rule: 32 k steps, one wave
        WS.MAX_WAVES, WS.MIN_STEPS = 1, 32
    WS.PINGPONG = variant != "main"  # main: the cooperative 128 x 128 plan (main before s20)
    WS.FUSE_EPILOGUES = variant != "nofuse"  # nofuse: bias, GELU, residual a kernel of their own
    WS.COPY_VIEWS = variant != "nocopy"  # nocopy: a view as left matrix stays scheduled
    WS.FUSE_RESIDUAL = variant == "fuseres" or WS_DEFAULTS["FUSE_RESIDUAL"]  # the residual too
    if variant in ("base", "tma", "nows", "ws_all", "main", "s20", "nofuse", "nocopy", "fuseres"):
        return
    found = re.fullmatch(r"(\d+)x(\d+)s(\d)(t?)", variant)
    if not found:
        raise SystemExit(f"variant {variant!r}: base, tma or BMxBNsS[t]")
    bm, bn, stages, tma = found.groups()
    L.TMA_FILLS = bool(tma)
    tiles = L.TensorCoreTiles(int(bm), int(bn), 64, 16, int(bn), int(stages), 1, "mbarrier_lag", mma="wgmma")  # fmt: skip
    tiles = replace(tiles, blocks=tiles.resident_blocks(227 << 10))
    L.choose_wgmma_tiles = lambda *a, **k: tiles
    L.FULL_EIGHTHS = 0  # (never split k)


def gpu_us(f, x) -> float:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        f(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(20):
            f(x)
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in p.key_averages() if e.device_time_total > 0) / 20


def emit(names, variants, folder: str) -> None:
    from pathlib import Path

    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten
    from tensorforge.graph.program import BuiltKernel

    keep = {k: getattr(L, k) for k in ("TMA_FILLS", "choose_wgmma_tiles", "FULL_EIGHTHS")}
    for name in names:
        for variant in variants:
            force(variant)
            fn, x = model(name, "cpu")
            gm = make_fx(fn)(x)
            out = compile_aten(gm, [x], {}, Options(target="cuda -arch=sm_90"))
            while not hasattr(out, "steps") and hasattr(out, "compiled"):
                out = out.compiled
            for k, step in enumerate(s for s in out.steps if isinstance(s, BuiltKernel)):
                Path(folder, f"{name}_{variant}_{k}.cu").write_text(step.module.get_source("cuda"))  # fmt: skip
            for key, value in keep.items():
                setattr(L, key, value)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=",".join(SHAPES))
    parser.add_argument("--variants", default="base,tma")
    parser.add_argument("--emit", default=None)
    args = parser.parse_args()
    names, variants = args.only.split(","), args.variants.split(",")
    if args.emit:
        return emit(names, variants, args.emit)
    import tensorforge.graph.backend as tfb

    keep = {k: getattr(L, k) for k in ("TMA_FILLS", "choose_wgmma_tiles", "FULL_EIGHTHS")}
    for name in names:
        force("base")
        fn, x = model(name, "cuda")
        with torch.no_grad():
            ref = fn(x).float()
            eager = gpu_us(fn, x)
            print(f"{name:5s} {'eager':12s} {eager:7.1f} us", flush=True)
            for variant in variants:
                force(variant)
                try:
                    f = torch.compile(fn, backend=tfb)
                    out = f(x).float()
                    err = ((out - ref).abs().max() / ref.abs().max()).item()
                    t = gpu_us(f, x)
                    print(f"{name:5s} {variant:12s} {t:7.1f} us  {t / eager:5.2f}x  err {err:.1e}", flush=True)  # fmt: skip
                except Exception as error:  # (a variant that does not build: say so, go on)
                    print(f"{name:5s} {variant:12s} FAILED {type(error).__name__}: {str(error)[:200]}")  # fmt: skip
                finally:
                    torch._dynamo.reset()
                    for key, value in keep.items():
                        setattr(L, key, value)


if __name__ == "__main__":
    main()
