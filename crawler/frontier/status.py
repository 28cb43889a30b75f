"""Live status of a shared frontier: what ``scrapy frontier SPIDER`` shows.

Workers publish a small status record every ``FRONTIER_STATUS_INTERVAL`` seconds
(:class:`WorkerStatusReporter`, an extension the Redis add-on installs); the command reads
those records plus the queue, lease and filter sizes straight from Redis
(:func:`read_status`). A worker that stops publishing disappears after three intervals.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import redis
from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task

from bloom_frontier.frontier.politeness import HostLimits
from bloom_frontier.frontier.redis import RedisFrontier, quarantine, state
from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.redis.lua import FrontierScripts
from bloom_frontier.frontier.redis.partitions import partition_keys
from bloom_frontier.frontier.redis.politeness import hosts_waiting
from bloom_frontier.progress import RateWindow
from bloom_frontier.redis_client import text
from bloom_frontier.seen.layers import current_seen_key
from bloom_frontier.seen.redis import BloomInfo, bloom_info
from bloom_frontier.seen.sharded import shard_keys
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from twisted.python.failure import Failure

#: Status records live this many publishing intervals after the last one.
STALE_AFTER_INTERVALS = 3
#: RedisBloom gives each new sub-filter half the error rate of the one before, starting at
#: half the configured rate (so the sum stays below it).
TIGHTENING = 0.5


def expected_error_rate(info: BloomInfo, error_rate: float) -> float:
    """False-positive rate a new key meets at the filter's current fill.

    Sub-filter ``i`` holds ``capacity * expansion**i`` keys at error ``error_rate / 2**(i+1)``
    and they fill in order; each answers "seen" for a new key with probability
    ``(1 - exp(-k n / m))**k``, and a key is a false positive if any of them does.
    """
    expansion = info.expansion or 1
    first_capacity = info.capacity
    if info.filters > 1 and expansion > 1:
        first_capacity = round(info.capacity / sum(expansion**i for i in range(info.filters)))
    remaining = info.items_inserted
    all_clear = 1.0
    for index in range(info.filters):
        capacity = first_capacity * expansion**index
        layer_error = error_rate * TIGHTENING ** (index + 1)
        items = min(remaining, capacity) if index < info.filters - 1 else remaining
        remaining -= items
        bits = capacity * -math.log(layer_error) / math.log(2) ** 2
        hashes = max(1, math.ceil(-math.log2(layer_error)))
        all_clear *= 1 - (1 - math.exp(-hashes * items / bits)) ** hashes
    return 1 - all_clear


@dataclass
class FrontierStatus:
    """One reading of a shared frontier."""

    prefix: str
    queued: int
    leased: int
    failed: int
    hosts_waiting: int
    seen_keys: int | None
    filter_bytes: int | None
    filter_capacity: int | None
    expected_error_rate: float | None
    filter_shards: int = 1
    workers: list[dict[str, Any]] = field(default_factory=list)
    #: Stored requests in quarantine, and quarantine records dropped past its cap.
    quarantined: int = 0
    quarantine_dropped: int = 0
    #: Requests queued in each partition of the queue (``FRONTIER_PARTITIONS``).
    partitions_queued: list[int] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def render(self) -> str:
        """The reading as a person reads it."""
        lines = [
            f"frontier {self.prefix}",
            f"  queued:   {self.queued}"
            + (
                f" (partitions: {', '.join(map(str, self.partitions_queued))})"
                if len(self.partitions_queued) > 1
                else ""
            ),
            f"  leased:   {self.leased}",
            f"  failed:   {self.failed}",
            f"  quarantined: {self.quarantined}"
            + (f" ({self.quarantine_dropped} older dropped)" if self.quarantine_dropped else "")
            + (" (see --quarantine)" if self.quarantined else ""),
            f"  hosts waiting on politeness: {self.hosts_waiting}",
        ]
        if self.seen_keys is None:
            lines.append("  seen:     (no filter yet)")
        else:
            fill = self.seen_keys / self.filter_capacity if self.filter_capacity else 0.0
            lines.append(
                f"  seen:     {self.seen_keys} keys, {fill:.1%} of capacity "
                f"{self.filter_capacity}, {self.filter_bytes} bytes in "
                f"{self.filter_shards} shard(s), "
                f"expected error now {self.expected_error_rate:.2e}"
            )
        lines.append(f"  workers:  {len(self.workers)}")
        for worker in self.workers:
            lines.append(
                f"    {worker['worker']}: {worker['pages_per_min']:.0f} pages/min, "
                f"{worker['pages_total']} pages, {worker['leased']} leased"
            )
        return "\n".join(lines)


def read_status(
    client: redis.Redis, prefix: str, error_rate: float, limits: HostLimits
) -> FrontierStatus:
    """Read the frontier under ``prefix``; sizes in one script per partition (a lease moves
    a request between the queue and the leases: two separate reads could count it twice or
    not).
    ``limits`` are the crawl's politeness limits, to tell which hosts are waiting."""
    keys = FrontierKeys.for_prefix(prefix)
    partitions = partition_keys(client, keys)
    # Each partition's sizes in one script (the counts script); summed across partitions.
    per_partition = state.partition_sizes(
        FrontierScripts(client, part, ("counts",)) for part in partitions
    )
    partitions_queued = [part.queued for part in per_partition]
    leased = sum(part.leased for part in per_partition)
    failed = sum(part.failed for part in per_partition)
    waiting = sum(hosts_waiting(client, part, limits) for part in partitions)
    held = [quarantine.sizes(client, part) for part in partitions]
    quarantined = sum(count for count, _dropped in held)
    quarantine_dropped = sum(dropped for _count, dropped in held)
    seen_key = current_seen_key(client, prefix, keys.seen)  # after `scrapy rebuild-filter`
    shards = int(client.get(f"{seen_key}:shards") or 1)
    infos = [info for key in shard_keys(seen_key, shards) if (info := bloom_info(client, key))]
    owners = sorted(text(owner) for owner in client.smembers(keys.workers))
    workers = []
    for owner in owners:
        record = client.get(keys.worker(owner))
        if record is None:
            client.srem(keys.workers, owner)
        else:
            workers.append(json.loads(record))
    return FrontierStatus(
        prefix=prefix,
        quarantined=quarantined,
        quarantine_dropped=quarantine_dropped,
        queued=sum(partitions_queued),
        partitions_queued=partitions_queued,
        leased=leased,
        failed=failed,
        hosts_waiting=waiting,
        seen_keys=sum(info.items_inserted for info in infos) if infos else None,
        filter_bytes=sum(info.size_bytes for info in infos) if infos else None,
        filter_capacity=sum(info.capacity for info in infos) if infos else None,
        # A new key meets exactly one shard (by its hash): the mean of the shards' rates.
        expected_error_rate=(
            sum(expected_error_rate(info, error_rate) for info in infos) / len(infos)
            if infos
            else None
        ),
        filter_shards=shards,
        workers=workers,
    )


class WorkerStatusReporter:
    """Publishes this worker's pages/min, pages and leases to the shared frontier.

    Setting: ``FRONTIER_STATUS_INTERVAL`` (seconds, default 10). Only with ``REDIS_URL``.
    """

    def __init__(self, crawler: Crawler, interval: float) -> None:
        self.crawler = crawler
        self.interval = interval
        self.rate = RateWindow()
        self.started = time.time()
        self._loop = task.LoopingCall(self.publish)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.get("REDIS_URL"):
            raise NotConfigured("the worker status is for shared (REDIS_URL) frontiers")
        reporter = cls(crawler, crawler.settings.getfloat("FRONTIER_STATUS_INTERVAL"))
        crawler.signals.connect(reporter.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(reporter.spider_closed, signal=signals.spider_closed)
        return reporter

    @property
    def frontier(self) -> RedisFrontier:
        frontier = services_of(self.crawler).frontier
        assert isinstance(frontier, RedisFrontier)
        return frontier

    def spider_opened(self, spider: Spider) -> None:
        self._loop.start(self.interval, now=True)

    def spider_closed(self, spider: Spider) -> None:
        if self._loop.running:
            self._loop.stop()
        frontier = self.frontier
        frontier.client.delete(frontier.keys.worker(frontier.owner))
        frontier.client.srem(frontier.keys.workers, frontier.owner)

    def record(self, now: float) -> dict[str, Any]:
        """This worker's status, with its page rate over the last minute."""
        assert self.crawler.stats is not None
        pages = self.crawler.stats.get_value("response_received_count", 0)
        rate = self.rate.per_minute(now, pages)
        return {
            "worker": self.frontier.owner,
            "pages_total": pages,
            "pages_per_min": round(rate, 1),
            "leased": self.crawler.stats.get_value("frontier/leased", 0),
            "started": self.started,
            "updated": now,
        }

    def publish(self) -> None:
        """Write the record (from the frontier's background thread in a crawl); a Redis
        hiccup only skips one report."""
        frontier = self.frontier
        record = json.dumps(self.record(time.time()))
        ttl = max(1, math.ceil(self.interval * STALE_AFTER_INTERVALS))

        def write() -> None:
            with frontier.client.pipeline(transaction=False) as pipe:
                pipe.set(frontier.keys.worker(frontier.owner), record, ex=ttl)
                pipe.sadd(frontier.keys.workers, frontier.owner)
                pipe.execute()

        def skipped(failure: Failure) -> None:
            failure.trap(redis.RedisError)
            # Status is best effort: the crawl goes on, the next report will do.
            self.crawler.stats.inc_value("frontier/status_unpublished")

        frontier.call(write).addErrback(skipped)
