"""The operator library's best schedules are correct at small and odd sizes."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import ops
from tensorforge.ops.conv2d import schedule_conv2d
from tensorforge.ops.layer_norm import schedule_layer_norm
from tensorforge.ops.softmax import schedule_softmax
from tensorforge.testing.check import _aligned_copy


def run(mod, *arrays):
    arrays = [_aligned_copy(a) for a in arrays]
    mod(*arrays)
    return arrays


@pytest.mark.parametrize(
    "n,m,k",
    [
        (64, 64, 64),
        (37, 45, 19),
        (100, 33, 70),
        (1, 7, 3),
        (200, 150, 600),
        (53, 300, 1100),
        (13, 530, 1030),
    ],
)
@pytest.mark.parametrize("parallel", [True, False])
def test_matmul(n, m, k, parallel, rng):
    s, args = ops.schedule_matmul(n, m, k, parallel=parallel)
    mod = tf.build(s, args)
    a = rng.uniform(-1, 1, (n, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, m)).astype("float32")
    _, _, c = run(mod, a, b, np.full((n, m), np.nan, "float32"))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,m", [(8, 64), (5, 37), (3, 1), (2, 1000), (3, 4097)])
def test_softmax(n, m, rng, cpu_target):
    s, args = schedule_softmax(n, m)
    mod = tf.build(s, args, target=cpu_target)
    x = rng.standard_normal((n, m)).astype("float32") * 4
    _, y = run(mod, x, np.full((n, m), np.nan, "float32"))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("n,m", [(8, 64), (5, 37), (3, 1), (2, 1000), (3, 4097)])
def test_layer_norm(n, m, rng, cpu_target):
    s, args = schedule_layer_norm(n, m)
    mod = tf.build(s, args, target=cpu_target)
    x = rng.standard_normal((n, m)).astype("float32")
    g = rng.standard_normal(m).astype("float32")
    b = rng.standard_normal(m).astype("float32")
    *_, y = run(mod, x, g, b, np.full((n, m), np.nan, "float32"))
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "c,h,w,f", [(8, 13, 17, 12), (4, 56, 56, 8), (3, 5, 5, 5), (7, 14, 14, 13), (2, 1, 29, 1)]
)
def test_conv2d(c, h, w, f, rng, cpu_target):
    s, args = schedule_conv2d(1, c, h, w, f)
    mod = tf.build(s, args, target=cpu_target)
    d = rng.standard_normal((1, c, h, w)).astype("float32")
    wt = rng.standard_normal((f, c, 3, 3)).astype("float32")
    _, _, o = run(mod, d, wt, np.full((1, f, h, w), np.nan, "float32"))
    dp = np.pad(d, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = sum(
        np.einsum("bchw,fc->bfhw", dp[:, :, ky : ky + h, kx : kx + w], wt[:, :, ky, kx])
        for ky in range(3)
        for kx in range(3)
    )
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-4)


def test_fused_elementwise(rng, cpu_target):
    x, y = ops.fused_chain(33, 70)
    s = ops.schedule_elementwise(y)
    text = str(tf.lower(s, [x, y]))
    # fused and split: one loop (+ a peeled tail), the input fetched a few KiB ahead by lines
    assert text.count("for ") - text.count("for x.line") == 1 and "prefetch(x[" in text
    mod = tf.build(s, [x, y], target=cpu_target)
    xa = rng.standard_normal((33, 70)).astype("float32") * 5
    _, ya = run(mod, xa, np.full((33, 70), np.nan, "float32"))
    np.testing.assert_allclose(
        ya, 1 / (1 + np.exp(-(np.maximum(xa, 0) * 2 + 1))), rtol=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("n,m,k", [(37, 45, 19), (13, 530, 1030)])
def test_matmul_on_the_c_target_matches_llvm(n, m, k, rng):
    s, args = ops.schedule_matmul(n, m, k, parallel=True)
    a = rng.uniform(-1, 1, (n, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, m)).astype("float32")
    outs = [
        run(tf.build(s, args, target=t), a, b, np.zeros((n, m), "float32"))[2]
        for t in "c llvm".split()
    ]
    np.testing.assert_allclose(outs[0], a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_matmul_blocks_k_only_when_a_sliver_of_a_overflows_l1():
    from tensorforge.ops.matmul import MatmulTiles

    tiles = MatmulTiles(mr=6, nr=16)
    assert not tiles.needs_k_blocks(1024, 4)  # 24 KB of A per micro-tile: streamed from its rows
    assert tiles.needs_k_blocks(2048, 4)
    # the sliver is measured against the target's own L1: 32 KB of A (8 rows) fits 48 KB (Zen
    # 5, Ice Lake and newer), not 32 KB (Skylake-SP); Zen 4's 6 rows, 24 KB, fit its 32 KB
    for cpu, rows, packs in (
        ("znver4", 6, False),
        ("znver5", 8, False),
        ("skylake-avx512", 8, True),
    ):
        wide = MatmulTiles.for_target(tf.Target(f"llvm -mcpu={cpu}"))
        assert wide.mr == rows and wide.needs_k_blocks(1024, 4) == packs
    text = str(
        tf.lower(*ops.schedule_matmul(64, 64, 4096, parallel=False))
    )  # k > kc on every target
    assert "packedA" in text and "k.c.outer" in text
    assert "packedA" not in str(tf.lower(*ops.schedule_matmul(64, 64, 512, parallel=False)))


@pytest.mark.parametrize(
    "cpu,mr,nr",
    [
        ("skylake-avx512", None, None),
        ("skylake-avx512", 6, 48),
        ("haswell", None, None),
        ("haswell", 4, 24),
    ],
)
def test_matmul_micro_kernel_keeps_its_accumulators_in_registers(cpu, mr, nr):
    """Compiled (not run) for AVX-512 and AVX2: the FMAs read no stack slots and no vector is
    assembled lane by lane (a <48 x float> tile once went through the stack: 12x slower). The
    3-vector-wide tiles fit the registers: 18 of 32 zmm, 12 of 16 ymm."""
    from tensorforge.ops.matmul import MatmulTiles

    target = tf.Target(f"llvm -mcpu={cpu}")
    tiles = MatmulTiles(mr=mr, nr=nr, nb=2 * nr) if nr else None
    s, args = ops.schedule_matmul(96, 96, 96, target=target, parallel=False, tiles=tiles)
    asm = tf.build(s, args, target=target).get_source("asm")
    fmas = [line for line in asm.splitlines() if "vfmadd" in line]
    assert len(fmas) >= 24
    assert not [line for line in fmas if "rsp" in line]
    assert asm.count("vinsertps") < 16 and asm.count("(%rsp)") < 40


def test_conv2d_row_tail_broadcasts_weights_without_a_gather(rng):
    """The masked last vector of a row reads each weight once and broadcasts it (a masked gather
    of 16 copies of one address made conv2d 2.5x slower on AVX-512)."""
    s, args = schedule_conv2d(1, 3, 7, 15, 5, pad=0, parallel=False, x_vectors=1)
    mod = tf.build(s, args)
    assert "masked.gather" not in mod.get_source("ll")
    x = rng.uniform(-1, 1, (1, 3, 7, 15)).astype("float32")
    w = rng.uniform(-1, 1, (5, 3, 3, 3)).astype("float32")
    _, _, out = run(mod, x, w, np.full((1, 5, 5, 13), np.nan, "float32"))
    ref = np.zeros((1, 5, 5, 13), "float32")
    for ky in range(3):
        for kx in range(3):
            ref[0] += np.einsum("fc,chw->fhw", w[:, :, ky, kx], x[0, :, ky : ky + 5, kx : kx + 13])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_matmul_with_many_column_blocks_packs_b_inside_each():
    from tensorforge.ops.matmul import MatmulTiles

    tiles = MatmulTiles(mr=6, nr=16, nb=32, kc=256)  # 17 column blocks on any host
    text = str(tf.lower(*ops.schedule_matmul(13, 530, 1030, tiles=tiles)))
    assert "packedA" in text  # the blocked schedule (k past what fits L1)
    assert "prefetch(packedA[" in text  # the A sliver fetched ahead in the micro-kernel loop
    # packedB is allocated inside the parallel column-block loop, not packed in a pass before it
    lines = text.splitlines()
    at = next(n for n, line in enumerate(lines) if "packedB = allocate" in line)
    assert lines[at - 1].strip().startswith("for j.outer") and "# parallel" in lines[at - 1]


def test_a_packed_panel_holds_only_the_k_rows_that_exist():
    """k = 1030 in blocks of 256 relaxes to 1280 rows; the region is cut back to the domain."""
    from tensorforge.ops.matmul import MatmulTiles

    tiles = MatmulTiles(mr=6, nr=16, nb=32, kc=256)
    s, args = ops.schedule_matmul(13, 530, 1030, tiles=tiles)
    text = str(tf.lower(s, args))
    assert "packedB = allocate(float32[32960]" in text  # 2 panels x 1030 x 16
    assert "range(1280)" not in text
    mod = tf.build(s, args)
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (13, 1030)).astype("float32")
    b = rng.uniform(-1, 1, (1030, 530)).astype("float32")
    _, _, c = run(mod, a, b, np.full((13, 530), np.nan, "float32"))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_conv2d_register_tile_filters_follow_the_target():
    """Accumulators f_block x x_vectors: up to 16 of AVX-512's 32 registers, 12 of AVX2's 16."""
    from tensorforge.ops.conv2d import filter_block

    avx512, avx2 = tf.Target("llvm -mcpu=skylake-avx512"), tf.Target("llvm -mcpu=znver3")
    assert [filter_block(x, avx512) for x in (1, 2, 3, 4)] == [8, 8, 4, 4]
    assert [filter_block(x, avx2) for x in (1, 2, 3, 4)] == [4, 4, 4, 2]
