"""int8 / bfloat16 GEMMs through tensorize (ops/cpu_dot.py) against NumPy, on the host's paths
(AVX-512 vpdpbusd / vdpbf16ps, AMX where present) and on targets without the features (AVX2
multiply-adds, plain C without AVX2); the micro-kernels compile to the dot instructions for a
CPU that has them (checked in the assembly) and to none of them without."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import tensorforge as tf
from tensorforge.ops import cpu_dot, cpu_dot_kernels
from tensorforge.te.dtype import from_bfloat16, to_bfloat16

# a CPU LLVM knows with AVX-512 but none of the dot features: the micro-kernels' AVX2 path
NO_DOT = "llvm -mcpu=skylake-avx512"


def run_gemm(m, n, k, kind, tiles, rng, target=None):
    """Build the GEMM for `target` (default: this host), run it on random data, check it."""
    cpu_dot.load_microkernels(tf.Target(target) if target else None)
    s, args = cpu_dot.schedule_dot_gemm(
        m, n, k, kind, target=tf.Target(target) if target else None, tiles=tiles
    )
    f = tf.build(s, args, target=target)
    if kind == "int8":
        a = rng.integers(0, 256, (m, k)).astype("uint8")
        b = rng.integers(-128, 128, (k, n)).astype("int8")
        c = tf.nd.empty((m, n), "int32")
        f(tf.nd.array(a), tf.nd.array(b), c)
        np.testing.assert_array_equal(c.numpy(), a.astype("int64") @ b.astype("int64"))
    else:
        a, b = to_bfloat16(rng.uniform(-1, 1, (m, k))), to_bfloat16(rng.uniform(-1, 1, (k, n)))
        c = tf.nd.empty((m, n), "float32")
        f(tf.nd.array(a), tf.nd.array(b), c)
        ref = from_bfloat16(a).astype("float64") @ from_bfloat16(b).astype("float64")
        np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5, atol=1e-5)
    return s, args


SHAPES = [
    (96, 128, 256),  # whole tiles: no padding
    (37, 71, 131),  # primes: every dimension padded
    (1, 1, 1),
    (13, 16, 4),  # a row tail of the register tiles
    (64, 200, 67),  # a column tail (200 = 3 x 64 + 8)
]


@pytest.mark.parametrize("kind", ["int8", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "tiles",
    [
        cpu_dot.DotTiles(mr=48, nr=64, kc=64),
        cpu_dot.DotTiles(mr=32, nr=64, kc=64, amx=True),  # AVX-512 where AMX is absent
        cpu_dot.DotTiles(mr=16, nr=32, kc=128, amx=True, order="panels"),
    ],
    ids=["avx512", "amx", "amx-panels"],
)
def test_dot_gemm_matches_numpy(kind, shape, tiles, rng):
    s, args = run_gemm(*shape, kind, tiles, rng)
    text = str(tf.lower(s, args))
    spec = cpu_dot.KINDS[kind]
    assert spec.function in text and spec.pack in text
    # C's tiles are reset before k blocks; one block initializes them itself
    blocks = -(-shape[2] // tiles.fitted(*shape, kind).kc)
    assert ("tf_dot_reset" in text) == (blocks > 1)


@pytest.mark.parametrize("kind", ["int8", "bfloat16"])
def test_default_tiles_match_numpy(kind, rng):
    run_gemm(67, 130, 129, kind, None, rng)


@pytest.mark.parametrize("kind", ["int8", "bfloat16"])
@pytest.mark.parametrize("shape", [(37, 71, 131), (5, 16, 8), (13, 80, 260)])
@pytest.mark.parametrize(
    "target, paths",
    [
        (NO_DOT, ("avx512bw", "avx512f")),
        ("llvm -mcpu=znver3", ("avx2", "avx2")),
        ("llvm -mcpu=x86-64", ("plain C", "plain C")),
    ],
)
def test_without_the_features_the_gemm_is_widened_or_plain_c(kind, shape, target, paths, rng):
    t = tf.Target(target)
    assert not cpu_dot.has_feature(kind, t) and not cpu_dot.has_amx(kind, t)
    assert cpu_dot_kernels.vector_path(kind, t) == paths[kind != "int8"]
    tiles = cpu_dot.DotTiles.for_target(kind, t)
    assert not tiles.amx
    s, args = run_gemm(*shape, kind, tiles, rng, target=target)
    assert cpu_dot_kernels.tag(t) in str(tf.lower(s, args))
    # k in blocks: every tile but the first accumulates onto C (the init = 0 calls)
    run_gemm(*shape, kind, cpu_dot.DotTiles(mr=48, nr=64, kc=64), rng, target=target)


def test_a_gemm_in_a_target_scope_takes_that_targets_kernels():
    """schedule_dot_gemm without `target` inside `with Target(...)` names that target's
    micro-kernels (not the host's, whose AVX-512 code the AVX2 target may not run)."""
    with tf.Target("llvm -mcpu=znver3") as t:
        s, args = cpu_dot.schedule_dot_gemm(37, 71, 131, "int8")
        assert cpu_dot_kernels.tag() == cpu_dot_kernels.tag(t) == "_znver3"
    assert cpu_dot_kernels.tag(t) in str(tf.lower(s, args, target=t))


@pytest.mark.skipif(not cpu_dot.has_feature("int8"), reason="the host has no AVX512-VNNI")
@pytest.mark.parametrize("kind", ["int8", "bfloat16"])
def test_a_target_with_vnni_only(kind, rng):
    # -mattr lists the target's features: VNNI for int8, plain C for bfloat16, no AMX
    target = f"llvm -mcpu={tf.Target('llvm').mcpu} -mattr=+avx512f,+avx512bw,+avx512vnni"
    t = tf.Target(target)
    assert cpu_dot_kernels.features_of(t) == {"avx512vnni"}
    run_gemm(37, 71, 131, kind, cpu_dot.DotTiles.for_target(kind, t), rng, target=target)


def test_amx_runs_only_where_the_target_has_it():
    assert not cpu_dot_kernels.amx_runs("int8", tf.Target(NO_DOT))
    if not cpu_dot.has_amx("bfloat16"):
        assert not cpu_dot_kernels.amx_runs("bfloat16")


def test_the_tag_names_features_and_cpu():
    assert cpu_dot_kernels.tag(tf.Target(NO_DOT)) == "_skylake_avx512"
    assert cpu_dot_kernels.tag(tf.Target("llvm -mcpu=x86-64")) == "_x86_64"
    options = cpu_dot_kernels.compile_options(tf.Target(NO_DOT))
    assert "-march=skylake-avx512" in options
    assert "-mno-avx512vnni" in options and "-mno-amx-tile" in options


def assembly(march: str, *flags: str, tmp_path) -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "dot.c"
    src.write_text(cpu_dot.source())
    command = [cc, "-O3", f"-march={march}", *flags, "-DTF_TAG=_t", "-S", "-o", "-", str(src)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 and "march" in result.stderr:
        pytest.skip(f"{cc} does not know -march={march}")
    assert result.returncode == 0, result.stderr
    return result.stdout


DOT_INSTRUCTIONS = ("vpdpbusd", "vdpbf16ps", "tdpbusd", "tdpbf16ps")


def test_microkernels_use_the_dot_instructions(tmp_path):
    text = assembly("sapphirerapids", tmp_path=tmp_path)
    for instruction in DOT_INSTRUCTIONS:
        assert instruction in text


@pytest.mark.parametrize("march, register", [("znver3", "ymm"), ("skylake-avx512", "zmm")])
def test_microkernels_without_dot_instructions_widen_on_the_widest_registers(
    march, register, tmp_path
):
    text = assembly(march, tmp_path=tmp_path)
    madds = [line for line in text.splitlines() if "vpmaddwd" in line]
    fmas = [line for line in text.splitlines() if "vfmadd" in line]
    assert madds and fmas and all(register in line for line in madds + fmas)
    assert ("zmm" in text) == (register == "zmm")
    for instruction in DOT_INSTRUCTIONS:
        assert instruction not in text


def test_microkernels_without_the_features_use_none(tmp_path):
    flags = [f"-mno-{feature}" for feature in cpu_dot_kernels.FEATURES]
    text = assembly("sapphirerapids", *flags, tmp_path=tmp_path)
    for instruction in DOT_INSTRUCTIONS:
        assert instruction not in text


def test_bad_tiles_are_refused():
    with pytest.raises(tf.ScheduleError, match="multiple of 4"):
        cpu_dot.dot_intrin("int8", 8, 6)
    with pytest.raises(tf.ScheduleError, match="nr must be a multiple of 16"):
        cpu_dot.dot_intrin("bfloat16", 8, 8, nr=40)
    with pytest.raises(tf.ScheduleError, match="kind must be one of"):
        cpu_dot.schedule_dot_gemm(8, 16, 16, "int4")
    with pytest.raises(tf.ScheduleError, match="order must be"):
        cpu_dot.schedule_dot_gemm(8, 16, 16, "int8", tiles=cpu_dot.DotTiles(8, 16, 16, order="x"))


def test_k_blocks_are_balanced():
    assert cpu_dot.balanced_kc(1031, 512, 4) == 344  # 3 blocks: k padded to 1032, not 1536
    assert cpu_dot.balanced_kc(1000, 2048, 64) == 1024  # one block, whole AMX tiles
    assert cpu_dot.balanced_kc(1024, 512, 4) == 512


@pytest.mark.parametrize(
    "cpu, features",
    [
        ("sapphirerapids", {"avx512vnni", "avx512bf16", "amx-tile", "amx-int8", "amx-bf16"}),
        ("znver4", {"avx512vnni", "avx512bf16"}),
        ("cascadelake", {"avx512vnni"}),
        ("skylake-avx512", set()),
    ],
)
def test_a_named_cpu_without_mattr_has_its_dot_features(cpu, features):
    """`-mcpu=sapphirerapids` alone takes the VNNI, BF16 and AMX paths, as naming the CPU says."""
    target = tf.Target(f"llvm -mcpu={cpu}")
    dot = {"avx512vnni", "avx512bf16", "amx-tile", "amx-int8", "amx-bf16"}
    assert target.cpu_features & dot == features
    assert cpu_dot.has_amx("int8", target) == ("amx-int8" in features)


@pytest.mark.parametrize("kind", ["int8", "bfloat16"])
def test_a_gemm_for_a_named_cpu_runs_where_the_host_has_its_features(kind, rng):
    host = tf.Target("llvm").cpu_features
    named = tf.Target("llvm -mcpu=sapphirerapids")
    if not named.cpu_features <= host or not cpu_dot.has_amx(kind):
        pytest.skip("this host lacks sapphirerapids' features (or the OS grants no AMX)")
    tiles = cpu_dot.DotTiles.for_target(kind, named)
    assert tiles.amx
    run_gemm(37, 71, 131, kind, tiles, rng, target="llvm -mcpu=sapphirerapids")


def test_a_dot_call_takes_the_rows_it_is_given():
    """dot_intrin(rows=): the micro-kernel's calls compute that many rows (a run-time count of
    the enclosing loops); the reset, outside the k blocks, clears the whole mr-row tile."""
    from tensorforge.te.visit import walk

    rows = tf.te.var("rows_left")
    intrin = cpu_dot.dot_intrin("bfloat16", 64, 128, 64, rows=rows)
    body, reset, update = intrin.body[0], intrin.reset[0], intrin.update[0]
    assert any(n is rows for n in walk(body)) and any(n is rows for n in walk(update))
    assert not any(n is rows for n in walk(reset))
    plain = cpu_dot.dot_intrin("bfloat16", 64, 128, 64)
    assert not any(getattr(n, "name", None) == "rows_left" for n in walk(plain.body[0]))
