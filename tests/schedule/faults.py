"""Test-only faults for the schedule layer, patched in with monkeypatch (or passed to a fuzz
child as a patch), so tests can show that the verifier and the fuzzer catch a broken bound
inference. Nothing in the package knows about them."""

from tensorforge.ir.arith import simplify_expr
from tensorforge.schedule import bounds

_needed_region = bounds._needed_region  # the real one, taken before any patch


def shrunk_needed_region(*args, **kwargs):
    """bounds._needed_region with every compute_at region one element too small per axis."""
    return [(lo, simplify_expr(extent - 1)) for lo, extent in _needed_region(*args, **kwargs)]


# for fuzz_run.run_isolated(case, patches=SHRINK_REGIONS): set in the child before the case runs
SHRINK_REGIONS = (("tensorforge.schedule.bounds", "_needed_region", shrunk_needed_region),)
