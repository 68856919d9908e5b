"""CUDA codegen without a GPU: hand-built PrimFuncs -> CUDA C -> checked text -> nvcc --ptx."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tensorforge.codegen.cuda import CUDACodegen
from tensorforge.errors import BuildError
from tensorforge.ir.stmt import Allocate, PrimFunc, Seq
from tensorforge.te.expr import Var
from tests.codegen.cuda_kernel_builders import (
    TARGET,
    all_kernels,
    big_shared,
    matmul_shared,
    two_stages,
    vector4,
    vector_add,
    vector_add_dynamic,
)
from tests.codegen.cuda_reduce_kernels import block_reduce, guarded_reduce, row_reduce
from tests.ir.builders import bind, buf, c, f32, load, loop, store

# -- compiling with the local nvcc ------------------------------------------------------------

NVCC = shutil.which("nvcc")


def nvcc_ptx(text: str, tmp_path) -> str:
    source = tmp_path / "kernel.cu"
    source.write_text(text)
    out = tmp_path / "kernel.ptx"
    result = subprocess.run(
        [NVCC, "-arch=sm_90", "--ptx", "-o", str(out), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"nvcc failed:\n{result.stderr}\n--- source ---\n{text}"
    return out.read_text()


def generate(func: PrimFunc):
    return CUDACodegen().generate(func, TARGET)


# -- tests: every kernel generates, says what it should, and compiles -------------------------


@pytest.mark.parametrize("name", list(all_kernels()))
def test_kernel_generates_and_compiles(name, tmp_path):
    kernel = all_kernels()[name]()
    source = generate(kernel.func)
    assert source.target == "cuda"
    assert source.entry in source.text
    assert "__launch_bounds__(" in source.text and "__restrict__" in source.text
    for expected in kernel.expect:
        assert expected in source.text, f"{expected!r} missing from:\n{source.text}"
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    ptx = nvcc_ptx(source.text, tmp_path)
    assert f".entry {source.entry}" in ptx


def test_elementwise_launch_and_params():
    source = generate(vector_add(1000).func)
    assert source.launch.grid == (8, 1, 1)
    assert source.launch.block == (128, 1, 1)
    assert source.launch.shared_bytes == 0
    assert [(p.name, p.kind, p.dtype, p.shape) for p in source.params] == [
        ("A", "buffer", "float32", (1000,)),
        ("B", "buffer", "float32", (1000,)),
        ("C", "buffer", "float32", (1000,)),
    ]
    assert "const float* __restrict__ A" in source.text  # read-only inputs
    assert (
        "float* __restrict__ C" in source.text and "const float* __restrict__ C" not in source.text
    )
    assert "const int bx = (int)blockIdx.x;" in source.text
    assert "if (((bx * 128) + tx) < 1000)" in source.text


def test_symbolic_grid_is_a_host_expression():
    source = generate(vector_add_dynamic().func)
    assert source.launch.grid == ("((n + 127) // 128)", 1, 1)
    n_param = next(p for p in source.params if p.name == "n")
    assert n_param.kind == "scalar" and n_param.bound_from_shape
    assert [p.shape for p in source.params if p.kind == "buffer"] == [("n",)] * 3


def test_bare_symbolic_grid_is_the_param_name():
    n = Var("n")
    A = buf("A", n)
    bx = Var("bx")
    func = PrimFunc("f", (A, n), bind(bx, n, "blockIdx.x", store(A, bx, f32(1.0))))
    assert generate(func).launch.grid == ("n", 1, 1)


def test_float4_load_and_store():
    text = generate(vector4().func).text
    assert "*reinterpret_cast<const float4*>(&A[" in text
    assert "*reinterpret_cast<float4*>(&B[" in text and "make_float4(" in text
    assert "aligned" in text  # the comment saying why the wide access is safe


def test_unaligned_ramp_falls_back_to_lanes():
    source = generate(vector4(offset=1).func)
    assert "float4" not in source.text
    assert source.vector_alignment == ()
    assert generate(vector4().func).vector_alignment == (("A", 16), ("B", 16))


def test_shared_matmul_syncs_and_shared_arrays():
    text = generate(matmul_shared().func).text
    assert "__shared__ __align__(16) float A_shared[256];" in text
    assert text.count("__syncthreads();") == 2  # before overwriting the tiles, and before reading
    assert "float acc[1];" in text


def test_sibling_stage_guard_keeps_the_barrier_outside():
    text = generate(two_stages().func).text
    sync_line = next(line for line in text.splitlines() if "__syncthreads" in line)
    guard_line = next(line for line in text.splitlines() if "if (t2 < 64)" in line)
    assert text.index(sync_line) < text.index(guard_line)
    assert len(sync_line) - len(sync_line.lstrip()) <= len(guard_line) - len(guard_line.lstrip())


def test_guarded_allreduce_runs_in_all_threads():
    lines = generate(guarded_reduce().func).text.splitlines()
    reduce_line = next(line for line in lines if "// ThreadAllReduce" in line)
    k_line = next(line for line in lines if "const int k = " in line)
    # a divergent `if (k < 100)` around the shuffles and barriers would hang the block
    assert _indent(reduce_line) == _indent(k_line)
    # threads beyond 100 add the identity
    assert any("if ((((int)threadIdx.x) < 100) && (k < 100)) {" in line for line in lines)
    store_line = next(line for line in lines if "B[i] = red[0];" in line)
    assert lines.index(store_line) > lines.index(reduce_line)
    assert any(line.strip() == "if (k < 100) {" for line in lines[lines.index(reduce_line) :])


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


@pytest.mark.parametrize(
    "make, strategy",
    [
        (lambda: row_reduce(extent=32), "warp"),
        (lambda: row_reduce(extent=20), "warp"),
        (lambda: row_reduce(extent=128), "warps+shared"),
        (lambda: row_reduce(extent=100), "warps+shared"),
        (lambda: block_reduce(8, 16, "x"), "warp"),
        (lambda: block_reduce(4, 128, "x"), "warps+shared"),
        (lambda: block_reduce(4, 100, "x"), "shared-tree"),
        (lambda: block_reduce(4, 100, "y"), "shared-tree"),
    ],
)
def test_allreduce_strategy(make, strategy):
    assert f", {strategy}\n" in generate(make().func).text


def test_argmax_combines_both_values():
    text = generate(row_reduce(extent=100, reducer="argmax").func).text
    assert "__shfl_down_sync" in text
    assert "const int red_new" in text and "const float red_new" in text  # tuple combine via temps
    assert "B_i[i] = red_i[0];" in text


def test_dynamic_shared_memory_above_48k():
    source = generate(big_shared().func)
    assert source.launch.shared_bytes == 65536
    assert "extern __shared__ __align__(16) unsigned char tf_smem[];" in source.text
    assert "reinterpret_cast<float*>(tf_smem + 0)" in source.text


# -- errors -----------------------------------------------------------------------------------


def _threads(extent_x, extent_y=1, extent_z=1):
    A = buf("A", 1)
    tx, ty, tz = Var("tx"), Var("ty"), Var("tz")
    body = store(A, c(0), f32(1.0))
    body = bind(
        tz,
        extent_z,
        "threadIdx.z",
        bind(ty, extent_y, "threadIdx.y", bind(tx, extent_x, "threadIdx.x", body)),
    )
    return PrimFunc("f", (A,), body)


def test_too_many_threads_names_the_axis():
    with pytest.raises(BuildError, match=r"'tx' bound to threadIdx.x has extent 1025"):
        generate(_threads(1025))


def test_too_many_threads_in_the_block():
    with pytest.raises(BuildError, match=r"32x33x1 = 1056 threads exceeds the 1024.*'tx'.*'ty'"):
        generate(_threads(32, 33))


def test_block_z_limit():
    with pytest.raises(BuildError, match=r"'tz' bound to threadIdx.z has extent 65"):
        generate(_threads(1, 1, 65))


def test_grid_y_limit():
    A, by = buf("A", 1), Var("by")
    func = PrimFunc("f", (A,), bind(by, 70000, "blockIdx.y", store(A, c(0), f32(1.0))))
    with pytest.raises(BuildError, match=r"'by' bound to blockIdx.y has extent 70000"):
        generate(func)


def test_symbolic_thread_extent_is_rejected():
    n, A, tx = Var("n"), buf("A", 1), Var("tx")
    func = PrimFunc("f", (A, n), bind(tx, n, "threadIdx.x", store(A, c(0), f32(1.0))))
    with pytest.raises(BuildError, match=r"'tx' is bound to threadIdx.x with a symbolic extent"):
        generate(func)


def test_extent_from_a_loop_variable_is_rejected():
    A, i, bx = buf("A", 64), Var("i"), Var("bx")
    body = loop(i, 4, bind(bx, i + 1, "blockIdx.x", store(A, bx, f32(1.0))))
    with pytest.raises(BuildError, match=r"'bx' bound to blockIdx.x .* depends on 'i'"):
        generate(PrimFunc("f", (A,), body))


def test_nested_same_tag_is_rejected():
    A, a, b = buf("A", 1), Var("a"), Var("b")
    body = bind(a, 4, "threadIdx.x", bind(b, 4, "threadIdx.x", store(A, c(0), f32(1.0))))
    with pytest.raises(BuildError, match="bound twice in nested loops 'a' and 'b'"):
        generate(PrimFunc("f", (A,), body))


def test_global_allocate_in_kernel_is_rejected():
    A, T, tx = buf("A", 4), buf("T", 4), Var("tx")
    body = bind(tx, 4, "threadIdx.x", Allocate(T, c(4), store(A, tx, f32(1.0))))
    with pytest.raises(BuildError, match="'T' in scope 'global'.*'local'.*'shared'"):
        generate(PrimFunc("f", (A,), body))


def test_shared_allocate_needs_constant_extent():
    n, A, S, tx = Var("n"), buf("A", 4), buf("S", 4, scope="shared"), Var("tx")
    body = bind(tx, 4, "threadIdx.x", Allocate(S, n, store(A, tx, f32(1.0))))
    with pytest.raises(BuildError, match="'S' in scope 'shared' has extent n"):
        generate(PrimFunc("f", (A, n), body))


def test_sibling_symbolic_extents_must_agree():
    n, m, A = Var("n"), Var("m"), buf("A", 4)
    a, b = Var("a"), Var("b")
    body = Seq(
        (
            bind(a, n, "blockIdx.x", store(A, a, f32(1.0))),
            bind(b, m, "blockIdx.x", store(A, b, f32(2.0))),
        )
    )
    with pytest.raises(BuildError, match="blockIdx.x is bound by loops of different extents"):
        generate(PrimFunc("f", (A, n, m), body))


def test_too_much_shared_memory():
    A, S, tx = buf("A", 4), buf("S", 70000, scope="shared"), Var("tx")
    body = bind(tx, 4, "threadIdx.x", Allocate(S, c(70000), store(A, tx, load(S, tx))))
    with pytest.raises(BuildError, match="280000 bytes of shared memory"):
        generate(PrimFunc("f", (A,), body))


def test_source_without_gpu_or_pycuda():
    from tensorforge.runtime.cuda_exec import CUDAExecutable

    source = generate(vector_add().func)
    assert CUDAExecutable(source, TARGET).get_source("cuda") == source.text


def test_grid_expression_is_evaluated_from_scalar_args():
    from tensorforge.runtime.cuda_exec import CUDAExecutable

    source = generate(vector_add_dynamic().func)
    executable = CUDAExecutable(source, TARGET)
    assert [entry([0, 0, 0, 1000]) for entry in executable._grid] == [8, 1, 1]
    assert [entry([0, 0, 0, 1024]) for entry in executable._grid] == [8, 1, 1]
    assert [entry([0, 0, 0, 1025]) for entry in executable._grid] == [9, 1, 1]


def test_narrow_integer_reduction_shuffles_through_int(tmp_path):
    from tensorforge.ir.passes.lower_thread_allreduce import lower_thread_allreduce
    from tensorforge.ir.stmt import IfThenElse, ThreadAllReduce
    from tests.ir.builders import sum_reducer

    A, B = buf("A", 64, "int8"), buf("B", 1, "int8")
    red = buf("red", 1, "int8", "local")
    k = Var("k")
    allreduce = ThreadAllReduce(sum_reducer("int8"), (load(A, k),), (red,), "threadIdx.x", 64)
    body = Seq((allreduce, IfThenElse(k.__eq__(c(0)), store(B, c(0), load(red, c(0))))))
    body = lower_thread_allreduce(Allocate(red, c(1), bind(k, 64, "threadIdx.x", body)))
    text = generate(PrimFunc("narrow", (A, B), body)).text
    assert "(signed char)__shfl_down_sync(red_mask, (int)(red[0]), 16, 32);" in text
    if NVCC is not None:
        nvcc_ptx(text, tmp_path)


def test_floor_helpers_wrap_the_minimum_divided_by_minus_one(tmp_path):
    """tf_floordiv / tf_floormod (Python's // and % of signed integers) give torch's wrapped
    results for the minimum by -1, where C's a / b overflows (undefined behaviour): a te kernel
    that divides two int32 tensors compiles with nvcc, and the helpers, compiled for the host
    with the same text (no GPU here), compute Python's floor division with the minimum wrapped."""
    import tensorforge as tf
    from tensorforge import te
    from tensorforge.codegen.cuda_helpers import FLOOR_HELPERS

    n = te.var("n")
    A = te.placeholder((n,), "int32", name="A")
    B = te.placeholder((n,), "int32", name="B")
    C = te.compute((n,), lambda i: A[i] // B[i] + A[i] % B[i], name="C")
    s = te.create_schedule(C.op)
    block, thread = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(block, te.thread_axis("blockIdx.x"))
    s[C].bind(thread, te.thread_axis("threadIdx.x"))
    text = tf.build(s, [A, B, C], target="cuda -arch=sm_90").get_source("cuda")
    assert "tf_floordiv<int>" in text and "tf_floormod<int>" in text
    if NVCC is not None:
        nvcc_ptx(text, tmp_path)
    cxx = shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    host = FLOOR_HELPERS.replace("__device__ __forceinline__", "inline")
    cases = [(-(2**31), -1), (-(2**31), 1), (-(2**31), 3), (7, -1), (-7, 2), (7, -2), (0, -1)]
    cases64 = [(-(2**63), -1), (-(2**63), 5), (2**63 - 1, -1)]
    program = (  # the operands read at run time: a constant quotient would be folded
        "#include <cmath>\n#include <cstdint>\n#include <cstdio>\n" + host + "int main() {\n"
        "  long long a, b; int bits;\n"
        '  while (scanf("%d %lld %lld", &bits, &a, &b) == 3) {\n'
        "    long long q = bits == 32 ? tf_floordiv<int32_t>(a, b) : tf_floordiv<int64_t>(a, b);\n"
        "    long long r = bits == 32 ? tf_floormod<int32_t>(a, b) : tf_floormod<int64_t>(a, b);\n"
        '    printf("%lld %lld\\n", q, r);\n  }\n}\n'
    )
    (tmp_path / "floor.cpp").write_text(program)
    exe = tmp_path / "floor"
    subprocess.run([cxx, "-O2", "-o", str(exe), str(tmp_path / "floor.cpp")], check=True)
    operands = [f"32 {a} {b}" for a, b in cases] + [f"64 {a} {b}" for a, b in cases64]
    run = subprocess.run([str(exe)], input="\n".join(operands), capture_output=True, text=True)
    assert run.returncode == 0, f"the helpers trapped (signal {-run.returncode})"
    got = run.stdout.split("\n")

    def wrapped(q: int, bits: int) -> int:
        return (q + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)

    want = [f"{wrapped(a // b, 32)} {a % b}" for a, b in cases]
    want += [f"{wrapped(a // b, 64)} {a % b}" for a, b in cases64]
    assert got[: len(want)] == want


def test_integer_tensor_arithmetic_wraps_in_unsigned(tmp_path):
    """Signed overflow is undefined in C++, so nvcc may fold an int32 (a * 3) / 3 to a where
    torch wraps a * 3 around: products and sums of loaded values are computed unsigned, index
    arithmetic stays signed (its overflow never happens, and nvcc may use that)."""
    import tensorforge as tf
    from tensorforge import te

    n = te.var("n")
    A = te.placeholder((n,), "int32", name="A")
    C = te.compute((n,), lambda i: (A[i] * 3) // 3 + A[i + 1 - 1], name="C")
    s = te.create_schedule(C.op)
    block, thread = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(block, te.thread_axis("blockIdx.x"))
    s[C].bind(thread, te.thread_axis("threadIdx.x"))
    text = tf.build(s, [A, C], target="cuda -arch=sm_90").get_source("cuda")
    assert "((int)((unsigned int)(A[" in text and ") * (unsigned int)(3)))" in text
    (store,) = [line for line in text.splitlines() if line.strip().startswith("C[")]
    assert store.count("unsigned") == 4  # the product's operands, the sum's: no index's
    assert store.count("[(i_outer * 64) + i_inner]") == 3
    if NVCC is not None:
        nvcc_ptx(text, tmp_path)


def test_narrow_integer_tensor_arithmetic_wraps_to_its_type(tmp_path):
    """C++ computes int16 / int8 arithmetic in int: an int16 x * 4 > x compared unwrapped
    values where torch's product wraps in 16 bits (the GPU fuzz sweep, seed 9053)."""
    import tensorforge as tf
    from tensorforge import te

    n = te.var("n")
    A = te.placeholder((n,), "int16", name="A")
    C = te.compute((n,), lambda i: A[i] * 4 > A[i], name="C")
    s = te.create_schedule(C.op)
    block, thread = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(block, te.thread_axis("blockIdx.x"))
    s[C].bind(thread, te.thread_axis("threadIdx.x"))
    text = tf.build(s, [A, C], target="cuda -arch=sm_90").get_source("cuda")
    assert "((short)((unsigned int)(A[" in text
    if NVCC is not None:
        nvcc_ptx(text, tmp_path)
