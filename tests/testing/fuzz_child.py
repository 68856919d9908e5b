"""Running a test's kernel in a forked child, where a guard-page fault is a result."""

import faulthandler
import os
import traceback

from tensorforge.testing.guarded import GuardError


def in_child(fn) -> int:
    """Run fn() in a forked child: 0 if it returns, 3 on GuardError, 1 on another exception,
    -N if signal N killed it. (The kernels here are serial, so forking this process is safe.)"""
    pid = os.fork()
    if pid == 0:
        faulthandler.disable()  # pytest's: the signal is the expected result, not a crash to dump
        code = 0
        try:
            fn()
        except GuardError:
            code = 3
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
