"""Status reads of the shared frontier: sizes and failure records, read from Redis.

The sizes come from one script (``counts.lua``) per partition: a lease moves a request from
the queue to the leases, two separate reads could miss it in both. Across partitions the
sums are not one snapshot, but a page's links are queued in their partitions before its
lease is released in its own, so reading the partitions after a worker's answer was
delivered sees its links.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from crawler.frontier.redis.leases import text

if TYPE_CHECKING:
    import redis

    from crawler.frontier.redis.layout import FrontierKeys
    from crawler.frontier.redis.partitions import Partitions
    from crawler.seen.sharded import ShardedBloomSeenFilter


def sizes(partitions: Partitions) -> tuple[int, int, int]:
    """Requests queued, leased and failed, read atomically in each partition."""
    replies = [partitions.run(index, "counts") for index in range(partitions.count)]
    queued, leased, failed = (sum(int(reply[i]) for reply in replies) for i in range(3))
    return queued, leased, failed


def counts(partitions: Partitions, seen: ShardedBloomSeenFilter) -> dict[str, int]:
    """Sizes of the shared state: queued, leased and failed requests, keys seen."""
    queued, leased, failed = sizes(partitions)
    return {
        "queued": queued,
        "leased": leased,
        "failed": failed,
        "seen": sum(info.items_inserted for info in seen.info() if info is not None),
    }


def failures(client: redis.Redis, partitions: list[FrontierKeys]) -> dict[str, dict[str, Any]]:
    """The failed requests' records of every partition, by URL. The lease script keeps the
    stored request of a request it gave up as text (it never decodes one): it is parsed here
    when it can be."""
    return {
        text(url): _failure(record)
        for keys in partitions
        for url, record in client.hgetall(keys.failed).items()
    }


def _failure(raw: bytes | str) -> dict[str, Any]:
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return {"reason": "not a failure record", "raw": text(raw)[:300]}
    request = record.get("request") if isinstance(record, dict) else None
    if isinstance(request, str):
        with contextlib.suppress(ValueError, RecursionError):
            record["request"] = json.loads(request)
    return record if isinstance(record, dict) else {"raw": record}
