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


# -- the facts a Target knows, and the strings it refuses --------------------------------------
@pytest.mark.parametrize(
    "spec,kind,device,gpu",
    [("llvm", "llvm", "cpu", False), ("cuda -arch=sm_80", "cuda", "cuda", True)],
)
def test_a_target_knows_its_kind_and_device(spec, kind, device, gpu):
    target = tf.Target(spec)
    assert target.kind == kind and target.kind.name == kind and isinstance(target.kind.name, str)
    assert target.device_kind == device and target.kind.device == device
    assert target.is_gpu is gpu
    assert kind in tf.Target.list_kinds()


def test_known_kinds_each_have_a_codegen_and_a_runtime():
    from tensorforge.codegen import CODEGENS
    from tensorforge.runtime.registry import RUNTIMES
    from tensorforge.target import KINDS

    assert set(KINDS) == set(CODEGENS) == set(RUNTIMES)
    for kind, runtime in RUNTIMES.items():
        assert runtime.device == KINDS[kind].device
        assert isinstance(runtime.executable_class(), type) or kind == "cuda"


@pytest.mark.parametrize(
    "spec,message",
    [
        ("opencl", r"unknown kind 'opencl'; expected one of 'llvm'"),
        ("llvm -num-cores=4", r"unknown option '-num-cores' for kind 'llvm' \(it takes -mcpu"),
        ("cuda -mcpu=znver3", r"unknown option '-mcpu' for kind 'cuda' \(it takes -arch\)"),
        ("llvm -mtriple=aarch64-linux-gnu", r"-mtriple=aarch64-linux-gnu is another architecture"),
        ("cuda -arch=compute_90", r"-arch=compute_90 is not a GPU architecture; expected sm_XY"),
        ("cuda -arch=sm90", r"-arch=sm90 is not a GPU architecture"),
        ("llvm mcpu=znver3", r"option 'mcpu=znver3' should look like -key=value"),
        ("llvm -mcpu='znver3", r"cannot be split into words"),
    ],
)
def test_a_target_string_it_cannot_honor_raises_target_error(spec, message):
    with pytest.raises(tf.TargetError, match=message) as caught:
        tf.Target(spec)
    assert isinstance(caught.value, ValueError)


def test_the_host_triple_is_accepted():
    import llvmlite.binding as llvm

    target = tf.Target(f"llvm -mtriple={llvm.get_process_triple()}")
    assert target.mcpu == host_cpu()[0]


def test_target_with_host_as_tvm_writes_it():
    target = tf.Target("cuda -arch=sm_90", host="llvm")
    assert target.host == tf.Target("llvm") and target.kind.name == "cuda"
    assert tf.Target(target).host == target.host  # a copy keeps its host
    assert tf.Target("llvm").host is None
    with pytest.raises(tf.TargetError, match="is not a CPU target"):
        tf.Target("llvm", host="cuda -arch=sm_90")


def test_build_without_target_uses_the_target_in_scope():
    from tensorforge import te

    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    with tf.Target("cuda -arch=sm_80"):
        mod = tf.build(s, [A, B])
    assert mod.type_key == "cuda" and "sm_80" in str(mod.target)
    assert tf.build(s, [A, B]).type_key == "llvm"  # no target in scope: the host CPU


def test_cache_sizes_of_named_cpus_and_this_host():
    assert tf.Target("llvm -mcpu=znver5").cache_bytes == (48 * 1024, 1024 * 1024)
    assert tf.Target("llvm -mcpu=znver3").cache_bytes == (32 * 1024, 512 * 1024)
    # an unnamed CPU: the smallest of its vector width's
    assert tf.Target("llvm -mcpu=x86-64-v4").cache_bytes == (32 * 1024, 1024 * 1024)
    l1, l2 = tf.Target("llvm").cache_bytes
    assert 16 * 1024 <= l1 <= 256 * 1024 and l1 < l2
    with pytest.raises(tf.TargetError, match="CPU target"):
        _ = tf.Target("cuda -arch=sm_90").cache_bytes


def test_zen_4_runs_avx512_on_a_256_bit_datapath():
    # double-pumped: 512-bit registers, 256-bit units (the register tiles follow AVX2's)
    zen4 = tf.Target("llvm -mcpu=znver4")
    assert (zen4.vector_bits, zen4.vector_datapath_bits) == (512, 256)
    assert tf.Target("llvm -mcpu=znver5").vector_datapath_bits == 512
    assert tf.Target("llvm -mcpu=skylake-avx512").vector_datapath_bits == 512
    assert tf.Target("llvm -mcpu=znver3").vector_datapath_bits == 256
    from tensorforge.ops.matmul import MatmulTiles

    assert MatmulTiles.for_target(zen4).mr == 6  # as AVX2's 6 x 2, in zmm registers
    assert MatmulTiles.for_target(tf.Target("llvm -mcpu=znver5")).mr == 8


@pytest.mark.parametrize(
    "arch, opt_in",
    [("sm_90", 227 << 10), ("sm_90a", 227 << 10), ("sm_80", 163 << 10), ("sm_87", 163 << 10),
     ("sm_86", 99 << 10), ("sm_100", 227 << 10), ("sm_75", 64 << 10)],
)  # fmt: skip
def test_shared_memory_a_block_may_opt_in_to(arch, opt_in):
    """One table, which the CUDA code generator enforces and the tensor-core tiles are chosen
    by (before, the Target had a second one of six architectures: sm_100 and sm_87 got 64 KiB)."""
    assert tf.Target(f"cuda -arch={arch}").max_shared_memory_opt_in == opt_in


def test_sm_version_is_the_compute_capability():
    assert tf.Target("cuda -arch=sm_90a").sm_version == 90
    assert tf.Target("cuda -arch=sm_100").sm_version == 100
    assert tf.Target("llvm").sm_version == 0
