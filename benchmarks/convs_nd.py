"""1-d and 3-d convolutions (Whisper's first layer, a Conformer's depthwise k = 31, a small
video block), float32 inference: eager torch vs tensorforge, same process, interleaved.

    python benchmarks/convs_nd.py [--threads 1] [--repeats 7] [--cases whisper,depthwise,...]

Each repeat times every backend in turn (a few calls each); the best over repeats is reported (the machine may be shared: the median moves with its load)
with eager / tensorforge (> 1: tensorforge is faster) and tensorforge's error against eager.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn
from torch_models import time_calls  # benchmarks/: the script's folder is on sys.path

CASES = {
    "whisper": (lambda: nn.Conv1d(80, 384, 3, padding=1), (1, 80, 3000)),
    "whisper2": (lambda: nn.Conv1d(384, 384, 3, stride=2, padding=1), (1, 384, 3000)),
    "depthwise": (lambda: nn.Conv1d(256, 256, 31, padding=15, groups=256), (1, 256, 1000)),
    "conv3d": (lambda: nn.Conv3d(16, 16, 3, padding=1), (1, 16, 16, 32, 32)),
    "conv3d_stem": (lambda: nn.Conv3d(3, 32, (3, 7, 7), (1, 2, 2), (1, 3, 3)), (1, 3, 8, 64, 64)),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["TF_NUM_THREADS"] = str(args.threads)  # tensorforge's kernels' threads
    import tensorforge  # noqa: F401  (registers the backend)

    print(f"{'case':12} {'eager ms':>9} {'tf ms':>9} {'eager/tf':>9} {'error':>9}")
    for name in args.cases.split(","):
        make, shape = CASES[name]
        torch._dynamo.reset()  # (a model compiled after another of its class timed 5-50x slow)
        torch.manual_seed(0)
        model, x = make().eval(), torch.randn(shape)
        with torch.no_grad():
            compiled = torch.compile(model, backend="tensorforge")
            expected, got = model(x), compiled(x)
            error = ((got - expected).abs().max() / expected.abs().max()).item()
            eager, ours = [], []
            for _ in range(args.repeats):
                eager.append(time_calls(model, x, 3))
                ours.append(time_calls(compiled, x, 3))
        e, t = min(eager) * 1e3, min(ours) * 1e3
        print(f"{name:12} {e:9.3f} {t:9.3f} {e / t:9.2f} {error:9.1e}")


if __name__ == "__main__":
    main()
