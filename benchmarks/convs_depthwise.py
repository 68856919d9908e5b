"""The depthwise convolutions of mobilenet_v3_small, efficientnet_b0 and convnext_tiny at batch 1
(224 x 224 input), float32 inference: eager torch vs tensorforge, same process, interleaved,
then each model's total weighted by how often the block occurs in it. MobileNet's and
EfficientNet's are depthwise + batch norm (folded into constant weights) + ReLU (their
Hardswish / SiLU cost the same either way); ConvNeXt's 7 x 7 ones carry a bias and no norm.

    python benchmarks/convs_depthwise.py [--models mobilenet_v3_small,efficientnet_b0,convnext_tiny]
        [--threads 1] [--repeats 7] [--cases mnv3s_dw3_16_s2_112,...] [--target "llvm -mcpu=znver3"]

Case names: the first model holding the shape, dw and the kernel, the channels, "s2" for
stride 2, and the input's size (pixels a side).
"""

from __future__ import annotations

import torch
from convs_resnet import print_weighted_totals, randomized_batch_norm
from eager_vs_compiled import arguments, run  # benchmarks/: the script's folder is on sys.path
from torch import nn

MNV3 = "mobilenet_v3_small"
EFF = "efficientnet_b0"
CNX = "convnext_tiny"

# name -> (channels, kernel, stride, input size, {model: count in it})
SHAPES = {
    "mnv3s_dw3_16_s2_112": (16, 3, 2, 112, {MNV3: 1}),
    "mnv3s_dw3_72_s2_56": (72, 3, 2, 56, {MNV3: 1}),
    "mnv3s_dw3_88_28": (88, 3, 1, 28, {MNV3: 1}),
    "mnv3s_dw5_96_s2_28": (96, 5, 2, 28, {MNV3: 1}),
    "mnv3s_dw5_240_14": (240, 5, 1, 14, {MNV3: 2}),
    "mnv3s_dw5_120_14": (120, 5, 1, 14, {MNV3: 1}),
    "mnv3s_dw5_144_14": (144, 5, 1, 14, {MNV3: 1}),
    "mnv3s_dw5_288_s2_14": (288, 5, 2, 14, {MNV3: 1}),
    "mnv3s_dw5_576_7": (576, 5, 1, 7, {MNV3: 2}),
    "effb0_dw3_32_112": (32, 3, 1, 112, {EFF: 1}),
    "effb0_dw3_96_s2_112": (96, 3, 2, 112, {EFF: 1}),
    "effb0_dw3_144_56": (144, 3, 1, 56, {EFF: 1}),
    "effb0_dw5_144_s2_56": (144, 5, 2, 56, {EFF: 1}),
    "effb0_dw5_240_28": (240, 5, 1, 28, {EFF: 1}),
    "effb0_dw3_240_s2_28": (240, 3, 2, 28, {EFF: 1}),
    "effb0_dw3_480_14": (480, 3, 1, 14, {EFF: 2}),
    "effb0_dw5_480_14": (480, 5, 1, 14, {EFF: 1}),
    "effb0_dw5_672_14": (672, 5, 1, 14, {EFF: 2}),
    "effb0_dw5_672_s2_14": (672, 5, 2, 14, {EFF: 1}),
    "effb0_dw5_1152_7": (1152, 5, 1, 7, {EFF: 3}),
    "effb0_dw3_1152_7": (1152, 3, 1, 7, {EFF: 1}),
    "cnx_dw7_96_56": (96, 7, 1, 56, {CNX: 3}),
    "cnx_dw7_192_28": (192, 7, 1, 28, {CNX: 3}),
    "cnx_dw7_384_14": (384, 7, 1, 14, {CNX: 9}),
    "cnx_dw7_768_7": (768, 7, 1, 7, {CNX: 3}),
}


class DepthwiseBnRelu(nn.Module):
    def __init__(self, channels, kernel, stride):
        super().__init__()
        self.conv = nn.Conv2d(
            channels, channels, kernel, stride, kernel // 2, groups=channels, bias=False
        )
        self.bn = randomized_batch_norm(channels)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def main() -> None:
    import argparse
    import os
    import sys

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--models", default=",".join((MNV3, EFF, CNX)))
    known, rest = pre.parse_known_args()
    models = known.models.split(",")
    names = [n for n, shape in SHAPES.items() if any(shape[4].get(m) for m in models)]
    sys.argv = [sys.argv[0], *rest]
    args = arguments(names)
    print(
        f"load {os.getloadavg()[0]:.2f}, {args.threads} thread(s), target {args.target or 'host'}"
    )

    def setup(name):
        channels, kernel, stride, size, counts = SHAPES[name]
        if CNX in counts:  # ConvNeXt's: a bias, no norm
            module = nn.Conv2d(channels, channels, kernel, stride, kernel // 2, groups=channels)
        else:
            module = DepthwiseBnRelu(channels, kernel, stride)
        return module.eval(), (torch.randn(1, channels, size, size),)

    print_weighted_totals(run(args, setup), models, lambda name: SHAPES[name][4])


if __name__ == "__main__":
    main()
