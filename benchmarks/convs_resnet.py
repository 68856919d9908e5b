"""ResNet-50's and ResNet-18's distinct convolution + batch norm + ReLU blocks at batch 1 (224 x
224 input, torchvision's layout: ResNet-50 v1.5, its stride on the 3 x 3), float32 inference:
eager torch vs tensorforge (the batch norm folded into constant weights), same process,
interleaved, then each model's total weighted by how often the block occurs in it.

    python benchmarks/convs_resnet.py [--models resnet50,resnet18] [--threads 1] [--repeats 7]
                                      [--cases r50_3x3_64_56,...] [--target "llvm -mcpu=znver3"]
                                      [--direct]

--direct: 3 x 3 stride-1 convolutions by the direct paths, Winograd off (the numbers before
graph/lower_conv_winograd.py; run once with and once without it for before / after).

Case names: r50_/r18_ (the first model holding the shape), the kernel, then in -> out channels,
"s2" for stride 2, and the input's size (pixels a side).
"""

from __future__ import annotations

import torch
from eager_vs_compiled import arguments, run  # benchmarks/: the script's folder is on sys.path
from torch import nn

# name -> (in channels, out channels, kernel, stride, input size, {model: count in it})
SHAPES = {
    "stem_7x7_3_64_s2_224": (3, 64, 7, 2, 224, {"resnet50": 1, "resnet18": 1}),
    # ResNet-50: bottlenecks, 1 x 1 (stride 1 and the stride-2 downsamples) and 3 x 3
    "r50_1x1_64_64_56": (64, 64, 1, 1, 56, {"resnet50": 1}),
    "r50_1x1_64_256_56": (64, 256, 1, 1, 56, {"resnet50": 4}),
    "r50_1x1_256_64_56": (256, 64, 1, 1, 56, {"resnet50": 2}),
    "r50_3x3_64_64_56": (64, 64, 3, 1, 56, {"resnet50": 3, "resnet18": 4}),
    "r50_1x1_256_128_56": (256, 128, 1, 1, 56, {"resnet50": 1}),
    "r50_3x3_128_128_s2_56": (128, 128, 3, 2, 56, {"resnet50": 1}),
    "r50_1x1_256_512_s2_56": (256, 512, 1, 2, 56, {"resnet50": 1}),
    "r50_1x1_512_128_28": (512, 128, 1, 1, 28, {"resnet50": 3}),
    "r50_3x3_128_128_28": (128, 128, 3, 1, 28, {"resnet50": 3, "resnet18": 3}),
    "r50_1x1_128_512_28": (128, 512, 1, 1, 28, {"resnet50": 4}),
    "r50_1x1_512_256_28": (512, 256, 1, 1, 28, {"resnet50": 1}),
    "r50_3x3_256_256_s2_28": (256, 256, 3, 2, 28, {"resnet50": 1}),
    "r50_1x1_512_1024_s2_28": (512, 1024, 1, 2, 28, {"resnet50": 1}),
    "r50_1x1_1024_256_14": (1024, 256, 1, 1, 14, {"resnet50": 5}),
    "r50_3x3_256_256_14": (256, 256, 3, 1, 14, {"resnet50": 5, "resnet18": 3}),
    "r50_1x1_256_1024_14": (256, 1024, 1, 1, 14, {"resnet50": 6}),
    "r50_1x1_1024_512_14": (1024, 512, 1, 1, 14, {"resnet50": 1}),
    "r50_3x3_512_512_s2_14": (512, 512, 3, 2, 14, {"resnet50": 1}),
    "r50_1x1_1024_2048_s2_14": (1024, 2048, 1, 2, 14, {"resnet50": 1}),
    "r50_1x1_2048_512_7": (2048, 512, 1, 1, 7, {"resnet50": 2}),
    "r50_3x3_512_512_7": (512, 512, 3, 1, 7, {"resnet50": 2, "resnet18": 3}),
    "r50_1x1_512_2048_7": (512, 2048, 1, 1, 7, {"resnet50": 3}),
    # ResNet-18's own: basic blocks' stride-2 3 x 3 entries and 1 x 1 downsamples
    "r18_3x3_64_128_s2_56": (64, 128, 3, 2, 56, {"resnet18": 1}),
    "r18_1x1_64_128_s2_56": (64, 128, 1, 2, 56, {"resnet18": 1}),
    "r18_3x3_128_256_s2_28": (128, 256, 3, 2, 28, {"resnet18": 1}),
    "r18_1x1_128_256_s2_28": (128, 256, 1, 2, 28, {"resnet18": 1}),
    "r18_3x3_256_512_s2_14": (256, 512, 3, 2, 14, {"resnet18": 1}),
    "r18_1x1_256_512_s2_14": (256, 512, 1, 2, 14, {"resnet18": 1}),
}


def print_weighted_totals(rows, models, counts_of) -> None:
    """Each model's eager and tensorforge times over `rows` (run's (name, eager, tf, ...)),
    each case counted as often as `counts_of(name)[model]` says it occurs; then the load."""
    import os

    for model in models:
        counted = [(counts_of(n).get(model, 0), e, t) for n, e, t, _ in rows]
        eager = sum(c * e for c, e, _ in counted)
        ours = sum(c * t for c, _, t in counted)
        if eager:
            print(f"{model} weighted total: eager {eager:.3f} ms, tf {ours:.3f} ms, "
                  f"eager/tf {eager / ours:.2f}")  # fmt: skip
    print(f"load {os.getloadavg()[0]:.2f}")


def randomized_batch_norm(channels: int) -> nn.BatchNorm2d:
    """A batch norm whose running statistics and affine terms are not the identity's."""
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


class ConvBnRelu(nn.Module):
    def __init__(self, cin, cout, kernel, stride):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)
        self.bn = randomized_batch_norm(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def main() -> None:
    import argparse
    import os
    import sys

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--models", default="resnet50,resnet18")
    pre.add_argument("--direct", action="store_true")
    known, rest = pre.parse_known_args()
    if known.direct:
        from tensorforge.graph import lower_conv

        lower_conv.winograd_tile = lambda *args: 0
    models = known.models.split(",")
    names = [n for n, shape in SHAPES.items() if any(m in shape[5] for m in models)]
    sys.argv = [sys.argv[0], *rest]
    args = arguments(names)
    print(
        f"load {os.getloadavg()[0]:.2f}, {args.threads} thread(s), target {args.target or 'host'}"
        + (", Winograd off" if known.direct else "")
    )

    def setup(name):
        cin, cout, kernel, stride, size, _ = SHAPES[name]
        return ConvBnRelu(cin, cout, kernel, stride).eval(), (torch.randn(1, cin, size, size),)

    print_weighted_totals(run(args, setup), models, lambda name: SHAPES[name][5])


if __name__ == "__main__":
    main()
