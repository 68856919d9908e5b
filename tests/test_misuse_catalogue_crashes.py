"""Mistakes that used to crash the process or give a silently wrong answer (issue 14, items 7-9).

Each case runs in its own Python process, so a segfault or an abort fails the test instead of
killing the test run: the process must exit normally and print the error (or result) expected.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def run_case(code: str, timeout: float = 120) -> str:
    """Run `code` (after `import tensorforge as tf`, `te`, `np`) in a fresh process; its stdout.

    The process must exit with status 0: a crash (a signal, an abort) or an uncaught error fails.
    """
    script = "import numpy as np\nimport tensorforge as tf\nfrom tensorforge import te\n"
    script += textwrap.dedent(code)
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert result.returncode == 0, (
        f"exit status {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n"
        f"{result.stderr[-3000:]}"
    )
    return result.stdout


EXPECT_ERROR = """
def expect(error, fn):
    try:
        fn()
    except error as e:
        print("ERROR", type(e).__name__, e)
    else:
        print("NO ERROR")
"""


# -- constants that do not fit their dtype ------------------------------------------------------


def test_python_int_too_wide_for_int32_expression():
    out = run_case(
        EXPECT_ERROR
        + """
x = te.var("x")
expect(tf.ExprError, lambda: x + 2**40)
X = te.placeholder((2**31 + 16,), name="X")
expect(tf.ExprError, lambda: te.compute((16,), lambda i: X[2**31 + i], name="Y"))
"""
    )
    lines = out.splitlines()
    assert lines[0].startswith("ERROR ExprError the constant 1099511627776 does not fit int32")
    assert "x" in lines[0] and "astype('int64')" in lines[0]
    assert lines[1].startswith("ERROR ExprError the constant 2147483648 does not fit int32")


def test_const_out_of_range():
    out = run_case(
        EXPECT_ERROR
        + """
expect(tf.ExprError, lambda: te.const(300, "uint8"))
expect(tf.ExprError, lambda: te.const(-1, "uint8"))
expect(tf.ExprError, lambda: te.const(1e6, "float16"))
print(te.const(255, "uint8"), te.const(-128, "int8"), te.const(float("inf"), "float16"))
"""
    )
    lines = out.splitlines()
    assert "const 300 does not fit uint8 (range [0, 255])" in lines[0]
    assert "const -1 does not fit uint8" in lines[1]
    assert "const 1000000.0 does not fit float16" in lines[2]
    assert lines[3] == "uint8(255) int8(-128) float16(inf)"


def test_constant_folder_never_wraps():
    out = run_case(
        """
from tensorforge.ir.arith import simplify_expr
i = te.var("i")
print(simplify_expr(te.const(2**31 - 1) + te.const(1)))
print(simplify_expr((i + 2**30) + 2**30))
print(simplify_expr(te.const(2**30) * 4))
"""
    )
    assert "-2147483648" not in out and "-" not in out.replace("\n", "")
    assert "0" != out.splitlines()[2].strip()


# -- an output aliasing an input -----------------------------------------------------------------


def test_output_aliasing_an_input_is_refused():
    out = run_case(
        EXPECT_ERROR
        + """
n = 33
A = te.placeholder((n,), name="A")
B = te.placeholder((n,), name="B")
C = te.compute((n,), lambda i: A[i] + B[(i + 1) % n], name="C")
f = tf.build(te.create_schedule(C.op), [A, B, C])
rng = np.random.default_rng(0)
a = rng.random(n, dtype="float32")
c = np.empty_like(a)
f(a, a, c)  # two inputs may share memory
np.testing.assert_allclose(c, a + np.roll(a, -1), rtol=1e-6)
expect(tf.ArgumentError, lambda: f(a, a, a))
big = rng.random(2 * n, dtype="float32")
expect(tf.ArgumentError, lambda: f(a, big[:n], big[5 : 5 + n]))
f(big[:n], a, big[n:])  # adjacent, not overlapping
np.testing.assert_allclose(big[n:], big[:n] + np.roll(a, -1), rtol=1e-6)
print("OK")
"""
    )
    lines = out.splitlines()
    assert lines[0].startswith("ERROR ArgumentError main: output 'C' and argument 'A' are the same")
    assert "np.empty_like(A)" in lines[0]
    assert lines[1].startswith("ERROR ArgumentError main: output 'C' and argument 'B' overlap")
    assert lines[2] == "OK"


# -- impossible measurements ---------------------------------------------------------------------

RECORD_CASE = """
import json, os, tempfile
from tensorforge import tune
from tensorforge.tune import records
from tensorforge.tune.measure import MeasureInput, MeasureResult

@tune.template("misuse/scale")
def scale(n):
    cfg = tune.get_config()
    cfg.define_knob("k", [1, 2, 4, 8])
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    return te.create_schedule(B.op), [A, B]

task = tune.create_task("misuse/scale", args=(1024,), target="llvm")
path = os.path.join(tempfile.mkdtemp(), "log.jsonl")
handle = records.open_log(path)
for index, cost in [(0, 2e-6), (1, 1e-12), (2, 3e-6)]:
    result = MeasureResult((cost,), 0, "", 0.1, 1.0)
    records.append_line(handle, records.encode(MeasureInput(task, task.config(index)), result))
handle.close()
"""


def test_impossible_record_is_never_the_best():
    out = run_case(
        RECORD_CASE
        + """
best = records.best_by_workload(records.load_records(path))
print("best", [r.cost for r in best.values()])
tuner = tune.RandomTuner(task, seed=0)
print("loaded", tuner.load_history(path), "best", tuner.best_cost)
bad = [res for cfg, res in tuner.history if not res.ok]
print("errors", [res.error_msg for res in bad])
"""
    )
    assert "best [2e-06]" in out
    assert "loaded 3 best 2e-06" in out
    assert "impossible measurement: 1e-12 s per call" in out


def test_impossible_measurement_is_logged_as_an_error():
    out = run_case(
        RECORD_CASE
        + """
def builder(task, config, feature_fn):
    return config, None

def runner(task, config, option, reference):
    return [1e-12 if config["k"].val == 4 else 1e-5] * option.repeat

option = tune.measure_option(builder=builder, runner=runner, number=1, repeat=1, timeout=5)
log = path + ".tuned"
tuner = tune.GridSearchTuner(task)
tuner.tune(n_trial=4, measure_option=option, callbacks=[tune.log_to_file(log)])
rows = [json.loads(line) for line in open(log)]
print("best", tuner.best_cost, tuner.best_config["k"].val != 4)
print("errors", [(r["config"]["knobs"], r["result"]["error_no"]) for r in rows if r["result"]["error_no"]])
"""
    )
    assert "best 1e-05 True" in out
    assert "errors [({'k': 4}, 4)]" in out or "errors [({'k': [4]}, 4)]" in out, out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


# -- int64 indexing -------------------------------------------------------------------------------

INT64_CASES = """
from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.stmt import Allocate, BufferStore, For
from tensorforge.ir.visit import walk

def index_dtypes(func):
    return sorted({n.indices[0].dtype for n in walk(func.body) if isinstance(n, (BufferLoad, BufferStore))})

def loop_dtypes(func):
    return sorted({n.var.dtype for n in walk(func.body) if isinstance(n, For)})
"""


def test_big_constant_shape_lowers_with_int64_offsets():
    out = run_case(
        INT64_CASES
        + """
A = te.placeholder((65536, 65536), name="A")
B = te.compute((65536, 65536), lambda i, j: A[i, j] + 1.0, name="B")
s = te.create_schedule(B.op)
print("plain", index_dtypes(tf.lower(s, [A, B])))
s = te.create_schedule(B.op)
fused = s[B].fuse(*B.op.axis)
print("fused", fused.var.dtype, loop_dtypes(tf.lower(s, [A, B])))
small = te.placeholder((4096, 4096), name="S")
T = te.compute((4096, 4096), lambda i, j: small[i, j] * 2.0, name="T")
s = te.create_schedule(T.op)
s[T].fuse(*T.op.axis)
print("small", index_dtypes(tf.lower(s, [small, T])), loop_dtypes(tf.lower(s, [small, T])))
"""
    )
    assert "plain ['int64']" in out
    assert "fused int64 ['int64']" in out
    assert "small ['int32'] ['int32']" in out  # what fits int32 stays int32


def test_symbolic_shapes_lower_with_int64_offsets_and_run():
    out = run_case(
        INT64_CASES
        + """
n, m = te.var("n"), te.var("m")
A = te.placeholder((n, m), name="A")
T = te.compute((n, m), lambda i, j: A[i, j] + 1.0, name="T")  # an intermediate: n*m elements
B = te.compute((n, m), lambda i, j: T[i, j] * 2.0, name="B")
s = te.create_schedule(B.op)
fused = s[B].fuse(*B.op.axis)
outer, inner = s[B].split(fused, factor=4)
func = tf.lower(s, [A, B])
sizes = [n.extent.dtype for n in walk(func.body) if isinstance(n, Allocate)]
print("lowered", index_dtypes(func), loop_dtypes(func), sizes)
f = tf.build(s, [A, B])
rng = np.random.default_rng(1)
for shape in [(7, 13), (1, 1), (3, 1), (17, 5)]:
    a = rng.random(shape, dtype="float32")
    b = np.empty_like(a)
    f(a, b)
    np.testing.assert_allclose(b, (a + 1) * 2, rtol=1e-6)
print("ran")
"""
    )
    assert "lowered ['int64'] ['int32', 'int64'] ['int64']" in out  # the fused loop is int64
    assert "ran" in out


def test_int64_index_arithmetic_with_large_constants_runs():
    out = run_case(
        INT64_CASES
        + """
X = te.placeholder((97,), name="X")
# products past 2**31 in the index, but every element read exists
Y = te.compute((50,), lambda i: X[(i.astype("int64") * 3_000_000_019 + 2**40) % 97], name="Y")
Z = te.compute((50,), lambda i: X[(i.astype("int64") * 65536 * 65536 + 5) % 97] + Y[i], name="Z")
s = te.create_schedule(Z.op)
print("lowered", index_dtypes(tf.lower(s, [X, Z])))
f = tf.build(s, [X, Z])
x = np.random.default_rng(2).random(97, dtype="float32")
z = np.empty(50, "float32")
f(x, z)
i = np.arange(50, dtype=object)
y_idx = ((i * 3_000_000_019 + 2**40) % 97).astype(np.int64)
z_idx = ((i * 65536 * 65536 + 5) % 97).astype(np.int64)
np.testing.assert_allclose(z, x[z_idx] + x[y_idx], rtol=1e-6)
print("ran")
"""
    )
    assert "lowered ['int32', 'int64']" in out
    assert "ran" in out


# -- intermediate buffers that cannot be allocated -----------------------------------------------

ALLOC_CASE = """
m = te.var("m", "int64")
A = te.placeholder((5,), name="A")
D = te.compute((5, 65536), lambda j, r: A[j] + r.astype("float32"), name="D")  # 1.25 MiB, heap
B = te.compute((m, 5), lambda i, j: D[j, i % 3] * i.astype("float32"), name="Bhuge")
k = te.reduce_axis((0, m), name="k")
C = te.compute((5,), lambda j: te.sum(B[k, j], axis=k), name="C")

def schedule(parallel):
    s = te.create_schedule(C.op)
    if parallel:  # Bhuge is allocated inside the outlined parallel body
        s[C].parallel(C.op.axis[0])
        s[B].compute_at(s[C], C.op.axis[0])
    return s

def vm_mib():
    return int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE") / 2**20

rng = np.random.default_rng(5)
a = rng.random(5, dtype="float32")

def check(f, label, repeat=1):
    c = np.empty(5, "float32")
    before = 0.0
    for attempt in range(repeat + 3):
        if attempt == 3:  # NOTE: glibc may reserve a 64 MiB arena once, on the first failures
            before = vm_mib()
        try:
            f(a, c, 2**48)  # Bhuge: 2**48 * 5 float32 = 5 PiB (2**50 bytes per parallel row)
        except tf.AllocationError as e:
            assert isinstance(e, tf.TensorForgeError) and isinstance(e, MemoryError)
            error = str(e)
        else:
            error = "NO ERROR"
    print(label, "ERROR", error)
    print(label, "leaked MiB", round(vm_mib() - before))
    for m in (7, 1, 3):
        f(a, c, m)
        np.testing.assert_allclose(c, (a + 0) * 0 + a * 0 + ref(m), rtol=1e-5)
    print(label, "ran")

def ref(m):
    d = a[:, None] + np.arange(3, dtype="float32")[None, :]
    i = np.arange(m)
    return (d[:, i % 3] * i[None, :]).sum(axis=1)
"""


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_unallocatable_intermediate_raises_and_leaks_nothing(target, tmp_path):
    out = run_case(
        "import os\n"
        + ALLOC_CASE
        + f"""
check(tf.build(schedule(False), [A, C, m], "{target}"), "serial", repeat=200)
check(tf.build(schedule(True), [A, C, m], "{target}"), "parallel")
f = tf.build(schedule(False), [A, C, m], "{target}")
f.export_library("{tmp_path}/lib.so")
check(tf.runtime.load_module("{tmp_path}/lib.so"), "exported")
"""
    )
    lines = out.splitlines()
    for label in ("serial", "parallel", "exported"):
        (error,) = [line for line in lines if line.startswith(f"{label} ERROR")]
        assert "intermediate buffer 'Bhuge'" in error, out
        assert "'main'" in error
        bytes_asked = 2**50 if label == "parallel" else 5 * 2**50
        assert f"= {bytes_asked} bytes" in error, out
        assert f"{label} ran" in lines
    # 200 failed calls, each after allocating D (1.25 MiB): nothing stays allocated
    assert "serial leaked MiB 0" in lines or "serial leaked MiB 1" in lines, out


GPU_INTERMEDIATE = """
m = te.var("m", "int64")
A = te.placeholder((64,), name="A")
B = te.compute((m, 64), lambda r, i: A[i] * r.astype("float32"), name="Bhuge")
C = te.compute((64,), lambda i: B[m - 1, i] + A[i], name="C")
s = te.create_schedule(C.op)
bx, tx = s[B].split(s[B].fuse(*B.op.axis), factor=64)
s[B].bind(bx, te.thread_axis("blockIdx.x"))
s[B].bind(tx, te.thread_axis("threadIdx.x"))
bx, tx = s[C].split(C.op.axis[0], factor=32)
s[C].bind(bx, te.thread_axis("blockIdx.x"))
s[C].bind(tx, te.thread_axis("threadIdx.x"))
mod = tf.build(s, [A, C, m], target="cuda", name="f")  # two kernels: Bhuge lives between them
"""


def test_unallocatable_gpu_intermediate_raises_with_a_fake_driver():
    out = run_case(
        GPU_INTERMEDIATE
        + """
import types
from tensorforge.runtime import cuda_driver
from tensorforge.runtime.cuda_exec import CUDASequence

class FakeError(Exception):
    pass

class FakeMemoryError(FakeError):  # as pycuda's MemoryError derives from its Error
    pass

def mem_alloc(n):
    raise FakeMemoryError("cuMemAlloc failed: out of memory")

sequence = CUDASequence(mod.sources[0], "cuda")  # made with the real driver (or none)
cuda_driver.driver = lambda: types.SimpleNamespace(Error=FakeError, mem_alloc=mem_alloc)
cuda_driver.activate = lambda device_id=0: None
try:
    sequence.call([0, 0, 2**48])  # fails before any launch
except tf.AllocationError as e:
    print("ERROR", e)
"""
    )
    assert "'f' could not allocate its intermediate buffer 'Bhuge' on the GPU: " in out, out
    assert "72057594037927936 bytes" in out and "cuMemAlloc failed: out of memory" in out


@pytest.mark.cuda
def test_unallocatable_gpu_intermediate_raises():
    out = run_case(
        GPU_INTERMEDIATE
        + """
dev = tf.cuda(0)
a = np.random.default_rng(6).random(64, dtype="float32")
A_, C_ = tf.nd.array(a, dev), tf.nd.empty((64,), "float32", dev)
try:
    mod(A_, C_, 2**48)  # 2**56 bytes
except tf.AllocationError as e:
    print("ERROR", e)
for m_ in (5, 1):
    mod(A_, C_, m_)
    np.testing.assert_allclose(C_.numpy(), a * (m_ - 1) + a, rtol=1e-6)
print("ran")
"""
    )
    assert "intermediate buffer 'Bhuge' on the GPU: 72057594037927936 bytes" in out, out
    assert "'f'" in out and "ran" in out


# -- the command line ------------------------------------------------------------------------------

TEMPLATE_FILE = """
from tensorforge import te, tune


@tune.template("misuse/cli_scale")
def cli_scale(n, dtype):
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    s = te.create_schedule(B.op)
    cfg = tune.get_config()
    cfg.define_split("split", B.op.axis[0], num_outputs=2)
    cfg.define_knob("pad", list(range(8192)))
    cfg["split"].apply(s, B, B.op.axis[0])
    return s, [A, B]
"""


def cli(tmp_path, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "tensorforge", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tmp_path,
    )


def test_cli_mistakes_are_answered_in_one_line(tmp_path):
    (tmp_path / "tmpl.py").write_text(TEMPLATE_FILE)
    (tmp_path / "broken.py").write_text("raise ValueError('oops')\n")
    template = f"{tmp_path / 'tmpl.py'}:cli_scale"
    cases = [
        (["tune", "--template", template, "--args", "[64]"], "takes (n, dtype); --args gave 1"),
        (["tune", "--template", template, "--args", "[64, "], "--args is not valid JSON"),
        (["tune", "--template", template, "--args", '{"n": 1}'], "--args must be a JSON list"),
        (
            ["tune", "--template", template, "--args", '[64, "float32"]', "--log", "/no/dir/x"],
            "cannot write the log '/no/dir/x'",
        ),
        (["tune", "--template", "/no/such.py:f"], "no such file '/no/such.py'"),
        (["tune", "--template", f"{tmp_path / 'broken.py'}:f"], "ValueError: oops"),
        (["tune", "nosuchop"], "invalid choice: 'nosuchop'"),
        (["log", "show", "/no/such.jsonl"], "no such file '/no/such.jsonl'"),
        (["frobnicate"], "unknown command 'frobnicate'"),
    ]
    for args, expected in cases:
        result = cli(tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        last = result.stderr.strip().splitlines()[-1]
        assert expected in last, (args, result.stderr)
    version = cli(tmp_path, "--version")
    assert version.returncode == 0 and version.stdout.startswith("tensorforge 0.")


def test_cli_trials_is_the_total_and_resume_counts_toward_it(tmp_path):
    (tmp_path / "tmpl.py").write_text(TEMPLATE_FILE)
    template = f"{tmp_path / 'tmpl.py'}:cli_scale"
    common = ["--args", '[64, "float32"]', "--log", "log.jsonl", "--tuner", "random", "--seed", "0"]
    common += ["--number", "1", "--repeat", "1", "--no-progress"]
    first = cli(tmp_path, "tune", "--template", template, "--trials", "3", *common)
    assert first.returncode == 0, first.stderr
    assert "with tune.apply_history_best('log.jsonl')" in first.stdout
    assert "s, args = cli_scale(64, 'float32')" in first.stdout  # the function to call
    second = cli(tmp_path, "tune", "--template", template, "--trials", "5", *common)
    assert second.returncode == 0, second.stderr
    assert "3 trials already in log.jsonl count toward --trials 5; measuring up to 2 more" in (
        second.stdout
    )
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 5


def _as_from_a_terminal():
    """In the child before exec: SIGINT at its default and unblocked, as a shell started from a
    terminal leaves it. A process started with SIGINT ignored keeps ignoring it (Python then
    installs no KeyboardInterrupt handler, as `nohup` intends), and ignored or blocked signals
    pass through exec: whatever this pytest process inherited must not decide the test."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_cli_ctrl_c_during_tune_says_what_was_saved(tmp_path):
    import signal
    import time

    (tmp_path / "tmpl.py").write_text(TEMPLATE_FILE)
    log = tmp_path / "log.jsonl"
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorforge",
            "tune",
            "--template",
            f"{tmp_path / 'tmpl.py'}:cli_scale",
        ]
        + ["--args", '[64, "float32"]', "--log", str(log), "--trials", "5000", "--tuner", "random"]
        + ["--number", "1", "--repeat", "1", "--n-parallel", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # its own process group: SIGINT reaches it and its workers, as a Ctrl-C does
        preexec_fn=_as_from_a_terminal,
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 2:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the tuner ended before the test could interrupt it"
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        state = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
        raise AssertionError(
            f"the tuner went on for 120 s after its Ctrl-C (this pytest's SIGINT handler and "
            f"blocked signals: {state})"
        ) from None
    records = 0
    for line in log.read_text().splitlines():  # a record cut off by the interrupt is not one
        try:
            json.loads(line)
            records += 1
        except ValueError:
            pass
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"interrupted: {records} records in {log}; run again to resume"
    ), err
    assert proc.returncode == 130
