"""The quarantine: stored requests that could not be decoded, kept aside with the reason.

Anyone who can write to a crawl's Redis keys can put any text where a request belongs. A
stored request the strict decoder (:mod:`bloom_frontier.frontier.decode`) refuses, or one longer
than ``FRONTIER_MAX_REQUEST_BYTES``, never stalls the crawl: it is answered by moving it
here (``quarantine.lua``, or the lease script for an oversized one), counted under
``frontier/quarantined``, and the requests leased with it go on as usual.

Each record (``<prefix>:quarantine``, ordered by time in ``<prefix>:quarantine_order``):
``{"id", "reason", "worker", "quarantined_at", "size", "truncated", "score", "host",
"payload"}`` (``score``: the level of the lane it came from, where a requeue puts it back),
the payload cut at :data:`KEEP_BYTES`. At most ``FRONTIER_QUARANTINE_MAX``
records are kept: past it the oldest are dropped and counted
(``<prefix>:quarantine_dropped``). ``scrapy frontier SPIDER --quarantine`` lists them,
``--requeue-quarantined`` puts them back in the queue (e.g. after deploying the spider
version that has their callback), ``--drop-quarantined`` deletes them. With
``FRONTIER_PARTITIONS`` > 1 each partition has its own quarantine; the commands show and take
ids as ``<id>@<partition>``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from bloom_frontier.frontier.redis.protocol import Requeued
from bloom_frontier.redis_client import text

if TYPE_CHECKING:
    import redis

    from bloom_frontier.frontier.redis.layout import FrontierKeys

#: Bytes of a quarantined payload kept (``QUARANTINE_KEEP`` in common.lua): a longer one is
#: cut, and its record cannot be requeued.
KEEP_BYTES = 65_536


def _record(raw: bytes | str) -> dict[str, Any]:
    """A stored record; anything else (the keys are writable by others) as its raw text."""
    decoded = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        record = json.loads(decoded)
    except (ValueError, RecursionError):
        record = None
    if not isinstance(record, dict):
        return {"reason": "not a quarantine record", "payload": decoded[:KEEP_BYTES]}
    return record


def records(client: redis.Redis, keys: FrontierKeys, limit: int | None = None) -> list[dict]:
    """Quarantined records, oldest first (at most ``limit``)."""
    ids = client.zrange(keys.quarantine_order, 0, -1 if limit is None else limit - 1)
    if not ids:
        return []
    raws = client.hmget(keys.quarantine, ids)
    return [_record(raw) for raw in raws if raw is not None]


def sizes(client: redis.Redis, keys: FrontierKeys) -> tuple[int, int]:
    """Records in quarantine, and records dropped past the cap so far."""
    with client.pipeline(transaction=True) as pipe:
        pipe.zcard(keys.quarantine_order).get(keys.quarantine_dropped)
        held, dropped = pipe.execute()
    return int(held), int(dropped or 0)


def by_partition(ids: list[str], count: int) -> dict[int, list[str]]:
    """Ids as the commands take them, by partition: ``<id>@<partition>`` with several
    partitions (a bare id: the first), ``["all"]`` in every one."""
    if ids == ["all"] or count == 1:
        return dict.fromkeys(range(count), ids)
    groups: dict[int, list[str]] = {}
    for qualified in ids:
        request_id, _, partition = qualified.rpartition("@")
        if not request_id or not partition.isdigit() or int(partition) >= count:
            request_id, partition = qualified, "0"
        groups.setdefault(int(partition), []).append(request_id)
    return groups


def _ids(client: redis.Redis, keys: FrontierKeys, ids: list[str]) -> list[str]:
    """``ids``, or every quarantined id for ``["all"]``."""
    if ids == ["all"]:
        return [text(i) for i in client.zrange(keys.quarantine_order, 0, -1)]
    return ids


def drop(client: redis.Redis, keys: FrontierKeys, ids: list[str]) -> int:
    """Delete the records ``ids`` (``["all"]``: every one); how many were there."""
    ids = _ids(client, keys, ids)
    if not ids:
        return 0
    with client.pipeline(transaction=True) as pipe:
        pipe.hdel(keys.quarantine, *ids).zrem(keys.quarantine_order, *ids)
        deleted, _ = pipe.execute()
    return int(deleted)


def requeue(client: redis.Redis, keys: FrontierKeys, ids: list[str]) -> tuple[int, int]:
    """Queue the requests of records ``ids`` again (``["all"]``: every one); how many were
    requeued, and how many stay (cut payloads, mangled records)."""
    from bloom_frontier.frontier.redis.lua import FrontierScripts

    ids = _ids(client, keys, ids)
    if not ids:
        return 0, 0
    reply = FrontierScripts(client, keys, ["requeue_quarantined"]).run("requeue_quarantined", ids)
    done = Requeued.from_reply(reply)
    return done.requeued, done.kept
