"""The CPU arenas of huge pages: the same values, aligned, and torch's memory when turned off."""

import pytest

torch = pytest.importorskip("torch")

from tensorforge.graph import huge_pages  # noqa: E402


def _tensors():
    gen = torch.Generator().manual_seed(3)
    return {
        "weights": torch.randn(769, 383, generator=gen),  # ~1.1 MB: past MIN_BYTES
        "bias": torch.randn(7, generator=gen),
        "mask": torch.rand(5, 3, generator=gen) > 0.5,
        "index": torch.randint(-9, 9, (11,), generator=gen, dtype=torch.int64),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
    }


@pytest.mark.parametrize("on", ["1", "0"])
def test_packed_tensors_keep_their_values_and_start_on_cache_lines(on, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_HUGE_PAGES", on)
    tensors = _tensors()
    packed = huge_pages.packed(tensors)
    assert packed.keys() == tensors.keys()
    for key, t in tensors.items():
        got = packed[key]
        assert got.shape == t.shape and got.dtype == t.dtype and got.is_contiguous()
        assert torch.equal(got, t)
        assert got.numel() == 0 or got.data_ptr() % huge_pages.ALIGN == 0
        assert got.numel() == 0 or got.data_ptr() != t.data_ptr()  # a copy


def test_a_large_arena_starts_on_a_huge_page_unless_turned_off(monkeypatch):
    nbytes = 3 * huge_pages.MIN_BYTES + 5
    arena = huge_pages.empty_bytes(nbytes)
    assert arena.numel() == nbytes and arena.dtype == torch.uint8
    arena.fill_(7)  # writable over its whole length
    assert int(arena.sum()) == 7 * nbytes
    if huge_pages.enabled():
        assert arena.data_ptr() % huge_pages.HUGE_PAGE == 0
    monkeypatch.setenv("TENSORFORGE_HUGE_PAGES", "0")
    assert not huge_pages.enabled()
    small = huge_pages.empty_bytes(nbytes)
    assert small.numel() == nbytes
