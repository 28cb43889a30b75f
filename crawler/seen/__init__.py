"""Seen filters: "have we met this dedupe key before?", answered for a whole batch at once.

One interface, one implementation per backend:

- :class:`bloom_frontier.seen.memory.MemoryBloomSeenFilter`: in-process scalable Bloom filter
  (the default; saved to ``JOBDIR`` so a paused crawl resumes).
- :class:`bloom_frontier.seen.redis.RedisBloomSeenFilter`: RedisBloom ``BF.*`` shared by workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class SeenFilter(Protocol):
    """A set of dedupe keys with Bloom-filter semantics (no false negatives)."""

    def add_many(self, keys: Sequence[str]) -> list[bool]:
        """Add ``keys``; return, per key, True if it was new (not seen before, nor earlier in
        the same batch)."""
        ...

    def close(self) -> None:
        """Persist what needs persisting and release resources."""
        ...


def check_filter_parameters(capacity: int, error_rate: float, expansion: int) -> None:
    """ValueError, naming them, for Bloom parameters no filter can honour."""
    if capacity < 1 or not 0 < error_rate < 1 or expansion < 1:
        raise ValueError(
            f"bad seen-filter parameters: capacity={capacity} error_rate={error_rate} "
            f"expansion={expansion}"
        )
