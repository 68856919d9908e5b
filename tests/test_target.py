"""Target: named CPUs imply their vector features; explicit -mattr wins; the host is the default."""

import pytest

import tensorforge as tf
from tensorforge import ops
from tensorforge.target import host_cpu


@pytest.mark.parametrize(
    "spec,bits",
    [
        ("llvm -mcpu=skylake-avx512", 512),
        ("llvm -mcpu=znver4", 512),
        ("llvm -mcpu=haswell", 256),
        ("llvm -mcpu=znver3", 256),
        ("llvm -mcpu=x86-64", 128),  # a baseline CPU: SSE2
        ("llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma,+avx", 256),  # -mattr says what is used
    ],
)
def test_a_named_cpu_sets_the_vector_width_schedules_use(spec, bits):
    target = tf.Target(spec)
    assert target.vector_bits == bits
    assert target.vector_lanes("float32") == bits // 32


def test_the_host_target_uses_the_host_features():
    name, features = host_cpu()
    target = tf.Target("llvm")
    assert target.mcpu == name and target.features == features


def test_a_schedule_for_a_named_avx512_cpu_compiles_to_512_bit_fmas():
    target = tf.Target("llvm -mcpu=skylake-avx512")
    s, args = ops.schedule_matmul(64, 64, 64, target=target, parallel=False)
    asm = tf.build(s, args, target=target).get_source("asm")  # compiled, not run
    assert "vfmadd" in asm and "zmm" in asm
