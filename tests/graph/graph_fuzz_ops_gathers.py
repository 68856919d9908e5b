"""Gathers for graph_fuzz.py's programs: grid_sample of images and volumes (every mode, padding
and alignment), pdist, fold, max_unpool of a max pool's indices, 3-d adaptive pools, bucketize,
searchsorted and histc."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.graph.graph_fuzz_products import MAX_NUMEL

if TYPE_CHECKING:
    from tests.graph.graph_fuzz import Generator


def op_gathers(g: Generator):
    rng = g.rng
    kind = rng.randrange(6)
    if kind == 5:  # pdist of a matrix's rows (a NaN in part)
        x = g.pick(lambda t: t.is_floating_point() and t.dim() == 2 and t.numel() <= MAX_NUMEL)
        if x is None:
            return None
        p = rng.choice(["2.0", "1.0", "0.0", "float('inf')", "1.5"])
        return f"F.pdist(torch.where({x} > 1.5, float('nan'), {x}), {p}).sum().expand_as({x})"
    if kind == 0:  # grid_sample of an image or a volume, the grid an input (out of range in part)
        x = g.pick(lambda t: t.is_floating_point() and t.dim() in (4, 5) and t.numel() <= MAX_NUMEL)
        if x is None:
            return None
        n, volume = g.samples[x].shape[0], g.samples[x].dim() == 5
        points = (rng.choice([1, 3, 5]), rng.choice([1, 4, 7]))
        points = (rng.choice([1, 2]), *points) if volume else points
        grid = g.new_input((n, *points, 3 if volume else 2))
        modes = ["'bilinear'", "'nearest'"] + ([] if volume else ["'bicubic'"])
        mode = rng.choice(modes)
        padding = rng.choice(["'zeros'", "'border'", "'reflection'"])
        return f"F.grid_sample({x}, {grid}, {mode}, {padding}, align_corners={rng.random() < 0.5})"
    if kind == 1:  # fold of columns
        k, s = rng.choice([1, 2, 3]), rng.choice([1, 2])
        p, size = rng.randint(0, k // 2), [rng.choice([3, 5, 8]) for _ in range(2)]
        blocks = 1
        for n in size:
            blocks *= (n + 2 * p - k) // s + 1
        cols = g.new_input((rng.choice([1, 2]), rng.choice([1, 3]) * k * k, blocks))
        return f"F.fold({cols}, {tuple(size)}, {k}, padding={p}, stride={s})"
    x = g.pick(lambda t: t.is_floating_point() and t.dim() in (4, 5) and t.numel() <= MAX_NUMEL)
    if x is None:
        return None
    t = g.samples[x]
    dims = t.dim() - 2
    if kind == 2:  # max_unpool of the pool's values (or a function of them)
        k, s = rng.choice([2, 3]), rng.choice([1, 2, 3])
        if min(t.shape[2:]) < k:
            return None
        p = rng.randint(0, k // 2)
        pool = f"F.max_pool{dims}d({x}, {k}, {s}, {p}, return_indices=True)"
        size = f"{x}.shape[-{dims}:]"
        return f"F.max_unpool{dims}d(*{pool}, {k}, {s}, {p}, output_size={size})"
    if kind == 3:
        x3 = x if dims == 3 else f"{x}.unsqueeze(2)"
        out = tuple(rng.choice([1, 2, 3, 5]) for _ in range(3))
        return rng.choice([f"F.adaptive_avg_pool3d({x3}, {out})", f"F.adaptive_max_pool3d({x3}, {out})"])  # fmt: skip
    if rng.random() < 0.3:  # histc: a given range or the data's, few bins or many (a fraction
        # of the elements, plus a function of x: counts alone are constant planes, as below)
        bins = rng.choice([1, 5, 16, 33, 100])
        lo, hi = rng.choice([(0, 0), (-1, 1), (-2.5, 0.5)])
        counts = f"torch.histc({x}, {bins}, {lo}, {hi}) / {x}.numel()"
        return f"{x}.flatten()[:1] * 0.5 + {counts}.sum() + {counts}[:1]"
    boundaries = sorted(round(rng.uniform(-2, 2), 1) for _ in range(rng.randint(1, 9)))
    right = rng.random() < 0.5
    # (scaled, plus x: bucket numbers alone, clamped and normalized later, made constant planes
    # whose instance norm is 0 in the kernel and 3e-5 in eager, past the fuzzer's tolerance)
    return f"torch.bucketize({x}, torch.tensor({boundaries}), right={right}) * 0.125 + {x} * 0.5"
