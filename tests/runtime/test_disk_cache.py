"""The on-disk cache of compiled llvm kernels: a miss writes an entry (in the background), a hit
loads it without LLVM, damaged entries are rebuilt, concurrent processes share one folder."""

import inspect
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.runtime import disk_cache, library_file
from tensorforge.runtime.cache import EXECUTABLES
from tensorforge.runtime.shared_lib import LibraryExecutable


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """A fresh cache folder and empty in-memory cache; yields the folder of entries."""
    disk_cache.flush()  # entries earlier tests queued are not counted here
    monkeypatch.setenv("TENSORFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TENSORFORGE_CACHE", "1")
    monkeypatch.delenv("TENSORFORGE_CACHE_MAX_MB", raising=False)
    monkeypatch.setattr(disk_cache, "STATS", disk_cache.Stats())
    EXECUTABLES.clear()
    yield tmp_path / "cache" / "kernels"
    disk_cache.flush()
    EXECUTABLES.clear()


def scale(n=1000, factor=3.0):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * factor + 1.0, name="B")
    s = te.create_schedule(B.op)
    outer, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].parallel(outer)
    s[B].vectorize(inner)
    return s, [A, B]


KERNEL = inspect.getsource(scale)  # the subprocesses below build the very same kernel


def check(mod, n=1000, factor=3.0):
    a = np.arange(n, dtype=np.float32)
    b = np.zeros(n, np.float32)
    mod(a, b)
    np.testing.assert_allclose(b, a * factor + 1.0, rtol=1e-6)


def build_again(factor=3.0):
    """Build as a new process would: the in-memory cache forgets first."""
    EXECUTABLES.clear()
    mod = tf.build(*scale(factor=factor), name="scale")
    check(mod, factor=factor)
    return mod


def entries(folder):
    return sorted(p for p in folder.iterdir() if p.suffix == ".so") if folder.exists() else []


def run_python(script, env, warnings_are_errors=False):
    # NOTE: Python 3.12 warns (DeprecationWarning) when a process forks with threads running.
    warnings = ["-W", "error::DeprecationWarning"] if warnings_are_errors else []
    return subprocess.Popen(
        [sys.executable, *warnings, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def test_miss_writes_an_entry_and_a_hit_loads_it(cache):
    first = build_again()
    assert type(first["scale"].executable).__name__ == "LLVMExecutable"
    disk_cache.flush()
    [entry] = entries(cache)
    assert library_file.read(entry).metadata["functions"][0]["entry"] == "scale"
    second = build_again()
    assert isinstance(second["scale"].executable, LibraryExecutable)
    assert (disk_cache.STATS.misses, disk_cache.STATS.hits, disk_cache.STATS.writes) == (1, 1, 1)
    assert second.get_source("ll") == first.get_source("ll")
    assert "scale" in second.get_source("asm")
    build_again(factor=5.0)  # another kernel: another entry
    disk_cache.flush()
    assert len(entries(cache)) == 2


def test_a_hit_in_a_fresh_process_runs_no_llvm(cache):
    build_again()
    disk_cache.flush()
    script = (
        """
        import tensorforge.runtime.llvm_exec as llvm_exec

        class NoJIT:
            def __init__(self, *args, **kwargs):
                raise AssertionError("a cache hit must not compile")

        llvm_exec.LLVMExecutable = NoJIT
        import numpy as np
        import tensorforge as tf
        from tensorforge import te
        from tensorforge.runtime import disk_cache
        """
        + textwrap.indent(KERNEL, " " * 8).lstrip()
        + """
        mod = tf.build(*scale(), name="scale")
        a = np.arange(1000, dtype=np.float32); b = np.zeros(1000, np.float32)
        mod(a, b)
        assert np.allclose(b, a * 3.0 + 1.0)
        print(disk_cache.STATS.hits)
        """
    )
    process = run_python(script, {"TENSORFORGE_CACHE_DIR": os.environ["TENSORFORGE_CACHE_DIR"]})
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert out.split() == ["1"]


@pytest.mark.parametrize("damage", ["truncate to half", "empty", "flip a byte", "foreign key"])
def test_a_damaged_entry_is_rebuilt_not_loaded(cache, damage):
    build_again()
    disk_cache.flush()
    [entry] = entries(cache)
    data = entry.read_bytes()
    if damage == "truncate to half":
        with open(entry, "r+b") as f:
            f.truncate(len(data) // 2)
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "flip a byte":
        entry.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    else:  # a whole entry, but of another kernel: renamed over this one
        build_again(factor=7.0)
        disk_cache.flush()
        [other] = [p for p in entries(cache) if p != entry]
        os.replace(other, entry)
    mod = build_again()  # rebuilt: compiled again, correct
    assert type(mod["scale"].executable).__name__ == "LLVMExecutable"
    assert disk_cache.STATS.rejected == 1
    disk_cache.flush()
    library_file.read(entry)  # written again, whole
    assert isinstance(build_again()["scale"].executable, LibraryExecutable)


def test_concurrent_processes_share_one_folder(cache, tmp_path):
    """Several processes build the same kernel at the same moment into one cache folder."""
    workers = 4
    script = (
        """
        import os, sys, time
        import numpy as np
        import tensorforge as tf
        from tensorforge import te
        from tensorforge.runtime import disk_cache
        """
        + textwrap.indent(KERNEL, " " * 8).lstrip()
        + """
        schedule = scale()
        open(sys.argv[1] + ".ready", "w").close()
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.002)
        mod = tf.build(*schedule, name="scale")
        a = np.arange(1000, dtype=np.float32); b = np.zeros(1000, np.float32)
        mod(a, b)
        assert np.allclose(b, a * 3.0 + 1.0)
        print("hit" if disk_cache.STATS.hits else "miss")
        """
    )
    env = {"TENSORFORGE_CACHE_DIR": os.environ["TENSORFORGE_CACHE_DIR"], "TF_NUM_THREADS": "2"}
    go = tmp_path / "go"
    processes = []
    for i in range(workers):
        command = [sys.executable, "-c", textwrap.dedent(script), str(tmp_path / f"w{i}"), str(go)]
        processes.append(
            subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **env},
            )
        )
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"w{i}.ready").exists() for i in range(workers)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes)
        time.sleep(0.01)
    go.touch()
    outcomes = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        outcomes.append(out.strip())
    assert set(outcomes) <= {"hit", "miss"} and "miss" in outcomes
    [entry] = entries(cache)  # one whole entry, no temporary files left
    assert sorted(p.name for p in cache.iterdir()) == [entry.name]
    library_file.read(entry)
    assert isinstance(build_again()["scale"].executable, LibraryExecutable)


def test_fork_while_an_entry_is_being_written(cache):
    """fork() lets the entry in progress finish first (no thread of ours is inside LLVM or the C
    compiler in the child); the child compiles, runs and writes its own kernels, and the
    parent's queue stays the parent's."""
    script = (
        """
        import os, time
        import numpy as np
        import tensorforge as tf
        from tensorforge import te
        """
        + textwrap.indent(KERNEL, " " * 8).lstrip()
        + """
        from tensorforge.runtime import disk_cache

        tf.build(*scale(), name="scale")  # a miss: its entry is written in the background
        time.sleep(disk_cache.IDLE_S * 1.2)  # the writer is at it now
        pid = os.fork()
        if pid == 0:
            written = disk_cache.STATS.writes  # 1 if the parent's entry was done before fork
            mod = tf.build(*scale(factor=2.0), name="scale")
            a = np.arange(1000, dtype=np.float32); b = np.zeros(1000, np.float32)
            mod(a, b)
            disk_cache.flush()  # only the child's own entry
            ok = np.allclose(b, a * 2.0 + 1.0) and disk_cache.STATS.writes == written + 1
            os._exit(0 if ok else 3)
        assert os.waitpid(pid, 0)[1] == 0
        disk_cache.flush()
        print(disk_cache.STATS.writes, "ok")
        """
    )
    env = {"TENSORFORGE_CACHE_DIR": os.environ["TENSORFORGE_CACHE_DIR"], "TF_NUM_THREADS": "2"}
    process = run_python(script, env, warnings_are_errors=True)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0 and out.split() == ["1", "ok"], err
    assert len(entries(cache)) == 2  # the parent's and the child's


def test_turned_off_it_neither_reads_nor_writes(cache, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", "0")
    build_again()
    build_again()
    disk_cache.flush()
    assert entries(cache) == [] and disk_cache.STATS == disk_cache.Stats()


def test_without_a_c_compiler_it_stays_in_memory(cache, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    build_again()
    disk_cache.flush()
    assert entries(cache) == [] and disk_cache.STATS.write_errors == 0


def test_least_recently_used_entries_go_first(tmp_path):
    folder = tmp_path / "kernels"
    folder.mkdir()
    now = time.time()
    for i, age in enumerate([50, 10, 40, 20]):  # seconds since last use
        path = folder / f"{i}.so"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (now - age, now - age))
    stale = folder / ".tmp-crashed.tflib"
    stale.write_bytes(b"x")
    os.utime(stale, (now - 2 * disk_cache.STALE_TEMPORARY_S,) * 2)
    fresh = folder / ".tmp-writing.tflib"
    fresh.write_bytes(b"x")
    disk_cache._evict(str(folder), 2500)
    assert sorted(p.name for p in folder.iterdir()) == [".tmp-writing.tflib", "1.so", "3.so"]


def test_the_size_bound_holds_while_building(cache, monkeypatch):
    build_again()
    disk_cache.flush()
    [entry] = entries(cache)
    size = entry.stat().st_size
    monkeypatch.setenv("TENSORFORGE_CACHE_MAX_MB", str(2.5 * size / 2**20))
    for factor in (4.0, 5.0, 6.0):
        build_again(factor=factor)
        disk_cache.flush()
    kept = entries(cache)
    assert len(kept) == 2 and entry not in kept
    assert sum(p.stat().st_size for p in kept) <= 2.5 * size


def test_the_writer_keeps_off_llvm_while_kernels_compile(monkeypatch):
    written = []
    monkeypatch.setattr(disk_cache, "_write", lambda job: written.append(time.monotonic()))
    writer = disk_cache._Writer()
    with writer.compiling():
        writer.submit("job")
        time.sleep(3 * disk_cache.IDLE_S)
        assert written == []  # not while a compile runs
    compiled = time.monotonic()
    deadline = compiled + 30
    while not written and time.monotonic() < deadline:
        time.sleep(0.01)
    assert written and written[0] - compiled >= 0.9 * disk_cache.IDLE_S
    writer.suspend()
    for _ in range(disk_cache.MAX_PENDING + 5):
        writer.submit("job")
    time.sleep(2 * disk_cache.IDLE_S)
    assert len(written) == 1  # not while suspended (timing, fork)
    writer.resume()
    with writer.compiling():
        writer.flush()  # now, compiling or not
    assert len(written) == 1 + disk_cache.MAX_PENDING  # the rest were not queued
