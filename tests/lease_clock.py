"""Waiting for leases to expire on the Redis server's clock, the one the lease script reads.

A test that slept a little longer than its leases (0.6 s against 0.5 s) flaked on a loaded
machine; one that waits until the server's ``TIME`` is past every lease's expiry holds
however long the machine takes, and waits no longer than needed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bloom_frontier.frontier.redis import RedisFrontier

#: Lease TTL for tests that let leases expire: long enough that a loaded two-core machine
#: does not let one expire between two calls that expect it held.
EXPIRING_LEASE_TTL = 1.0


def server_ms(frontier: RedisFrontier) -> int:
    """Milliseconds on the Redis server's clock (as ``now_ms`` in common.lua reads it)."""
    seconds, micros = frontier.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_until_expired(frontier: RedisFrontier, timeout: float = 30.0) -> None:
    """Return once every lease of ``frontier``'s crawl (all partitions) has expired by the
    Redis server's clock: the next lease call reclaims them all."""
    deadline = time.monotonic() + timeout
    while True:
        ends = [
            score
            for keys in frontier.partitions.keys
            for _, score in frontier.client.zrange(keys.leases, -1, -1, withscores=True)
        ]
        left_ms = max(ends, default=0) - server_ms(frontier)
        if left_ms <= 0:  # the lease script reclaims leases whose expiry is <= its now
            return
        assert time.monotonic() < deadline, f"leases still held {left_ms} ms from now"
        time.sleep(left_ms / 1000 + 0.002)
