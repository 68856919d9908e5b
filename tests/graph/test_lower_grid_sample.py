"""F.grid_sample (bilinear, nearest, bicubic; padding zeros, border, reflection; align_corners
both; over images and volumes) as a kernel, against eager torch: grid points inside, past the edges and far outside, odd
image sizes, a 1-pixel image, bfloat16, and on the GPU."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph import registry  # noqa: E402
from tensorforge.graph.registry import EAGER_ON_CPU  # noqa: E402
from tests.graph.test_lowering import check, check_bfloat16, rand  # noqa: E402

# (mode, padding, align_corners): each mode, each padding and both alignments at least once
SAMPLINGS = [
    ("bilinear", "zeros", False), ("bilinear", "reflection", True),
    ("nearest", "reflection", False),
    ("bicubic", "zeros", True), ("bicubic", "reflection", False), ("bicubic", "border", True),
]  # fmt: skip


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back
    # the kernels the GPU takes, checked on the CPU too (there they run eagerly: eager_on_cpu)
    monkeypatch.setattr(registry, "EAGER_ON_CPU", {})


def samples(x, grid):
    return tuple(
        F.grid_sample(x, grid, mode=m, padding_mode=p, align_corners=a) for m, p, a in SAMPLINGS
    )


def inputs(seed, h=7, w=5):
    grid = rand(2, 4, 6, 2, seed=seed + 1) * 0.9
    grid[0, 0, :4] = torch.tensor([[1.0, -1.0], [3.5, -2.7], [-7.3, 1.1], [0.0, 1.0]])
    return [rand(2, 3, h, w, seed=seed), grid]


def test_grid_sample():
    check(samples, *inputs(1), rtol=2e-5)


def test_one_pixel_images_and_bfloat16():
    # a 1-pixel dimension: reflection's span is 0 with align_corners (torch reflects onto 0)
    def one_pixel(x, grid):
        return F.grid_sample(x[:, :, :1], grid, "bicubic", "reflection", align_corners=True)

    check(one_pixel, *inputs(3), rtol=2e-5)
    x, grid = inputs(5)

    def border(x, grid):
        return (F.grid_sample(x, grid, padding_mode="border", align_corners=False),)

    check_bfloat16(border, x.bfloat16(), grid.bfloat16())


def volume_samples(x, grid):
    return tuple(
        F.grid_sample(x, grid, mode=m, padding_mode=p, align_corners=a)
        for m, p, a in (
            ("bilinear", "zeros", False), ("bilinear", "reflection", True),
            ("nearest", "border", False),
        )
    )  # fmt: skip


def volume_inputs(seed):
    grid = rand(2, 3, 4, 5, 3, seed=seed + 1) * 1.1
    grid[0, 0, 0, :4] = torch.tensor(
        [[1.0, -1.0, 0.3], [3.5, -2.7, 1.9], [-7.3, 1.1, -1.0], [0.0, 1.0, -4.2]]
    )
    return [rand(2, 3, 5, 7, 4, seed=seed), grid]


def test_grid_sample_3d():
    # trilinear and nearest over a volume of odd extents, points past the edges and far out
    check(volume_samples, *volume_inputs(11), rtol=2e-5)


def test_grid_sample_and_adaptive_max_pool3d_run_eagerly_on_the_cpu(monkeypatch):
    monkeypatch.setattr(registry, "EAGER_ON_CPU", EAGER_ON_CPU)  # (slower than eager's there)

    def fn(x, grid):
        return F.grid_sample(x, grid, align_corners=False), F.adaptive_max_pool3d(x, (1, 2, 2))

    check(fn, *inputs(9), fallbacks=2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_grid_sample_matches_eager_on_the_gpu():
    from tests.graph.test_lower_fold import on_the_gpu

    on_the_gpu(samples, inputs(7), rtol=2e-5)
    on_the_gpu(volume_samples, volume_inputs(13), rtol=2e-5)
