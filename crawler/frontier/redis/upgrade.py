"""Moving a crawl queued by an older release to the current layout, when a worker starts.

Before the compact format, ``queue`` ranked request ids by ``-priority`` and each id's record
(JSON), score and host sat in the ``requests``, ``scores`` and ``hosts`` hashes. Those
records are still read (:mod:`bloom_frontier.frontier.decode`), but they must be moved into lanes
first (:mod:`.layout`, "The queue"): :func:`upgrade_layout` does it in batches
(``upgrade.lua``), in the old queue's order, and gives the requests leased at the time
their lane, so an expired lease is requeued there. Stop the older workers first: the two
releases' scripts do not share a queue. It runs on the crawl's own keys only (the layout of
``FRONTIER_PARTITIONS`` = 1): an older release knew no partitions, and a crawl queued there
refuses to start with more (:func:`.partitions.partition_count`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bloom_frontier.frontier.redis.lua import FrontierScripts
from bloom_frontier.redis_client import text

if TYPE_CHECKING:
    import redis

    from bloom_frontier.frontier.redis.layout import FrontierKeys

#: Old entries moved per script call.
BATCH = 1000


def old_keys(keys: FrontierKeys) -> tuple[str, str]:
    """The older release's ``scores`` and ``hosts`` hashes."""
    return f"{keys.prefix}:scores", f"{keys.prefix}:hosts"


def upgrade_layout(client: redis.Redis, keys: FrontierKeys) -> int:
    """Move an older release's queue and leases to lanes; how many entries were moved
    (0 at once when the crawl has no key of the older layout)."""
    scores, hosts = old_keys(keys)
    if not client.exists(scores, hosts):
        return 0
    scripts = FrontierScripts(client, keys, ("upgrade",))
    moved, front = 0, BATCH
    while True:  # in the queue's order: old ids rank by -priority, before the new lanes
        members = [text(member) for member in client.zrange(keys.queue, 0, front - 1)]
        old = [member for member in members if "|" not in member]
        if old:
            moved += int(scripts.run("upgrade", old))
        elif len(members) < front:
            break
        else:
            front *= 2  # only lanes in front: look further
    leased = [text(lease) for lease in client.zrange(keys.leases, 0, -1)]
    for start in range(0, len(leased), BATCH):
        moved += int(scripts.run("upgrade", leased[start : start + BATCH]))
    client.delete(scores, hosts)
    return moved
