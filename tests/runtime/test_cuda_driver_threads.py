"""cuda_driver's contexts across threads, with a stand-in for pycuda.driver (no GPU needed):
a thread other than the main one leaves no context pushed after `thread_scope` (PyCUDA aborts
the process at exit when a thread's context stack is not empty: autograd's CUDA backward runs
on a thread of its own)."""

import threading

import pytest

from tensorforge.runtime import cuda_driver


class FakeDriver:
    """pycuda.driver's few calls cuda_driver makes, counting each thread's pushed contexts."""

    def __init__(self):
        self.stacks = {}
        driver = self

        class Context:
            @staticmethod
            def pop():
                driver.stacks[threading.get_ident()].pop()

        class Primary:
            def __init__(self, device):
                self.device = device

            def push(self):
                driver.stacks.setdefault(threading.get_ident(), []).append(self.device)

        class Device:
            def __init__(self, index):
                self.index = index

            @staticmethod
            def count():
                return 2

            def retain_primary_context(self):
                return Primary(self.index)

        self.Context, self.Device = Context, Device


@pytest.fixture
def fake(monkeypatch):
    driver = FakeDriver()
    monkeypatch.setattr(cuda_driver, "_driver", driver)
    monkeypatch.setattr(cuda_driver, "_primary", {})
    monkeypatch.setattr(cuda_driver, "_local", threading.local())
    return driver


def run_in_thread(fn):
    errors = []

    def body():
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(err)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return thread


def test_a_worker_thread_pops_what_it_pushed(fake):
    seen = []

    def work():
        with cuda_driver.thread_scope(1):
            cuda_driver.activate(1)  # (a launch inside: cheap, nothing more pushed)
            seen.append(list(fake.stacks[threading.get_ident()]))
        seen.append(list(fake.stacks[threading.get_ident()]))

    run_in_thread(work)
    assert seen == [[1], []]


def test_a_worker_thread_scope_restores_another_gpu(fake):
    seen = []

    def work():
        cuda_driver.activate(0)
        with cuda_driver.thread_scope(1):
            seen.append(list(fake.stacks[threading.get_ident()]))
        seen.append(list(fake.stacks[threading.get_ident()]))

    run_in_thread(work)
    assert seen == [[1], [0]]


def test_the_main_thread_keeps_its_context_current(fake):
    with cuda_driver.thread_scope(0):
        pass
    assert fake.stacks[threading.get_ident()] == [0]  # popped at exit (atexit)
    cuda_driver._pop_at_exit()
    assert fake.stacks[threading.get_ident()] == []
