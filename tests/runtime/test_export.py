"""export_library / load_module: one file, loaded in a fresh process without compiling, calling
and checking arguments exactly as the freshly built module does; bad files refused cleanly."""

import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.codegen.base import codegen_for
from tensorforge.errors import ArgumentError, BuildError, DeviceError
from tensorforge.runtime import library_file
from tensorforge.runtime.module import Module
from tensorforge.runtime.shared_lib import LibraryExecutable


@pytest.fixture(autouse=True)
def no_disk_cache(monkeypatch):
    """These tests are about export; builds here neither read nor write the disk cache."""
    monkeypatch.setenv("TENSORFORGE_CACHE", "0")


def scaled_add(n=1000, name="scaled_add"):
    """C = A * alpha + B[::-1]: a parallel, vectorized loop (libgomp, the thread-count global)
    and a scalar argument."""
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    alpha = te.var("alpha", dtype="float32")
    C = te.compute((n,), lambda i: A[i] * alpha + B[n - 1 - i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=8)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    return s, [A, B, C, alpha]


def row_sums(name="row_sums"):
    """Dynamic shapes: sizes bound from the arrays."""
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    s[S].parallel(S.op.axis[0])
    return s, [A, S]


def source_of(schedule_and_args, name):
    s, args = schedule_and_args
    target = tf.Target("llvm")
    return codegen_for("llvm").generate(tf.lower(s, args, name=name, target=target), target)


def run_python(script, **env):
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


# -- llvm -----------------------------------------------------------------------------------------
def wrong_calls():
    """Each wrong call, by name: (A, B, C, alpha) -> the arguments it passes instead."""
    return {
        "count": lambda A, B, C, alpha: (A, B, C),
        "shape": lambda A, B, C, alpha: (A[:10], B, C, alpha),
        "dtype": lambda A, B, C, alpha: (A.astype("float64"), B, C, alpha),
        "strides": lambda A, B, C, alpha: (A, B, np.zeros(2000, "float32")[::2], alpha),
        "scalar": lambda A, B, C, alpha: (A, B, C, "two"),
    }


def call_errors(mod, arrays):
    errors = {}
    for name, make in wrong_calls().items():
        with pytest.raises(ArgumentError) as info:
            mod(*make(*arrays))
        errors[name] = str(info.value)
    return errors


def test_export_then_load_in_a_fresh_process(tmp_path, rng):
    mod = tf.build(*scaled_add(), name="scaled_add")
    path = tmp_path / "scaled_add.so"
    mod.export_library(path)
    assert sorted(os.listdir(tmp_path)) == ["scaled_add.so"]  # one file, nothing left beside it
    a, b = (rng.random(1000, dtype=np.float32) for _ in range(2))
    c = np.zeros(1000, np.float32)
    mod(a, b, c, 2.5)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    errors = call_errors(mod, (a, b, c, 2.5))

    script = f"""
        import json, sys
        import numpy as np
        import tensorforge.runtime.llvm_exec as llvm_exec

        class NoJIT:
            def __init__(self, *args, **kwargs):
                raise AssertionError("load_module must not compile with llvmlite")

        llvm_exec.LLVMExecutable = NoJIT
        import tensorforge as tf

        mod = tf.runtime.load_module({str(path)!r})
        A, B = np.load({str(tmp_path / "a.npy")!r}), np.load({str(tmp_path / "b.npy")!r})
        C = np.zeros(1000, np.float32)
        mod(A, B, C, 2.5)
        mod["scaled_add"](A, B, C, 2.5)
        errors = {{}}
        {textwrap.indent(inspect.getsource(wrong_calls), " " * 8).strip()}
        for name, make in wrong_calls().items():
            try:
                mod(*make(A, B, C, 2.5))
            except tf.ArgumentError as err:
                errors[name] = str(err)
        executable = mod["scaled_add"].executable
        print(json.dumps({{
            "C": C.tolist(),
            "errors": errors,
            "entry": mod.entry_name,
            "arg_names": list(mod["scaled_add"].arg_names),
            "threads": executable._threads.value,
            "kind": type(executable).__name__,
            "object_code_loaded": "tensorforge.runtime.object_code" in sys.modules,
        }}))
    """
    out = json.loads(run_python(script, TF_NUM_THREADS="3").strip().splitlines()[-1])
    np.testing.assert_array_equal(np.array(out["C"], np.float32), c)  # the same machine code
    np.testing.assert_allclose(c, a * 2.5 + b[::-1], rtol=1e-6)
    assert out["errors"] == errors and len(errors) == 5
    assert out["entry"] == "scaled_add" and out["arg_names"] == ["A", "B", "C", "alpha"]
    assert out["threads"] == 3  # TF_NUM_THREADS is read at each call
    assert out["kind"] == "LibraryExecutable" and not out["object_code_loaded"]


def test_library_is_a_shared_object_with_its_metadata_inside(tmp_path):
    mod = tf.build(*scaled_add(), name="scaled_add")
    path = tmp_path / "lib.so"
    mod.export_library(str(path))
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data.endswith(library_file.MAGIC)
    meta = library_file.read(path).metadata
    assert meta["kind"] == "llvm" and meta["target"] == str(tf.Target("llvm"))
    assert meta["tensorforge_version"] == tf.__version__
    [function] = meta["functions"]
    assert function["entry"] == "scaled_add" and function["threads_symbol"] == "__tf_num_threads"
    assert [p["name"] for p in function["params"]] == ["A", "B", "C", "alpha"]
    if shutil.which("nm"):
        nm = ["nm", "-D", str(path)]
        symbols = subprocess.run(nm, capture_output=True, text=True, check=True).stdout
        assert " T scaled_add" in symbols and "GOMP_parallel" in symbols


def test_dynamic_shapes_and_sources_survive(tmp_path, rng):
    mod = tf.build(*row_sums(), name="row_sums")
    mod.export_library(tmp_path / "rows.so")
    loaded = tf.runtime.load_module(tmp_path / "rows.so")
    assert loaded.params == mod.params  # bound_from_shape sizes included
    for shape in [(3, 5), (17, 1)]:
        a = rng.random(shape, dtype=np.float32)
        s = np.zeros(shape[0], np.float32)
        loaded(a, s)
        np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5)
    with pytest.raises(ArgumentError, match="row_sums") as info:
        loaded(np.zeros((3, 5), np.float32), np.zeros(4, np.float32))
    with pytest.raises(ArgumentError) as fresh:
        mod(np.zeros((3, 5), np.float32), np.zeros(4, np.float32))
    assert str(info.value) == str(fresh.value)
    assert loaded.get_source("ll") == mod.get_source("ll")
    assert "row_sums" in loaded.get_source("asm")
    assert isinstance(loaded["row_sums"].executable, LibraryExecutable)


def test_several_functions_in_one_library(tmp_path, rng):
    # Both kernels define their own __tf_num_threads: the export renames them apart.
    sources = [source_of(scaled_add(), "scaled_add"), source_of(row_sums(), "row_sums")]
    mod = Module.from_sources(sources, tf.Target("llvm"), entry="row_sums")
    mod.export_library(tmp_path / "both.so")
    loaded = tf.runtime.load_module(tmp_path / "both.so")
    assert loaded.function_names == ("scaled_add", "row_sums") and loaded.entry_name == "row_sums"
    a, b = (rng.random(1000, dtype=np.float32) for _ in range(2))
    c = np.zeros(1000, np.float32)
    loaded["scaled_add"](a, b, c, -1.0)
    np.testing.assert_allclose(c, b[::-1] - a, rtol=1e-6)
    m = rng.random((4, 6), dtype=np.float32)
    s = np.zeros(4, np.float32)
    loaded(m, s)
    np.testing.assert_allclose(s, m.sum(axis=1), rtol=1e-5)
    symbols = {f["entry"]: f["threads_symbol"] for f in loaded_metadata(tmp_path / "both.so")}
    assert symbols == {
        "scaled_add": "__tf_num_threads.scaled_add",
        "row_sums": "__tf_num_threads.row_sums",
    }
    # a loaded module exports again (from the IR it carries)
    loaded.export_library(tmp_path / "again.so")
    again = tf.runtime.load_module(tmp_path / "again.so")
    again["scaled_add"](a, b, c, 1.0)
    np.testing.assert_allclose(c, a + b[::-1], rtol=1e-6)


def loaded_metadata(path):
    return library_file.read(path).metadata["functions"]


# -- files that are not (whole) libraries -----------------------------------------------------------
def damaged_copies(tmp_path, good):
    data = good.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    copies = {
        "empty": b"",
        "text": b"hello, this is not a library\n" * 10,
        "truncated by one byte": data[:-1],
        "truncated to half": data[: len(data) // 2],
        "one byte changed": bytes(flipped),
        "another ELF": Path(sys.executable).read_bytes()[:4096],
    }
    for i, (name, content) in enumerate(copies.items()):
        path = tmp_path / f"bad{i}.so"
        path.write_bytes(content)
        yield name, path


def test_damaged_or_foreign_files_are_refused(tmp_path):
    good = tmp_path / "good.so"
    tf.build(*scaled_add(), name="scaled_add").export_library(good)
    for name, path in damaged_copies(tmp_path, good):
        with pytest.raises(ArgumentError, match="not a tensorforge library|is damaged") as info:
            tf.runtime.load_module(path)
        assert str(path) in str(info.value), name
    with pytest.raises(ArgumentError, match="no such file"):
        tf.runtime.load_module(tmp_path / "missing.so")
    tf.runtime.load_module(good)  # the good one still loads


def test_a_whole_file_the_loader_refuses(tmp_path):
    good = tmp_path / "good.so"
    tf.build(*scaled_add(), name="scaled_add").export_library(good)
    metadata = library_file.read(good).metadata
    bad = tmp_path / "bad.so"
    bad.write_bytes(library_file.pack(b"not an ELF object", metadata))
    with pytest.raises(BuildError, match="dynamic loader refused"):
        tf.runtime.load_module(bad)


def test_loaded_parallel_kernels_survive_fork(tmp_path):
    """libgomp's pool is released before fork for loaded libraries too (no JIT in the process)."""
    path = tmp_path / "lib.so"
    tf.build(*scaled_add(), name="scaled_add").export_library(path)
    script = f"""
        import os
        import numpy as np
        import tensorforge as tf

        mod = tf.runtime.load_module({str(path)!r})
        a = np.ones(1000, np.float32); c = np.zeros(1000, np.float32)
        mod(a, a, c, 2.0)
        pid = os.fork()
        if pid == 0:
            mod(a, a, c, 3.0)
            os._exit(0 if (c == 4.0).all() else 3)
        assert os.waitpid(pid, 0)[1] == 0
        mod(a, a, c, 1.0)
        print("ok", "tensorforge.runtime.llvm_exec" in __import__("sys").modules)
    """
    assert run_python(script, TF_NUM_THREADS="2").split() == ["ok", "False"]


def test_library_for_missing_cpu_features_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "lib.so"
    tf.build(*scaled_add(), name="scaled_add").export_library(path)
    import tensorforge.target

    monkeypatch.setattr(tensorforge.target, "host_cpu", lambda: ("oldcpu", "+64bit,+sse2,-avx"))
    with pytest.raises(BuildError, match=r"oldcpu lacks: .*avx"):
        tf.runtime.load_module(path)


def test_export_without_a_c_compiler_says_so(tmp_path, monkeypatch):
    mod = tf.build(*scaled_add(), name="scaled_add")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(BuildError, match="needs a C compiler"):
        mod.export_library(tmp_path / "lib.so")
    assert not (tmp_path / "lib.so").exists()


def test_export_to_a_missing_folder(tmp_path):
    mod = tf.build(*scaled_add(), name="scaled_add")
    with pytest.raises(ArgumentError, match="cannot write"):
        mod.export_library(tmp_path / "no" / "such" / "lib.so")


# -- cuda -----------------------------------------------------------------------------------------
def vector_add_cuda(n=1000):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=128)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def has_cuda_compiler():
    try:
        import pycuda  # noqa: F401

        return True
    except Exception:  # noqa: BLE001 - no pycuda, or no driver for it
        return shutil.which("nvcc") is not None


@pytest.mark.skipif(not has_cuda_compiler(), reason="needs nvcc (or pycuda) to make a cubin")
def test_cuda_file_round_trip(tmp_path):
    mod = tf.build(*vector_add_cuda(), target="cuda -arch=sm_90", name="vadd")
    path = tmp_path / "vadd.tflib"
    mod.export_library(path)
    loaded = tf.runtime.load_module(path)
    assert loaded.type_key == "cuda" and loaded.entry_name == mod.entry_name
    assert loaded.get_source("cuda") == mod.get_source("cuda")
    assert loaded.sources[0].launch == mod.sources[0].launch
    assert loaded.params == mod.params
    [function] = loaded_metadata(path)
    file = library_file.read(path)
    assert file.blob(function)[:4] == b"\x7fELF"  # a cubin
    if not tf.cuda(0).exist:
        with pytest.raises(DeviceError, match="no CUDA device"):
            loaded(*(np.zeros(1000, np.float32) for _ in range(3)))


@pytest.mark.cuda
def test_cuda_export_then_load_in_a_fresh_process(tmp_path):
    mod = tf.build(*vector_add_cuda(), target="cuda", name="vadd")
    path = tmp_path / "vadd.tflib"
    mod.export_library(path)
    script = f"""
        import shutil, numpy as np
        import tensorforge as tf
        import tensorforge.runtime.cuda_exec as cuda_exec

        def no_compiler(*args, **kwargs):
            raise AssertionError("load_module must not run nvcc")

        cuda_exec.compile_cuda = no_compiler
        mod = tf.runtime.load_module({str(path)!r})
        dev = tf.cuda(0)
        a = np.arange(1000, dtype="float32")
        b = np.ones(1000, dtype="float32")
        A, B = tf.nd.array(a, dev), tf.nd.array(b, dev)
        C = tf.nd.empty((1000,), "float32", dev)
        mod(A, B, C)
        np.testing.assert_allclose(C.numpy(), a + 2 * b)
        try:
            mod(A, B)
        except tf.ArgumentError as err:
            print(err)
        print("ok")
    """
    out = run_python(script)
    assert out.strip().endswith("ok") and "takes 3 argument(s) (A, B, C), got 2" in out


def two_kernel_cuda(n=1000):
    """B is bound to its own grid, C to another: a function of two kernels, B in between."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    C = te.compute((n,), lambda i: B[i] + A[i], name="C")
    s = te.create_schedule(C.op)
    for stage, threads in ((s[B], 256), (s[C], 64)):
        bx, tx = stage.split(stage.op.axis[0], factor=threads)
        stage.bind(bx, te.thread_axis("blockIdx.x"))
        stage.bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, C]


@pytest.mark.skipif(not has_cuda_compiler(), reason="needs nvcc (or pycuda) to make a cubin")
def test_cuda_file_of_several_kernels_round_trip(tmp_path):
    mod = tf.build(*two_kernel_cuda(), target="cuda -arch=sm_90", name="f")
    path = tmp_path / "f.tflib"
    mod.export_library(path)
    loaded = tf.runtime.load_module(path)
    assert loaded.function_names == ("f",) and loaded.entry_name == "f"
    (source,), (original,) = loaded.sources, mod.sources
    assert source.kernels == original.kernels and source.intermediates == original.intermediates
    assert [k.entry for k in source.kernels] == ["f_kernel0", "f_kernel1"]
    assert loaded.get_source("cuda") == mod.get_source("cuda")
    [function] = loaded_metadata(path)
    assert library_file.read(path).blob(function)[:4] == b"\x7fELF"  # one cubin, both kernels
    if not tf.cuda(0).exist:
        with pytest.raises(DeviceError, match="no CUDA device"):
            loaded["f"](*(np.zeros(1000, np.float32) for _ in range(2)))


@pytest.mark.cuda
def test_cuda_file_of_several_kernels_runs_in_a_fresh_process(tmp_path):
    mod = tf.build(*two_kernel_cuda(), target="cuda", name="f")
    path = tmp_path / "f.tflib"
    mod.export_library(path)
    script = f"""
        import numpy as np
        import tensorforge as tf
        import tensorforge.runtime.cuda_exec as cuda_exec

        def no_compiler(*args, **kwargs):
            raise AssertionError("load_module must not run nvcc")

        cuda_exec.compile_cuda = no_compiler
        mod = tf.runtime.load_module({str(path)!r})
        dev = tf.cuda(0)
        a = np.random.default_rng(0).standard_normal(1000).astype("float32")
        A, C = tf.nd.array(a, dev), tf.nd.empty((1000,), "float32", dev)
        mod["f"](A, C)
        np.testing.assert_allclose(C.numpy(), 3 * a, rtol=1e-6)
        assert mod.time_evaluator("f", dev, number=2)(A, C).mean > 0
        print("ok")
    """
    assert run_python(script).strip().endswith("ok")


def test_the_c_compiler_runner_reads_the_output_or_says_what_failed():
    # one runner for the c target's kernels, export_library's link and compile_c
    from tensorforge.runtime.shared_lib import run_c_compiler

    good = {"f.c": "int f(int x) { return x + 1; }\n"}
    arguments = ["-S", "-o", "f.s", "f.c"]
    assert b"f:" in run_c_compiler("'f'", "compiling f", good, arguments, "f.s", 60)
    bad = {"f.c": "int f(int x) { return y; }\n"}
    with pytest.raises(BuildError, match=r"(?s)'f': compiling f failed:\n  .*f\.c.*y.* undeclared"):
        run_c_compiler("'f'", "compiling f", bad, arguments, "f.s", 60)


def test_tensor_maps_survive_the_metadata():
    # a CUDA kernel's bulk-copy descriptors (built again from the buffers' addresses at each call)
    from tensorforge.codegen.base import KernelSource, Launch, Param, TensorMap

    maps = (TensorMap("A", "float16", 512, 320, 128), TensorMap("D", "bfloat16", 512, 256, 16))
    source = KernelSource(
        "cuda", "f", "// text", (Param("A", "buffer", "float16", (512, 320)),), Launch(),
        tensor_maps=maps,
    )  # fmt: skip
    data = json.loads(json.dumps(library_file.source_to_json(source)))
    assert library_file.source_from_json(data, "// text").tensor_maps == maps
    del data["tensor_maps"]  # metadata written before tensor maps existed: none
    assert library_file.source_from_json(data, "// text").tensor_maps == ()
