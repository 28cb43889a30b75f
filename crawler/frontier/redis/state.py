"""Status reads of the shared frontier: sizes and failure records, read from Redis.

The sizes come from one script (``counts.lua``): a lease moves a request from the queue to
the leases, two separate reads could miss it in both.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from crawler.frontier.redis.leases import text

if TYPE_CHECKING:
    import redis

    from crawler.frontier.lua import FrontierScripts
    from crawler.frontier.redis.layout import FrontierKeys
    from crawler.seen.sharded import ShardedBloomSeenFilter


def sizes(scripts: FrontierScripts) -> tuple[int, int, int]:
    """Requests queued, leased and failed, read atomically."""
    queued, leased, failed = scripts.run("counts")
    return int(queued), int(leased), int(failed)


def counts(scripts: FrontierScripts, seen: ShardedBloomSeenFilter) -> dict[str, int]:
    """Sizes of the shared state: queued, leased and failed requests, keys seen."""
    queued, leased, failed = sizes(scripts)
    return {
        "queued": queued,
        "leased": leased,
        "failed": failed,
        "seen": sum(info.items_inserted for info in seen.info() if info is not None),
    }


def failures(client: redis.Redis, keys: FrontierKeys) -> dict[str, dict[str, Any]]:
    """The failed requests' records, by URL."""
    raw = client.hgetall(keys.failed)
    return {text(url): json.loads(record) for url, record in raw.items()}
