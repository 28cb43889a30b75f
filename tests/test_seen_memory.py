"""The in-process scalable Bloom filter: new-vs-seen answers, growth, and JOBDIR resume."""

from __future__ import annotations

import pytest

from bloom_frontier.seen import SeenFilter
from bloom_frontier.seen.memory import MemoryBloomSeenFilter


def test_reports_new_once_also_within_one_batch() -> None:
    seen = MemoryBloomSeenFilter(capacity=100, error_rate=0.001)
    assert seen.add_many(["a", "b", "a"]) == [True, True, False]
    assert seen.add_many(["b", "c"]) == [False, True]
    assert len(seen) == 3
    assert isinstance(seen, SeenFilter)


def test_keeps_its_error_rate_as_it_grows_past_capacity() -> None:
    seen = MemoryBloomSeenFilter(capacity=1_000, error_rate=0.01, expansion=2)
    keys = [f"https://example.com/page/{i}" for i in range(20_000)]
    fresh = seen.add_many(keys)
    # False positives at insertion make a new key look seen: the crawl would lose that page.
    lost = fresh.count(False)
    assert lost <= 0.01 * len(keys)
    # Fresh keys probed against the grown filter: a fixed-size filter of capacity 1,000
    # holding 20,000 keys would call nearly all of them seen. Allow sampling noise.
    probes = seen.add_many([f"https://example.org/other/{i}" for i in range(20_000)])
    assert probes.count(False) <= 1.25 * 0.01 * len(probes)
    assert not any(seen.add_many(keys))


def test_saved_to_jobdir_and_resumed(tmp_path) -> None:
    first = MemoryBloomSeenFilter(capacity=10, error_rate=0.001, directory=tmp_path)
    first.add_many([f"k{i}" for i in range(50)])  # several layers
    first.close()
    resumed = MemoryBloomSeenFilter(capacity=10, error_rate=0.001, directory=tmp_path)
    assert len(resumed) == 50
    assert resumed.add_many(["k0", "k49", "new"]) == [False, False, True]


@pytest.mark.parametrize(("capacity", "error_rate"), [(0, 0.01), (10, 0.0), (10, 1.0)])
def test_rejects_parameters_that_cannot_work(capacity: int, error_rate: float) -> None:
    with pytest.raises(ValueError, match="seen-filter parameters"):
        MemoryBloomSeenFilter(capacity=capacity, error_rate=error_rate)
