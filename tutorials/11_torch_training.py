"""Tutorial 11: training a PyTorch model through `torch.compile(model, backend="tensorforge")`.

Tutorial 9 compiled a model for inference: under torch.no_grad() its weights are frozen into the
compiled graph. A call that needs gradients takes another path (graph/training.py):
AOTAutograd traces the forward and the backward together, splits them into two ATen graphs (the
forward saves what the backward reads), and tensorforge compiles each into fused kernels. Nothing
is frozen there: the weights are inputs of every call, so the optimizer's updates are seen by the
next step, and batch norm's running statistics are written back into the module as eager torch
writes them. What has no lowering (convolution_backward, dropout's random mask) runs in eager
torch inside the compiled graphs, as Inductor runs it.

Run: python tutorials/11_torch_training.py [--small]
"""

import copy
import sys
import time

import torch
from torch import nn

SMALL = "--small" in sys.argv
width, steps = (32, 4) if SMALL else (256, 30)


def make_model():
    """A small convolutional classifier of 16 x 16 images into 10 classes."""
    return nn.Sequential(
        nn.Conv2d(3, width // 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(width // 4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(width // 4 * 64, width),
        nn.GELU(),
        nn.LayerNorm(width),
        nn.Linear(width, 10),
    )


torch.manual_seed(0)
model = make_model()
reference = copy.deepcopy(model)  # the same weights, trained eagerly beside it
images = torch.randn(steps, 32, 3, 16, 16)
labels = torch.randint(0, 10, (steps, 32))

# 1. Compile and train. The loop is plain torch: the loss and its backward go through the
#    compiled forward and backward graphs; the optimizer updates the module's own parameters.
from tensorforge.graph import backend  # noqa: E402  (or backend="tensorforge" where installed)

compiled = torch.compile(model, backend=backend)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
eager_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()


def train_step(net, opt, x, y):
    opt.zero_grad()
    loss = loss_fn(net(x), y)
    loss.backward()
    opt.step()
    return loss.item()


# 2. Check it against eager torch, step by step: the two losses follow each other (float32
#    sums in another order differ in their last bits, and training amplifies that slowly).
times = {"tensorforge": 0.0, "eager": 0.0}
for step in range(steps):
    start = time.perf_counter()
    ours = train_step(compiled, optimizer, images[step], labels[step])
    if step:  # (the first step compiles)
        times["tensorforge"] += time.perf_counter() - start
    start = time.perf_counter()
    theirs = train_step(reference, eager_optimizer, images[step], labels[step])
    if step:
        times["eager"] += time.perf_counter() - start
    print(f"step {step:2}: loss {ours:.4f} (eager {theirs:.4f})")
    assert abs(ours - theirs) <= 1e-3 * max(1.0, abs(theirs)), "diverged from eager"

# 3. The batch norm's running statistics were updated by the compiled steps too.
bn, bn_eager = model[1], reference[1]
print(
    "running mean, largest difference:",
    (bn.running_mean - bn_eager.running_mean).abs().max().item(),
)
assert torch.allclose(bn.running_mean, bn_eager.running_mean, atol=1e-4)

# 4. Time. A step's time against eager's (this small model is launch-bound: the larger ones in
#    benchmarks/torch_training.py show the steady state).
if steps > 1:
    per = {k: v / (steps - 1) * 1e3 for k, v in times.items()}
    print(f"a step: tensorforge {per['tensorforge']:.2f} ms, eager {per['eager']:.2f} ms")
