"""Special functions (lower_special.py): max ulp against float64 torch over each domain (poles,
zeros, tails) and 1M-element float32 time, compiled (CPU) against eager, in one run.
Usage: PYTHONPATH=src:. python benchmarks/bench_special_functions.py [erfinv ndtri lgamma ...]"""

import os
import sys
import time

import torch

os.environ["TENSORFORGE_GRAPH_STRICT"] = "1"
from tests.graph.test_lowering import compile_fn

S = torch.special
fns = {
    "erfinv": torch.erfinv,
    "ndtri": S.ndtri,
    "lgamma": torch.lgamma,
    "digamma": torch.digamma,
    "trigamma": lambda x: torch.polygamma(1, x),
    "i0": torch.i0,
    "i0e": S.i0e,
    "i1": S.i1,
    "i1e": S.i1e,
}
g = torch.Generator().manual_seed(0)


def domain(name, n):
    u = torch.rand(n, generator=g, dtype=torch.float64)
    if name == "erfinv":
        x = torch.cat(
            [
                u * 2 - 1,
                1 - torch.logspace(-7, 0, 1000, dtype=torch.float64),
                -(1 - torch.logspace(-7, 0, 1000, dtype=torch.float64)),
                torch.tensor([1.0, -1, 0, -0.0, 0.5]),
            ]
        )
    elif name == "ndtri":
        x = torch.cat(
            [
                u,
                torch.logspace(-38, 0, 2000, dtype=torch.float64),
                1 - torch.logspace(-7, 0, 500, dtype=torch.float64),
                torch.tensor([0.0, 1, 0.5]),
            ]
        )
    elif name in ("lgamma", "digamma", "trigamma"):
        x = torch.cat(
            [
                u * 40 - 20,
                torch.logspace(-30, 30, 2000, dtype=torch.float64),
                1 + (u[:2000] - 0.5) * 1e-3,
                2 + (u[:2000] - 0.5) * 1e-3,
                1.4616321 + (u[:2000] - 0.5) * 1e-3,
                -torch.arange(0, 10.0, 0.25, dtype=torch.float64),
            ]
        )
    else:
        x = torch.cat(
            [
                u * 200 - 100,
                torch.logspace(-30, 2, 2000, dtype=torch.float64),
                (u[:2000] - 0.5) * 40,
            ]
        )
    return x.float()


def ulps(got, ref64):
    ref32 = ref64.float()
    ok = torch.isfinite(ref32) & torch.isfinite(got)
    spacing = torch.nextafter(ref32.abs(), torch.tensor(float("inf"))) - ref32.abs()
    err = ((got.double() - ref64).abs() / spacing.double())[ok]
    bad = (
        (torch.isnan(got) != torch.isnan(ref32))
        | (torch.isinf(got) != torch.isinf(ref32))
        | (torch.isinf(got) & (got != ref32))
    )
    return err.max().item(), int(bad.sum())


def one_output(f):
    return lambda x: (f(x),)  # (one argument: make_fx traces a default argument as an input)


names = sys.argv[1:] or list(fns)
for name in names:
    f = fns[name]
    x = domain(name, 200000)
    comp = compile_fn(one_output(f), [x])
    got = comp([x])[0]
    ref = f(x.double())
    ours, bad = ulps(got, ref)
    eag, ebad = ulps(f(x), ref)
    worst = (got.double() - ref).abs().argmax()
    big = torch.randn(1 << 20, generator=g)
    if name == "erfinv":
        big = big.tanh()
    if name == "ndtri":
        big = big.sigmoid()
    comp = compile_fn(one_output(f), [big])
    for _ in range(3):
        comp([big])
        f(big)
    t0 = time.perf_counter()
    [comp([big]) for _ in range(20)]
    t1 = time.perf_counter()
    [f(big) for _ in range(20)]
    t2 = time.perf_counter()
    print(
        f"{name:8s} max ulp ours {ours:8.2f} eager {eag:8.2f}  nan/inf mismatches ours {bad} eager {ebad}   1M: ours {(t1 - t0) / 20 * 1e3:6.2f} ms eager {(t2 - t1) / 20 * 1e3:6.2f} ms",
        flush=True,
    )
