"""The in-memory executable cache: keyed by source hash and target string, LRU-bounded."""

from runtime_fakes import buffer, source

from tensorforge.runtime.cache import ExecutableCache, cache_key


def factory(kernel, target):
    return object()


def test_same_source_and_target_hit():
    cache = ExecutableCache()
    kernel = source([buffer("A", [2])])
    first = cache.get_or_compile(kernel, "llvm -mcpu=x", factory)
    assert cache.get_or_compile(kernel, "llvm -mcpu=x", factory) is first
    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 1)


def test_other_text_or_target_misses():
    cache = ExecutableCache()
    kernel = source([buffer("A", [2])], text="one")
    first = cache.get_or_compile(kernel, "llvm -mcpu=x", factory)
    assert cache.get_or_compile(kernel, "llvm -mcpu=y", factory) is not first
    assert (
        cache.get_or_compile(source([buffer("A", [2])], text="two"), "llvm -mcpu=x", factory)
        is not first
    )
    assert cache_key(kernel, "t")[0] == cache_key(source([buffer("A", [2])], text="one"), "t")[0]


def test_least_recently_used_is_evicted():
    cache = ExecutableCache(maxsize=2)
    kernels = [source([buffer("A", [2])], text=str(i)) for i in range(3)]
    first = cache.get_or_compile(kernels[0], "t", factory)
    cache.get_or_compile(kernels[1], "t", factory)
    cache.get_or_compile(kernels[0], "t", factory)  # 0 is now the most recent
    cache.get_or_compile(kernels[2], "t", factory)  # evicts 1
    assert len(cache) == 2
    assert cache.get_or_compile(kernels[0], "t", factory) is first
    misses = cache.misses
    cache.get_or_compile(kernels[1], "t", factory)
    assert cache.misses == misses + 1
