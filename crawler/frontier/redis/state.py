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
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from bloom_frontier.frontier.decode import DEFAULT_DECODER, RequestNotLoadable
from bloom_frontier.frontier.redis.protocol import Sizes
from bloom_frontier.redis_client import text

if TYPE_CHECKING:
    import redis

    from bloom_frontier.frontier.redis.layout import FrontierKeys
    from bloom_frontier.frontier.redis.lua import FrontierScripts
    from bloom_frontier.seen.sharded import ShardedBloomSeenFilter


def partition_sizes(scripts: Iterable[FrontierScripts]) -> list[Sizes]:
    """Requests queued, leased and failed in each partition (``scripts``: each partition's),
    each partition read atomically."""
    return [Sizes.from_reply(one.run("counts")) for one in scripts]


def sizes(scripts: Iterable[FrontierScripts]) -> tuple[int, int, int]:
    """Requests queued, leased and failed, summed over the partitions (``scripts``: each
    partition's)."""
    parts = partition_sizes(scripts)
    return (
        sum(part.queued for part in parts),
        sum(part.leased for part in parts),
        sum(part.failed for part in parts),
    )


def counts(scripts: Iterable[FrontierScripts], seen: ShardedBloomSeenFilter) -> dict[str, int]:
    """Sizes of the shared state: queued, leased and failed requests, keys seen."""
    queued, leased, failed = sizes(scripts)
    return {
        "queued": queued,
        "leased": leased,
        "failed": failed,
        "seen": sum(info.items_inserted for info in seen.info() if info is not None),
    }


def queued_records(
    client: redis.Redis, keys: FrontierKeys, chunk: int = 1000
) -> Iterator[tuple[str, bytes | str]]:
    """Every queued item, lane by lane in the queue's order: ``(lane, item)``, where an item
    is a stored record, or ``#<lease id>`` for a request requeued after its lease expired
    (its record is in ``requests``). Read a chunk at a time: not a snapshot."""
    for lane in client.zrange(keys.queue, 0, -1):
        lane = text(lane)
        start = 0
        while items := client.lrange(keys.lane(lane), start, start + chunk - 1):
            for item in items:
                yield lane, item
            start += chunk


def queue_keys(client: redis.Redis, keys: FrontierKeys) -> list[str]:
    """The keys holding the queue of ``keys`` (one partition), its leases and its hosts'
    politeness state: every fixed key but the seen filter, and the lanes its queue ranks
    (for measuring what a queue costs, ``MEMORY USAGE`` of each)."""
    lanes = [keys.lane(text(lane)) for lane in client.zrange(keys.queue, 0, -1)]
    return [key for key in keys.all if key != keys.seen] + lanes


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
        with contextlib.suppress(RequestNotLoadable):
            # A compact record (with its shape and host) or a JSON object, as JSON fields.
            fields, named = DEFAULT_DECODER.parse(
                request, record.pop("shape", None), record.get("host")
            )
            if named:
                fields["meta"] = {**(fields.get("meta") or {}), **named}
            record["request"] = fields
    return record if isinstance(record, dict) else {"raw": record}
