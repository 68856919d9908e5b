"""A process forked after parallel kernels ran can run parallel kernels itself (tuner workers,
the fuzzer): libgomp's pool is released before fork instead of hanging the child."""

import subprocess
import sys
import textwrap


def test_parallel_kernel_in_forked_child():
    script = textwrap.dedent("""
        import os, numpy as np, tensorforge as tf
        from tensorforge import te
        A = te.placeholder((1000,), name="A")
        B = te.compute((1000,), lambda i: A[i] * 2.0, name="B")
        s = te.create_schedule(B.op)
        o, i = s[B].split(B.op.axis[0], factor=100)
        s[B].parallel(o)
        mod = tf.build(s, [A, B])
        a = tf.nd.array(np.arange(1000, dtype="float32"))
        b = tf.nd.empty((1000,), "float32")
        mod(a, b)
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                mod(a, b)
                os._exit(0 if np.array_equal(b.numpy(), np.arange(1000) * 2) else 3)
            assert os.waitpid(pid, 0)[1] == 0
        mod(a, b)  # and the parent still runs in parallel afterwards
        print("ok")
    """)
    env = {"TF_NUM_THREADS": "2"}
    import os

    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr
