"""Shared test setup: the `cuda` marker (skipped without a usable GPU) and a seeded `rng`."""

import functools
import os
import shutil
import tempfile
import zlib

import numpy as np
import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda: needs an NVIDIA GPU and pycuda (skipped where there is none)"
    )
    # The on-disk kernel cache (runtime/disk_cache.py) never touches ~/.cache from the suite:
    # each session (each xdist worker) gets an empty folder, and the cache is off unless a test
    # turns it on (tests/runtime/test_disk_cache.py does) or TENSORFORGE_CACHE=1 asks for it.
    # NOTE: set here, before collection, so subprocesses the tests start inherit it too.
    folder = tempfile.mkdtemp(prefix="tensorforge-test-cache-")
    os.environ["TENSORFORGE_CACHE_DIR"] = folder
    os.environ.setdefault("TENSORFORGE_CACHE", "0")
    # One process builds a graph's kernels (runtime/build_workers.py forks one per core
    # otherwise): xdist's workers take the cores already. test_build_workers.py asks for more.
    os.environ.setdefault("TENSORFORGE_BUILD_JOBS", "1")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    """pycuda imports and sees a GPU; asked once, and only if a cuda-marked test was collected."""
    try:
        from pycuda import driver

        driver.init()
        return driver.Device.count() > 0
    except Exception:  # noqa: BLE001 - ImportError, or pycuda's errors without a driver/GPU
        return False


def pytest_collection_modifyitems(config, items):
    cuda_items = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not cuda_items or cuda_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and pycuda")
    for item in cuda_items:
        item.add_marker(skip)


@pytest.fixture(params=["llvm", "c"])
def cpu_target(request):
    """Each CPU target kind in turn: a test taking it runs on llvm and on c; check_against_numpy
    also compares a c build's output with llvm's (differential testing of two backends)."""
    if request.param == "c" and shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("the c target needs a C compiler")
    return request.param


@pytest.fixture
def rng(request):
    """A numpy Generator seeded from the test's id: reproducible, and different per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def _sigint_left_as_found():
    """A test (or a library it starts, such as a Ray driver) that leaves SIGINT ignored would
    pass that on to every later subprocess through exec, where Ctrl-C then does nothing: put the
    handler back after each test."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before and before is not None:
        signal.signal(signal.SIGINT, before)
