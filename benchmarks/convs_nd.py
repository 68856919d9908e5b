"""1-d and 3-d convolutions (Whisper's first layer, a Conformer's depthwise k = 31, a small
video block), float32 inference: eager torch vs tensorforge, same process, interleaved.

    python benchmarks/convs_nd.py [--threads 1] [--repeats 7] [--cases whisper,depthwise,...]

Each repeat times every backend in turn (a few calls each); the best over repeats is reported (the machine may be shared: the median moves with its load)
with eager / tensorforge (> 1: tensorforge is faster) and tensorforge's error against eager.
"""

from __future__ import annotations

import torch
from eager_vs_compiled import arguments, run  # benchmarks/: the script's folder is on sys.path
from torch import nn

CASES = {
    "whisper": (lambda: nn.Conv1d(80, 384, 3, padding=1), (1, 80, 3000)),
    "whisper2": (lambda: nn.Conv1d(384, 384, 3, stride=2, padding=1), (1, 384, 3000)),
    "depthwise": (lambda: nn.Conv1d(256, 256, 31, padding=15, groups=256), (1, 256, 1000)),
    "conv3d": (lambda: nn.Conv3d(16, 16, 3, padding=1), (1, 16, 16, 32, 32)),
    "conv3d_stem": (lambda: nn.Conv3d(3, 32, (3, 7, 7), (1, 2, 2), (1, 3, 3)), (1, 3, 8, 64, 64)),
}


def main() -> None:
    args = arguments(CASES)

    def setup(name):
        make, shape = CASES[name]
        return make().eval(), (torch.randn(shape),)

    run(args, setup)


if __name__ == "__main__":
    main()
