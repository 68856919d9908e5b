"""timing.measure follows TVM's time_evaluator loop exactly; BenchmarkResult summarizes it."""

import pytest

from tensorforge.errors import ArgumentError
from tensorforge.runtime.timing import BenchmarkResult, measure


class FakeClock:
    """Each call of the timed function advances time by `call_ns`; counts the calls."""

    def __init__(self, call_ns):
        self.now = 0
        self.call_ns = call_ns
        self.calls = 0

    def __call__(self):
        return self.now

    def run(self):
        self.calls += 1
        self.now += self.call_ns


def test_number_and_repeat_without_min_repeat_ms():
    clock = FakeClock(call_ns=2_000)
    result = measure(clock.run, number=5, repeat=3, clock=clock)
    assert clock.calls == 1 + 5 * 3
    assert result.results == pytest.approx((2e-6, 2e-6, 2e-6))


def test_number_grows_as_tvm_computes_and_carries_over():
    clock = FakeClock(call_ns=1_000_000)  # 1 ms per call
    result = measure(clock.run, number=1, repeat=2, min_repeat_ms=10, clock=clock)
    # 1 call = 1 ms < 10 ms -> number = int(max(10 / (1 / 1) + 1, 1 * 1.618)) = 11 -> 11 ms.
    # The second measurement starts at number = 11 and needs no growth.
    assert clock.calls == 1 + (1 + 11) + 11
    assert result.results == pytest.approx((1e-3, 1e-3))


def test_number_grows_at_least_by_the_golden_ratio():
    clock = FakeClock(call_ns=1_000_000)
    measure(clock.run, number=10, repeat=1, min_repeat_ms=11, clock=clock)
    # 10 ms < 11 ms -> number = int(max(11 / 1 + 1, 10 * 1.618)) = 16
    assert clock.calls == 1 + 10 + 16


def test_zero_time_measurements_stop_after_the_limit():
    clock = FakeClock(call_ns=0)
    result = measure(
        clock.run, number=1, min_repeat_ms=1, limit_zero_time_iterations=3, clock=clock
    )
    assert result.results == (0.0,)
    assert clock.calls == 1 + 1 + 1 + 1  # warm-up, then three zero-length measurements (x1 each)


def test_synchronize_runs_after_warmup_and_each_measurement():
    clock = FakeClock(call_ns=10)
    syncs = []
    measure(clock.run, lambda: syncs.append(clock.calls), number=2, repeat=2, clock=clock)
    assert syncs == [1, 3, 5]


def test_result_statistics_and_text():
    result = BenchmarkResult((1.0, 2.0, 6.0))
    assert (result.mean, result.median, result.min, result.max) == (3.0, 2.0, 1.0, 6.0)
    assert result.std == pytest.approx((14 / 3) ** 0.5)  # population std, as numpy's default
    assert "mean (ms)" in str(result) and "3000.0000" in str(result)


@pytest.mark.parametrize(
    "option",
    [
        {"number": 0},
        {"repeat": -1},
        {"number": 1.5},
        {"min_repeat_ms": -1},
        {"repeats_to_cooldown": 0},
    ],
)
def test_bad_options(option):
    with pytest.raises(ArgumentError, match=next(iter(option))):
        measure(lambda: None, **option)
