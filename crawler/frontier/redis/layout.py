"""The Redis key layout of one crawl's shared frontier: every key, in one place.

All keys of a crawl live under its prefix (``FRONTIER_KEY_PREFIX`` % spider, default
``{<spider>}``, see :mod:`bloom_frontier.defaults`: a Redis Cluster hash tag, so the
frontier's own keys share one slot and a Lua script may touch them together). Fixed keys,
one field of :class:`FrontierKeys` each (``<prefix>:<field>``):

==================  ======  =================================================================
key                 type    holds
==================  ======  =================================================================
queue               ZSET    lane -> rank: the lanes holding queued requests, best level first,
                            then by turn (see "The queue" below)
queued              STRING  how many requests the lanes hold
requests            HASH    lease id -> the record of a leased request (or of one requeued
                            after its lease expired), so a crash requeues it
lanes               HASH    lease id -> the lane that request came from, to requeue it there
shapes              HASH    shape id -> shape JSON (callback, errback, flags...: append-only,
                            shared by every worker, see :mod:`bloom_frontier.frontier.serialize`)
shape_ids           HASH    shape JSON -> shape id (the same table, looked up by shape)
leases              ZSET    lease id (or ``batch:<id>``) -> lease expiry, ms on Redis' clock
owners              HASH    lease id -> the worker holding it
seq                 STRING  counter the lease ids and lane turns are made from
seen                BF      RedisBloom filter of dedupe keys (with ``SEEN_FILTER_SHARDS`` > 1,
                            the name the shards are derived from, see below)
failed              HASH    URL -> JSON record of a request that failed for good, with reason
expiries            HASH    lease id -> times its lease expired (given up past the limit)
staged              HASH    lease id -> ``{"batch": id, "entries": [[score, host, shape,
                            rest of the record]]}``: a batch kept while its keys are marked in
                            a sharded filter (older workers' entries: ``[score, host, JSON]``)
in_flight           HASH    lease id -> host, for the leases counted in ``host_busy`` (until
                            their download ends, or their lease does)
host_next           ZSET    host -> ms (Redis clock) before which it gets no new lease
host_busy           HASH    host -> its requests in flight now (absent: none)
host_delay          HASH    host -> its robots.txt Crawl-delay in ms, as published
host_paused         ZSET    host -> ms (Redis clock) until which it is paused after a 429/503
                            (crawl-wide backoff; also in ``host_next``, which leases obey)
host_strikes        HASH    host -> 429/503 answers without Retry-After since its last other one
quarantine          HASH    lease id -> JSON record of a stored request that could not be
                            decoded (or was too large): reason, time, worker, its level
                            (``score``) and host, payload cut at 64 KiB (:mod:`.quarantine`)
quarantine_order    ZSET    lease id -> ms it was quarantined (the oldest go past the cap)
quarantine_dropped  STRING  records dropped past ``FRONTIER_QUARANTINE_MAX``
learned_version     STRING  the version of the crawl's learned parameter rules (missing: 0;
                            the rules themselves: ``<prefix>:learned``, below). Admission
                            scripts take the version their batch was keyed under and answer
                            ``stale`` when it moved (:mod:`.admission`)
identity            STRING  ``<random id>.<ms on Redis' clock>``: the crawl's identity, written
                            by its first start (a worker or ``seed``), checked by every lease,
                            admission, failure and heartbeat script; missing or another one:
                            the crawl's state was lost (Redis restarted without persistence,
                            flushed, keys evicted), the worker stops. ``lost:<why>`` after a
                            key of the crawl's state was found overwritten (:mod:`.identity`)
==================  ======  =================================================================

A fixed key holding another type than its own (someone wrote over it) is moved aside by the
first script that meets it, to ``<key>:foreign:<ms><µs>`` (its content kept for a look):
one of :data:`VITAL_KEYS` held requests or what tells them apart, so the crawl's state is
incomplete, ``identity`` becomes ``lost:<why>`` and every worker stops; any other (counts,
politeness, records) starts over empty and the crawl goes on, with a warning
(:mod:`bloom_frontier.frontier.redis.lua`).

The queue
---------

Queued requests live in *lanes*: one Redis LIST ``<prefix>:lane:<level>|<host>`` per
priority level and politeness host (:meth:`FrontierKeys.lane`), holding each request's
record and nothing else: no per-request index, so a queued request costs its record and a
few bytes of list (about 100 bytes for a 76-character URL). ``queue`` ranks the lanes that
hold something (per lane, not per request), ``(level + 1000) * 2**40 + turn``. What survives
of Scrapy's priorities:

- the level of a request is ``-priority``, clamped to ``[-1000, 1000]``: a lease takes the
  best level first across all hosts (Scrapy's higher priority first, e.g. redirects' +2,
  ``DEPTH_PRIORITY``'s negative priorities for deeper pages); priorities beyond +-1000 share
  the outermost level. The request keeps its exact priority (in its record).
- within a level, a host's requests are first in, first out; hosts of one level take turns
  (a lane leased from moves to the back of its level), where a single queue was FIFO across
  hosts.
- a request whose lease expired goes back to the *front* of its lane, as ``#<lease id>``:
  its record stays in ``requests`` under the same id, so its expiries count on.
- a lease looks at ``FRONTIER_POLITENESS_SCAN`` lanes at most, passing over those whose host
  is not ready (its delay or concurrency), and takes from a ready lane as many as its host
  allows now.

A record (format 2, :mod:`bloom_frontier.frontier.serialize`) is ``2<TAB><shape id><TAB><url>``,
then ``<TAB>`` and a JSON object of the request's non-default fields when it has any; the
shape id names an entry of ``shapes``. Format 1 (a JSON object, from older workers' staged
batches or requeued quarantine records) is still read from a lane. Both are decoded by the
strict decoder (:mod:`bloom_frontier.frontier.decode`); one that does not decode is quarantined.

Keys named per item, under the same prefix (methods of :class:`FrontierKeys`):

- ``<prefix>:lane:<level>|<host>`` LIST: a lane's queued records (see "The queue");
  ``<prefix>:lane:<...>:foreign:<n>``: what someone wrote over a lane key, moved aside.
- ``<prefix>:robots_txt:<url>`` STRING (expiring): a robots.txt one worker fetched, shared
  with the others; ``<prefix>:robots_txt:<url>:claim`` STRING (expiring): the worker
  fetching it now (:mod:`bloom_frontier.frontier.redis.politeness`).
- ``<prefix>:workers`` SET of worker ids, ``<prefix>:worker:<id>`` STRING (expiring): the
  workers' published status records (:mod:`bloom_frontier.frontier.status`).
- ``<prefix>:progress`` HASH: the crawl's progress as its workers report it, kept after they
  exit: ``started`` and ``updated`` (ms on Redis' clock: the first report, the last),
  ``pages:<id>``, ``items:<id>``, ``bytes:<id>`` (each worker's totals so far)
  (:mod:`bloom_frontier.frontier.status`).
- ``<prefix>:limits`` HASH: the crawl-wide counts behind ``CLOSESPIDER_*`` (``pages``,
  ``items``) and the crawl's first start (``started``, ms on Redis' clock)
  (:mod:`bloom_frontier.frontier.limits`).
- ``<prefix>:learned`` STRING: the crawl's learned parameter rules (JSON), of the version in
  ``learned_version``, so every worker keys with the same rules
  (:mod:`bloom_frontier.learning.state`).
- ``<prefix>:setup_warned`` STRING: set (``SET NX``) by the first worker of the crawl that
  found Redis without an append-only file, which warns about it; later workers find it and
  stay quiet (:mod:`bloom_frontier.frontier.redis`).

Partitions (``FRONTIER_PARTITIONS`` = N, :mod:`bloom_frontier.frontier.redis.partitions`): with N =
1
(the default) every fixed key above is ``<prefix>:<field>``, as described. With N > 1 the
queue, its leases and the hosts' politeness state (every fixed key but ``seen``) live N times,
once per partition, under a partition prefix of their own instead of ``<prefix>``:
``{<prefix without braces>:part:<i>/<N>:<salt>}``, whose hash tag the seen filter's
slot-spreading helper (:func:`bloom_frontier.seen.sharded.shard_keys`) puts in the *i*-th N-th of
the
cluster's slots, so the partitions land on distinct masters. Each partition is one
:class:`FrontierKeys` and the same scripts run against it: its lanes
(``<partition prefix>:lane:<level>|<host>``) and its own ``shapes`` table included (a lease
reply carries each record's shape JSON, so a worker needs no other partition's table). All
requests of one host live in one partition; the crawl-wide keys that route them stay under
``<prefix>``:

- ``<prefix>:partitions`` STRING: N, written by the first worker; a worker started with
  another N refuses to start (hosts would move between partitions).
- ``<prefix>:host_partition`` HASH: politeness host -> its partition (0 to N-1), assigned
  once, when the host is first seen, to the partition with the fewest hosts (``assign.lua``).
- ``<prefix>:partition_hosts`` HASH: partition -> hosts assigned to it.

Keys of the seen filter (:mod:`bloom_frontier.seen.redis`, :mod:`bloom_frontier.seen.sharded`):
``<seen>:params`` (its parameters), ``<seen>:reply:<batch>`` (expiring answers to a batch,
for a retry), ``<seen>:shards`` (the number of shards), and with shards each shard's own key
``{<seen without braces>:<i>/<N>:<salt>}`` (spread over the cluster's slots) with its own
``:params`` and ``:reply:*``.
After ``scrapy rebuild-filter``, ``<prefix>:seen:layers`` STRING (JSON) names the current
filter generation (``<prefix>:seen:g<n>``, whose keys are laid out as ``seen``'s) and the
older, read-only ones with their rules (:mod:`bloom_frontier.seen.layers`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Self


#: Priorities beyond +-LANE_BOUND share the outermost level (``LANE_BOUND`` in common.lua).
LANE_BOUND = 1000
#: Turns one level's ranks hold (``TURNS`` in common.lua).
TURNS = 2**40


def lane_rank(level: int, turn: int) -> int:
    """The rank in ``queue`` of a lane of ``level`` at ``turn`` (``lane_rank`` in
    common.lua): levels first, then turns.

    >>> lane_rank(-2, 7) < lane_rank(0, 1) < lane_rank(0, 2)
    True
    """
    return (level + LANE_BOUND) * TURNS + turn


#: The Redis type of each fixed key (as ``TYPE`` names it; ``MBbloom--`` is RedisBloom's).
#: Every script checks its keys against these before its first write (see
#: :mod:`bloom_frontier.frontier.redis.lua`): a key someone else overwrote refuses the step whole.
KEY_TYPES = {
    "queue": "zset",
    "queued": "string",
    "requests": "hash",
    "lanes": "hash",
    "shapes": "hash",
    "shape_ids": "hash",
    "leases": "zset",
    "owners": "hash",
    "seq": "string",
    "seen": "MBbloom--",
    "failed": "hash",
    "expiries": "hash",
    "staged": "hash",
    "in_flight": "hash",
    "host_next": "zset",
    "host_busy": "hash",
    "host_delay": "hash",
    "host_paused": "zset",
    "host_strikes": "hash",
    "quarantine": "hash",
    "quarantine_order": "zset",
    "quarantine_dropped": "string",
    "learned_version": "string",
    "limits": "hash",
    "host_partition": "hash",
    "partition_hosts": "hash",
    "identity": "string",
}

#: Fixed keys whose loss loses requests or what tells them apart (the queue, the leased
#: requests, the seen filter, the shapes compact records name, the id counter whose restart
#: would reuse request ids): found of another type, the crawl stops (see the module
#: docstring). The others are rebuilt empty and the crawl goes on.
VITAL_KEYS = frozenset(
    {"queue", "requests", "lanes", "leases", "owners", "seq", "seen", "staged", "shapes",
     "shape_ids", "identity"}
)  # fmt: skip


@dataclass(frozen=True)
class FrontierKeys:
    """The fixed Redis keys of one crawl's frontier (see the module docstring)."""

    queue: str
    queued: str
    requests: str
    lanes: str
    shapes: str
    shape_ids: str
    leases: str
    owners: str
    seq: str
    seen: str
    failed: str
    expiries: str
    staged: str
    in_flight: str
    host_next: str
    host_busy: str
    host_delay: str
    host_paused: str
    host_strikes: str
    quarantine: str
    quarantine_order: str
    quarantine_dropped: str
    learned_version: str
    identity: str

    @classmethod
    def for_prefix(cls, prefix: str) -> Self:
        return cls(**{field.name: f"{prefix}:{field.name}" for field in fields(cls)})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The fields' names: what a Lua script's ``KEYS:`` line may name."""
        return tuple(field.name for field in fields(cls))

    @property
    def prefix(self) -> str:
        """The crawl's prefix (with its hash tag), for keys named per item."""
        return self.queue.removesuffix(":queue")

    @property
    def all(self) -> list[str]:
        """Every fixed key."""
        return [getattr(self, name) for name in self.names()]

    def lane(self, lane: str) -> str:
        """The LIST holding the queued requests of ``lane`` (``<level>|<host>``)."""
        return f"{self.prefix}:lane:{lane}"

    def robots_txt(self, url: str) -> str:
        """The shared copy of the robots.txt at ``url``."""
        return f"{self.prefix}:robots_txt:{url}"

    def robots_txt_claim(self, url: str) -> str:
        """The claim of the worker fetching the robots.txt at ``url``."""
        return f"{self.robots_txt(url)}:claim"

    @property
    def workers(self) -> str:
        """The ids of workers that published a status."""
        return f"{self.prefix}:workers"

    def worker(self, owner: str) -> str:
        """One worker's latest status record."""
        return f"{self.prefix}:worker:{owner}"

    @property
    def setup_warned(self) -> str:
        """Marks the crawl's warning about the Redis set-up as given."""
        return f"{self.prefix}:setup_warned"

    @property
    def progress(self) -> str:
        """The crawl's start, last report and each worker's totals."""
        return f"{self.prefix}:progress"

    @property
    def limits(self) -> str:
        """The crawl-wide counts for ``CLOSESPIDER_*`` limits."""
        return f"{self.prefix}:limits"

    @property
    def partitions(self) -> str:
        """The number of partitions the crawl's queue is split into (absent: one)."""
        return f"{self.prefix}:partitions"

    @property
    def host_partition(self) -> str:
        """Each politeness host's partition."""
        return f"{self.prefix}:host_partition"

    @property
    def partition_hosts(self) -> str:
        """How many hosts each partition was assigned."""
        return f"{self.prefix}:partition_hosts"

    def partition(self, index: int, count: int) -> FrontierKeys:
        """The keys of partition ``index`` of ``count`` (these keys themselves for one):
        the same fields under a prefix whose hash tag lands in the ``index``-th ``count``-th
        of the cluster's slots (see the module docstring). The seen filter stays the
        crawl's (``seen`` is kept)."""
        if count == 1:
            return self
        if not 0 <= index < count:
            raise ValueError(f"partition {index} of {count} does not exist")
        prefix = partition_prefixes(self.prefix, count)[index]
        return replace(FrontierKeys.for_prefix(prefix), seen=self.seen)


@cache
def partition_prefixes(prefix: str, count: int) -> tuple[str, ...]:
    """The prefixes of the ``count`` partitions of the crawl at ``prefix``: one hash tag
    each, spread over the cluster's slots by the seen filter's helper.

    >>> partition_prefixes("{site}", 1)
    ('{site}',)
    >>> [p.rsplit(":", 1)[0] for p in partition_prefixes("{site}", 3)]
    ['{site:part:0/3', '{site:part:1/3', '{site:part:2/3']
    """
    from bloom_frontier.seen.sharded import (
        shard_keys,  # here: bloom_frontier.seen needs no frontier
    )

    if count == 1:
        return (prefix,)
    return tuple(shard_keys(f"{prefix}:part", count))
