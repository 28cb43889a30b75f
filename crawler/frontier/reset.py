"""Clearing a shared crawl so the same command can crawl again (``scrapy frontier SPIDER
--reset --yes``).

A crawl's shared state is every key under its prefix (:mod:`bloom_frontier.frontier.redis.layout`:
queue, requests, leases, failures, staged batches, politeness state, shared robots.txt,
status records, crawl-wide limit counters, the quarantine, the seen filter) plus, with
``SEEN_FILTER_SHARDS`` > 1, the filter's shards, and with ``FRONTIER_PARTITIONS`` > 1, the
queue's partitions, which live under hash tags of their own.
The record store (``STORE_URL``) is not touched: its redirect maps are results, not state.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import redis

from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.redis_client import text
from bloom_frontier.seen.sharded import shard_keys

#: Keys deleted per command.
DELETE_BATCH = 500
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


class CrawlStillRunning(Exception):
    """Workers of the crawl still publish their status: a reset would pull the frontier
    from under them."""

    def __init__(self, prefix: str, workers: list[str]) -> None:
        self.prefix = prefix
        self.workers = workers
        shown = ", ".join(workers[:3]) + (", ..." if len(workers) > 3 else "")
        super().__init__(
            f"refusing to reset {prefix}: {len(workers)} worker(s) still reporting ({shown}); "
            "stop them first (a stopped worker's status expires within three "
            "FRONTIER_STATUS_INTERVAL)"
        )


def glob_escape(text: str) -> str:
    """``text`` matched literally by a Redis ``SCAN MATCH`` pattern.

    >>> glob_escape("{site[1]}")
    '{site\\\\[1\\\\]}'
    """
    return _GLOB_SPECIAL.sub(r"\\\1", text)


def reporting_workers(client: redis.Redis, keys: FrontierKeys) -> list[str]:
    """Ids of the workers whose status record is still fresh (not expired)."""
    owners = sorted(text(owner) for owner in client.smembers(keys.workers))
    return [owner for owner in owners if client.exists(keys.worker(owner))]


def crawl_keys(client: redis.Redis, keys: FrontierKeys) -> Iterator[str]:
    """Every Redis key holding the crawl's shared state (see the module docstring)."""
    # Every partition's keys whatever their number (even if its record was overwritten).
    stem = keys.prefix.replace("{", "").replace("}", "")
    patterns = [f"{glob_escape(keys.prefix)}:*", f"{{{glob_escape(stem)}:part:*/*:*}}:*"]
    shards = int(client.get(f"{keys.seen}:shards") or 1)
    if shards > 1:
        patterns += [f"{glob_escape(shard)}*" for shard in shard_keys(keys.seen, shards)]
    for pattern in patterns:
        for key in client.scan_iter(match=pattern, count=1000):
            yield text(key)


def reset_crawl(client: redis.Redis, keys: FrontierKeys) -> int:
    """Delete the crawl's shared state; the number of keys deleted. Raises
    :class:`CrawlStillRunning` while a worker reports, deleting nothing."""
    workers = reporting_workers(client, keys)
    if workers:
        raise CrawlStillRunning(keys.prefix, workers)
    found = sorted(set(crawl_keys(client, keys)))
    deleted = 0
    for start in range(0, len(found), DELETE_BATCH):
        deleted += client.unlink(*found[start : start + DELETE_BATCH])
    return deleted
