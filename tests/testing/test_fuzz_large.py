"""The fuzzer's large-extent draws: lowered only, every index that can pass int32 is int64."""

import random

import pytest

from tensorforge.testing.fuzz_choice import RandomChooser
from tensorforge.testing.fuzz_large import check_large, draw_large


@pytest.mark.parametrize("seed", range(24))
def test_large_extents_lower_with_int64_indices(seed):
    source = draw_large(RandomChooser(random.Random(seed)))
    assert check_large(source) == [], source
