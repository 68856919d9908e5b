"""The warp-specialized wgmma GEMM (ops/wgmma_ws.py) against cuBLAS (torch) on the graph's
product shapes, GPU time a call (torch.profiler), one run; checks each result first.

    python benchmarks/gpu_ws_gemm.py [--sweep] [--only k0,qkv]

Each shape: the chosen plan (*), session 19's cooperative one (m); --sweep adds the other
ping-pong tiles, the chosen one with fragment stores (not staged) and with 2 stages of
multiplies in flight, and the chosen one storing nothing (`discard`: the products alone).
Measurements: ops/wgmma_ws.py's docstring.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
import torch.nn.functional as F

from tensorforge.ops import wgmma_ws as W
from tensorforge.ops import wgmma_ws_plan as P

SHAPES = {  # name: (m, n, k, epilogue)
    "k0": (2048, 3072, 768, "bias_gelu"),
    "k1": (2048, 768, 3072, "bias"),
    "qkv": (2048, 2304, 768, "bias"),
    "fc2r": (2048, 768, 3072, "bias_residual"),
    "vitqkv": (1576, 2304, 768, "bias"),  # ViT-B/16, batch 8: 8 x 197 tokens
    "vitfc1": (1576, 3072, 768, "bias_gelu"),
    "vitfc2": (1576, 768, 3072, "bias_residual"),
    "vitout": (1576, 768, 768, "bias_residual"),
    "k0s": (256, 3072, 768, "bias_gelu"),
    "k1s": (256, 768, 3072, "bias"),
    "sq1024": (1024, 1024, 1024, "none"),
    "sq4096": (4096, 4096, 4096, "none"),
}


class Problem:
    def __init__(self, m, n, k, epilogue, dtype=torch.float16):
        g = torch.Generator(device="cuda").manual_seed(0)
        self.m, self.n, self.k, self.epilogue, self.dtype = m, n, k, epilogue, dtype
        self.a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
        self.b = (torch.randn(k, n, device="cuda", generator=g) / k**0.5).to(dtype)
        self.bias = torch.randn(n, device="cuda", generator=g).to(dtype)
        self.res = torch.randn(m, n, device="cuda", generator=g).to(dtype)
        self.d = torch.empty(m, n, device="cuda", dtype=dtype)
        self.work = torch.zeros(m, n, device="cuda", dtype=torch.float32)
        self.counts = torch.zeros(m * n // 64 + 64, device="cuda", dtype=torch.int32)

    def eager(self):
        if self.epilogue == "none":
            return self.a @ self.b
        if self.epilogue == "bias_residual":
            return torch.addmm(self.bias, self.a, self.b) + self.res
        y = torch.addmm(self.bias, self.a, self.b)
        return F.gelu(y) if self.epilogue == "bias_gelu" else y

    def reference(self):
        y = self.a.float() @ self.b.float()
        if self.epilogue != "none":
            y = y + self.bias.float()
        if self.epilogue == "bias_residual":
            return y + self.res.float()
        return F.gelu(y) if self.epilogue == "bias_gelu" else y

    def ours(self, plan):
        dt = "float16" if self.dtype == torch.float16 else "bfloat16"
        W.launch(plan, self.epilogue, dt, self.a.data_ptr(), self.b.data_ptr(), self.d.data_ptr(),
                 self.bias.data_ptr(), self.work.data_ptr(), self.counts.data_ptr(), self.m,
                 self.n, self.k, torch.cuda.get_device_properties(0).multi_processor_count,
                 self.res.data_ptr())  # fmt: skip
        return self.d

    def error(self, plan) -> float:
        ref = self.reference()
        out = self.ours(plan).float()
        again = self.ours(plan).float()  # (the workspace and counters left zero)
        # (3+ parts add in the order they finish: a second call may round differently)
        assert plan.split > 2 or torch.equal(out, again), "a second call differs"
        return ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()


def gpu_us(f) -> float:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(20):
            f()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in p.key_averages() if e.device_time_total > 0) / 20


def main_plan(m, n, k, sms):
    """The plan main chose before ping-pong: cooperative tiles only."""
    return P.choose_ws_plan(m, n, k, sms, pingpong=False)


def pingpong_plans():
    """Ping-pong tiles 64 * mw x bn, staged stores, the deepest ring that fits."""
    return [P.pingpong_plan(mw, bn) for mw, bn in ((2, 128), (1, 256), (1, 192), (1, 128))]


def runs(m, n, k, epilogue, sms, sweep: bool):
    """(plan, epilogue) pairs to time: the chosen plan and main's; with `sweep` also main's
    with staged stores, the other ping-pong tiles, the chosen one with direct stores and with
    2 steps of multiplies in flight, and the chosen one storing nothing (the products alone)."""
    chosen = P.choose_ws_plan(m, n, k, sms, pingpong=True)
    main = main_plan(m, n, k, sms)
    plans = [chosen, main]
    if sweep:
        plans += [replace(main, staged=True), *pingpong_plans()]
        plans += [replace(chosen, staged=False), replace(chosen, inflight=2)]
    pairs = []
    for p in plans:
        if (p, epilogue) not in pairs:
            pairs.append((p, epilogue))
    return pairs + ([(chosen, "discard")] if sweep else [])


def precompile(jobs) -> None:
    """nvcc for every (plan, epilogue, dtype) side by side (one process each)."""
    from concurrent.futures import ThreadPoolExecutor

    from tensorforge.runtime.cuda_exec import compile_cuda

    texts = {W.ws_gemm_source(*job) for job in jobs}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda t: compile_cuda(t, "sm_90a"), texts))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--only", default=",".join(SHAPES))
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    names = args.only.split(",")
    jobs = []
    for name in names:
        m, n, k, epilogue = SHAPES[name]
        jobs += [(p, e, "float16") for p, e in runs(m, n, k, epilogue, sms, args.sweep)]
    precompile(jobs)
    for name in names:
        m, n, k, epilogue = SHAPES[name]
        pb = Problem(m, n, k, epilogue)
        eager = gpu_us(pb.eager)
        chosen = P.choose_ws_plan(m, n, k, sms, pingpong=True)
        for plan, epi in runs(m, n, k, epilogue, sms, args.sweep):
            try:
                pb.epilogue = epi
                err = pb.error(plan) if epi != "discard" else float("nan")
                t = gpu_us(lambda pb=pb, plan=plan: pb.ours(plan))
                mark = "*" if plan == chosen else ("m" if plan == main_plan(m, n, k, sms) else " ")
                kind = (f"pp{plan.bm}" if plan.pingpong else "co") + ("st" if plan.staged else "  ")
                print(f"{name:7s} {m}x{n}x{k} {epi:13s} cuBLAS {eager:7.1f} us  ws{mark} {kind} bn{plan.bn} s{plan.stages} i{plan.inflight} split{plan.split} regs{int(plan.regs)}: {t:7.1f} us {t / eager:5.2f}x  err {err:.1e}", flush=True)  # fmt: skip
            except Exception as error:
                print(f"{name:7s} {plan} FAILED {type(error).__name__}: {str(error)[:300]}", flush=True)  # fmt: skip
            finally:
                pb.epilogue = epilogue


if __name__ == "__main__":
    main()
