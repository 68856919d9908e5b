"""ResNet-18's 3 x 3 convolutions (and its 1 x 1 downsample) with weights known only at run
time, as a training graph has them: eager torch vs tensorforge, interleaved in one process, min
thread time of a few rounds.

    python benchmarks/convs_training.py [--batch 1] [--threads 1] [--repeats 5]
                                        [--target "llvm -mcpu=znver3"]

"forward": the convolution of an input and weights passed as arguments (ours packs them each
call, lower_conv's `_filter_vector_weights`); "weight grad": a forward and the backward of the
weights alone (lower_conv_backward's product where its pixels are few, else eager's oneDNN).
"""

from __future__ import annotations

import argparse
import functools
import time

import torch
import torch.nn.functional as F

from tensorforge.graph import backend

# (in channels, out channels, kernel, stride, input size)
SHAPES = [
    (64, 64, 3, 1, 56),
    (64, 128, 3, 2, 56),
    (128, 128, 3, 1, 28),
    (128, 256, 3, 2, 28),
    (256, 256, 3, 1, 14),
    (256, 512, 3, 2, 14),
    (512, 512, 3, 1, 7),
    (256, 512, 1, 2, 14),
]


def thread_ms(fn, *args, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        fn(*args)
        best = min(best, time.thread_time() - start)
    return best * 1e3


def weight_step(conv):
    def step(x, w, g):
        w.grad = None
        (conv(x, w) * g).sum().backward()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--target", default=None, help="tensorforge's target (default: the host)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"{'layer':>24} {'fwd eager':>10} {'ours':>7} {'x':>5} {'dW eager':>9} {'ours':>7} {'x':>5}"
    )
    for cin, cout, k, stride, size in SHAPES:
        torch.manual_seed(0)
        pad = k // 2
        x = torch.randn(args.batch, cin, size, size)
        w = (torch.randn(cout, cin, k, k) * 0.05).requires_grad_()
        out = (size + 2 * pad - k) // stride + 1
        g = torch.randn(args.batch, cout, out, out)

        def conv(x, w, stride=stride, pad=pad):
            return F.conv2d(x, w, stride=stride, padding=pad)

        torch._dynamo.reset()
        options = {"target": args.target} if args.target else None
        compiled = torch.compile(conv, backend=functools.partial(backend, options=options))
        eager_step, our_step = weight_step(conv), weight_step(compiled)
        with torch.no_grad():
            compiled(x, w)
        our_step(x, w, g)
        times = [float("inf")] * 4
        for _ in range(3):  # interleaved rounds
            with torch.no_grad():
                fwd = [thread_ms(f, x, w, repeats=args.repeats) for f in (conv, compiled)]
            bwd = [thread_ms(f, x, w, g, repeats=args.repeats) for f in (eager_step, our_step)]
            times = [min(a, b) for a, b in zip(times, fwd + bwd)]
        name = f"{cin}->{cout} {k}x{k} s{stride} @{size}"
        fe, fo, be, bo = times
        print(f"{name:>24} {fe:10.2f} {fo:7.2f} {fe / fo:5.2f} {be:9.2f} {bo:7.2f} {be / bo:5.2f}")


if __name__ == "__main__":
    main()
