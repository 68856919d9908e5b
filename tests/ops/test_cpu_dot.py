"""int8 / bfloat16 dot-product GEMMs through tensorize (ops/cpu_dot.py) against NumPy; the
micro-kernels compile to vpdpbusd / vdpbf16ps for a CPU that has them (checked in the
assembly), and fall back to plain C where the host lacks them."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import tensorforge as tf
from tensorforge.ops import cpu_dot
from tensorforge.te.dtype import from_bfloat16, to_bfloat16


@pytest.fixture(scope="module", autouse=True)
def microkernels():
    cpu_dot.load_microkernels()


@pytest.mark.parametrize("kind", ["int8", "bfloat16"])
@pytest.mark.parametrize(
    "shape, mr, kc",
    [
        ((64, 48, 512), 8, 256),
        ((12, 16, 8), 4, 8),
        ((5, 32, 4), 5, 4),
        ((12, 128, 64), 6, 32),  # 64-wide tiles (the permuting micro-kernel), 4 + 2 rows
        ((5, 64, 8), 5, 8),
    ],
)
@pytest.mark.parametrize("order", ["rows", "panels"])
def test_dot_gemm_matches_numpy(kind, shape, mr, kc, order, rng):
    m, n, k = shape
    s, args = cpu_dot.schedule_dot_gemm(m, n, k, kind, mr=mr, kc=kc, order=order)
    text = str(tf.lower(s, args))
    assert cpu_dot.KINDS[kind][4] in text and "tf_dot_reset" in text
    f = tf.build(s, args)
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


@pytest.mark.parametrize("march, instructions", [("sapphirerapids", ("vpdpbusd", "vdpbf16ps"))])
def test_microkernels_use_the_dot_instructions(march, instructions, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "dot.c"
    src.write_text(cpu_dot.source())
    result = subprocess.run(
        [cc, "-O3", f"-march={march}", "-S", "-o", "-", str(src)], capture_output=True, text=True
    )
    if result.returncode != 0 and "march" in result.stderr:
        pytest.skip(f"{cc} does not know -march={march}")
    assert result.returncode == 0, result.stderr
    for instruction in instructions:
        assert instruction in result.stdout


def test_bad_tiles_are_refused():
    with pytest.raises(tf.ScheduleError, match="multiple of 4"):
        cpu_dot.dot_intrin("int8", 8, 6)
    with pytest.raises(tf.ScheduleError, match="n = 40 is not a multiple of 16"):
        cpu_dot.schedule_dot_gemm(8, 40, 16, "int8")
