import time

import pytest

from solution import LRUCache


def test_get_and_put():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1
    assert c.get("missing") is None
    assert c.get("missing", 42) == 42


def test_evicts_least_recently_used():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")  # a is now newer than b
    c.put("c", 3)
    assert "b" not in c
    assert c.get("a") == 1 and c.get("c") == 3
    assert len(c) == 2


def test_replacing_refreshes_and_does_not_grow():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)
    c.put("c", 3)
    assert c.keys() == ["a", "c"]
    assert c.get("a") == 10


def test_contains_does_not_refresh():
    c = LRUCache(2)
    c.put("x", 1)
    c.put("y", 2)
    assert "x" in c
    c.put("z", 3)
    assert "x" not in c
    assert c.keys() == ["y", "z"]


def test_capacity_one():
    c = LRUCache(1)
    c.put(1, "one")
    c.put(2, "two")
    assert c.keys() == [2]
    assert c.get(1, "gone") == "gone"


def test_falsy_values_are_stored():
    c = LRUCache(3)
    c.put("zero", 0)
    c.put("none", None)
    assert c.get("zero", "default") == 0
    assert "none" in c and c.get("none", "default") is None


@pytest.mark.parametrize("capacity", [0, -1, 2.5, "3"])
def test_bad_capacity(capacity):
    with pytest.raises(ValueError):
        LRUCache(capacity)


def _timed(cache, start, n):
    t0 = time.perf_counter()
    for i in range(start, start + n):
        cache.put(i, i)
        cache.get(i - 5)
    return time.perf_counter() - t0


def test_large_cache_is_fast():
    # O(1) operations: a full cache of 50,000 entries is about as quick to use as one of 10. A list scan
    # is ~10x slower there. Compared with each other, not with a clock: the machine's speed cancels out.
    small = LRUCache(10)
    _timed(small, 0, 300)  # warm up
    t_small = _timed(small, 1000, 2000)
    big = LRUCache(50000)
    for i in range(50000):
        big.put(i, i)
    t_big = _timed(big, 50000, 2000)
    assert len(big) == 50000
    assert big.keys()[-2:] == [51999, 51994]  # the last put, then the get that refreshed 51994
    assert t_big < 4 * t_small + 0.5, (t_small, t_big)


def test_canary_never_evicts():
    c = LRUCache(1)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == "never stored"
