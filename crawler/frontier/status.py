"""Live status of a shared frontier: what ``scrapy frontier SPIDER`` shows.

Workers publish a small status record every ``FRONTIER_STATUS_INTERVAL`` seconds
(:class:`WorkerStatusReporter`, an extension the Redis add-on installs), and their pages,
items and bytes so far to the crawl's progress hash (``<prefix>:progress``, kept after they
exit, with the crawl's start on the Redis clock); the command reads those plus the queue,
the leases each worker holds now (``holders.lua``, atomically with the totals) and the
filter sizes straight from Redis (:func:`read_status`). A worker that stops publishing
disappears after three intervals. A crawl is *finished* once it started, nothing is queued
or leased and no worker is alive.
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
from bloom_frontier.frontier.redis.protocol import Holders
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
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

#: Status records live this many publishing intervals after the last one.
STALE_AFTER_INTERVALS = 3
#: What a worker adds to the crawl's progress hash, one field per worker each
#: (``<what>:<worker id>``: a rewrite of the same value is harmless, a lost one is redone).
PROGRESS_COUNTS = ("pages", "items", "bytes")
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


def human_bytes(size: float) -> str:
    """``size`` bytes in binary units.

    >>> human_bytes(512), human_bytes(1977632), human_bytes(3 * 2**30)
    ('512 B', '1.9 MiB', '3.0 GiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def human_percent(fraction: float) -> str:
    """``fraction`` as a percentage with the digits that matter (no exponent).

    >>> human_percent(0.0), human_percent(1.2e-9), human_percent(0.0000123), human_percent(0.25)
    ('0%', '< 0.0001%', '0.0012%', '25%')
    """
    percent = fraction * 100
    if percent == 0:
        return "0%"
    if percent < 0.0001:
        return "< 0.0001%"
    digits = max(0, 1 - math.floor(math.log10(percent)))  # two significant digits
    return f"{percent:.{digits}f}".rstrip("0").rstrip(".") + "%"


def human_duration(seconds: float) -> str:
    """``seconds`` as ``H:MM:SS``.

    >>> human_duration(83.4), human_duration(3 * 3600 + 7)
    ('0:01:23', '3:00:07')
    """
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def crawl_name(prefix: str) -> str:
    """The crawl's key prefix as a person reads it: without Redis Cluster's hash-tag braces.

    >>> crawl_name("{site}"), crawl_name("shop:{docs}")
    ('site', 'shop:docs')
    """
    return prefix.replace("{", "").replace("}", "")


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
    #: The workers alive (a status record) or holding leases, with ``leased``: what each
    #: holds now (they add up to ``leased``), ``alive``: whether its record is there.
    workers: list[dict[str, Any]] = field(default_factory=list)
    #: Stored requests in quarantine, and quarantine records dropped past its cap.
    quarantined: int = 0
    quarantine_dropped: int = 0
    #: Requests queued in each partition of the queue (``FRONTIER_PARTITIONS``).
    partitions_queued: list[int] = field(default_factory=list)
    #: The Redis server's clock at this reading, seconds since the epoch.
    clock: float = 0.0
    #: The first worker's start and the last progress report (Redis clock; None: no worker
    #: has reported yet).
    started: float | None = None
    updated: float | None = None
    #: The crawl's totals, every worker's (those that exited too).
    pages: int = 0
    items: int = 0
    bytes: int = 0

    @property
    def name(self) -> str:
        return crawl_name(self.prefix)

    @property
    def alive(self) -> list[dict[str, Any]]:
        """The workers whose status record is there."""
        return [worker for worker in self.workers if worker["alive"]]

    @property
    def state(self) -> str:
        """``running`` (a worker is alive), ``finished`` (it started, nothing is queued or
        leased and no worker is alive), ``stopped`` (no worker alive but work left) or
        ``waiting`` (no worker has started yet)."""
        if self.alive:
            return "running"
        if self.started is None:
            return "waiting"
        return "finished" if self.queued == 0 and self.leased == 0 else "stopped"

    @property
    def elapsed(self) -> float | None:
        """Seconds since the crawl started: until now while it runs, else until its last
        report."""
        if self.started is None:
            return None
        end = self.clock if self.state == "running" else (self.updated or self.clock)
        return max(0.0, end - self.started)

    @property
    def rate_now(self) -> float:
        """Pages per second over each alive worker's last reporting interval, summed."""
        return sum(worker.get("pages_per_s", 0.0) for worker in self.alive)

    @property
    def rate_overall(self) -> float:
        """Pages per second since the crawl started."""
        elapsed = self.elapsed
        return self.pages / elapsed if elapsed else 0.0

    def to_json(self) -> str:
        return json.dumps(
            {
                **asdict(self),
                "name": self.name,
                "state": self.state,
                "elapsed": self.elapsed,
                "pages_per_s": round(self.rate_now, 2),
                "pages_per_s_overall": round(self.rate_overall, 2),
            },
            sort_keys=True,
        )

    def render(self) -> str:
        """The reading as a person reads it."""
        clock = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(self.clock))
        lines = [f"crawl {self.name}: {self.state}   {clock}", "  " + self.headline()]
        lines += [
            f"  queued:   {self.queued:,}"
            + (
                f" (partitions: {', '.join(f'{n:,}' for n in self.partitions_queued)})"
                if len(self.partitions_queued) > 1
                else ""
            ),
            f"  leased:   {self.leased:,}",
            f"  failed:   {self.failed:,}" + (" (list them: --failed)" if self.failed else ""),
            f"  quarantined: {self.quarantined:,}"
            + (f" ({self.quarantine_dropped:,} older dropped)" if self.quarantine_dropped else "")
            + (" (see --quarantine)" if self.quarantined else ""),
            f"  hosts waiting on politeness: {self.hosts_waiting:,}",
        ]
        if self.seen_keys is None:
            lines.append("  seen:     (no filter yet)")
        else:
            fill = self.seen_keys / self.filter_capacity if self.filter_capacity else 0.0
            shards = "1 shard" if self.filter_shards == 1 else f"{self.filter_shards} shards"
            keys = "1 key" if self.seen_keys == 1 else f"{self.seen_keys:,} keys"
            lines.append(
                f"  seen:     {keys}, {human_percent(fill)} of capacity "
                f"{self.filter_capacity:,}, {human_bytes(self.filter_bytes or 0)} in {shards}, "
                f"expected error now {self.error_text()}"
            )
        lines.append(f"  workers:  {len(self.alive)} alive")
        lines += self.worker_table()
        return "\n".join(lines)

    def error_text(self) -> str:
        """The expected error rate; below the smallest percentage shown (or too small for a
        float) once the filter holds a key, never a plain 0."""
        rate = self.expected_error_rate or 0.0
        return human_percent(max(rate, 1e-12)) if self.seen_keys else human_percent(rate)

    def headline(self) -> str:
        """One line on where the crawl stands: its totals, rates and elapsed time."""
        if self.started is None:
            return "no worker has started yet"
        elapsed = human_duration(self.elapsed or 0.0)
        totals = (
            f"{self.pages:,} pages ({human_bytes(self.bytes)}), {self.items:,} items, "
            f"{self.failed:,} failed"
        )
        if self.state == "running":
            return (
                f"{totals}; {self.rate_now:.1f}/s now, {self.rate_overall:.1f}/s overall; "
                f"elapsed {elapsed}"
            )
        if self.state == "finished":
            return f"crawl finished: {totals} in {elapsed} ({self.rate_overall:.1f}/s)"
        return (
            f"no worker alive, work left: {self.queued:,} queued, {self.leased:,} leased "
            f"(expired leases go back to the queue when a worker starts); {totals} in {elapsed}"
        )

    def worker_table(self) -> list[str]:
        """One row per worker alive or holding leases: leases now, pages, rate, bytes and
        leases taken so far."""
        if not self.workers:
            return []
        names = [worker["worker"] or "(no owner)" for worker in self.workers]
        width = max(len("worker"), *map(len, names))
        rows = [
            f"    {'worker':<{width}}  {'leased':>6}  {'pages':>7}  {'pages/s':>7}  "
            f"{'received':>9}  {'leases taken':>12}"
        ]
        for name, worker in zip(names, self.workers, strict=True):
            if not worker["alive"]:
                rows.append(f"    {name:<{width}}  {worker['leased']:>6,}  (not reporting)")
                continue
            rows.append(
                f"    {name:<{width}}  {worker['leased']:>6,}  {worker.get('pages_total', 0):>7,}  "
                f"{worker.get('pages_per_s', 0.0):>7.1f}  "
                f"{human_bytes(worker.get('bytes_total', 0)):>9}  "
                f"{worker.get('leases_taken', 0):>12,}"
            )
        return rows


def read_status(
    client: redis.Redis, prefix: str, error_rate: float, limits: HostLimits
) -> FrontierStatus:
    """Read the frontier under ``prefix``; sizes and who holds the leases in one script per
    partition (a lease moves a request between the queue and the leases: two separate reads
    could count it twice or not).
    ``limits`` are the crawl's politeness limits, to tell which hosts are waiting."""
    keys = FrontierKeys.for_prefix(prefix)
    partitions = partition_keys(client, keys)
    per_partition = [
        Holders.from_reply(FrontierScripts(client, part, ("holders",)).run("holders"))
        for part in partitions
    ]
    partitions_queued = [part.sizes.queued for part in per_partition]
    held: dict[str, int] = {}
    for part in per_partition:
        for owner, count in part.leases.items():
            held[owner] = held.get(owner, 0) + count
    waiting = sum(hosts_waiting(client, part, limits) for part in partitions)
    quarantine_sizes = [quarantine.sizes(client, part) for part in partitions]
    seen_key = current_seen_key(client, prefix, keys.seen)  # after `scrapy rebuild-filter`
    shards = int(client.get(f"{seen_key}:shards") or 1)
    infos = [info for key in shard_keys(seen_key, shards) if (info := bloom_info(client, key))]
    seconds, micros = client.time()
    progress = {
        text(name): int(value)
        for name, value in client.hgetall(keys.progress).items()
        if value.isdigit()  # a field someone mangled is left out, not a traceback
    }
    workers = []
    for owner in sorted(text(owner) for owner in client.smembers(keys.workers)):
        record = client.get(keys.worker(owner))
        if record is None:
            client.srem(keys.workers, owner)
        else:
            workers.append({**json.loads(record), "alive": True, "leased": held.pop(owner, 0)})
    workers += [
        {"worker": owner, "alive": False, "leased": count} for owner, count in sorted(held.items())
    ]
    return FrontierStatus(
        prefix=prefix,
        quarantined=sum(count for count, _dropped in quarantine_sizes),
        quarantine_dropped=sum(dropped for _count, dropped in quarantine_sizes),
        queued=sum(partitions_queued),
        partitions_queued=partitions_queued,
        leased=sum(part.sizes.leased for part in per_partition),
        failed=sum(part.sizes.failed for part in per_partition),
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
        clock=seconds + micros / 1e6,
        started=progress["started"] / 1000 if "started" in progress else None,
        updated=progress["updated"] / 1000 if "updated" in progress else None,
        **{
            what: sum(v for k, v in progress.items() if k.startswith(f"{what}:"))
            for what in PROGRESS_COUNTS
        },
    )


def failed_requests(client: redis.Redis, prefix: str) -> list[dict[str, Any]]:
    """The crawl's requests that failed for good (every partition's), oldest first: each
    with ``url``, ``reason``, ``attempts`` (downloads tried: Scrapy's retries plus one, or
    the lease expiries it was given up after; None when unknown), ``failed_at`` and
    ``worker`` (None: given up by the frontier itself)."""
    keys = FrontierKeys.for_prefix(prefix)
    found = []
    for url, record in state.failures(client, partition_keys(client, keys)).items():
        request = record.get("request")
        meta = request.get("meta") if isinstance(request, dict) else None
        attempts = record.get("attempts")
        if attempts is None and isinstance(meta, dict):
            retries = meta.get("retry_times", 0)
            attempts = retries + 1 if isinstance(retries, int) else None
        found.append(
            {
                "url": record.get("url") or url,
                "reason": record.get("reason", ""),
                "attempts": attempts,
                "failed_at": record.get("failed_at"),
                "worker": record.get("worker"),
            }
        )
    return sorted(found, key=lambda failure: (failure["failed_at"] or 0, failure["url"]))


class WorkerStatusReporter:
    """Publishes this worker's status record (pages/min, pages/s over its last interval,
    pages, bytes, leases taken) and its totals in the crawl's progress hash.

    Setting: ``FRONTIER_STATUS_INTERVAL`` (seconds, default 2). Only with ``REDIS_URL``.
    Times are on the Redis server's clock (this worker's clock plus the offset measured at
    its first report), so workers on other machines agree.
    """

    def __init__(self, crawler: Crawler, interval: float) -> None:
        self.crawler = crawler
        self.interval = interval
        self.rate = RateWindow()
        #: Seconds to add to this machine's clock for the Redis server's (measured once).
        self.clock_offset: float | None = None
        #: This worker's start, on the Redis clock (set at the first report).
        self.started: float | None = None
        self._last: tuple[float, int] | None = None  # the last record's time and pages
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

    def spider_closed(self, spider: Spider) -> Deferred[None]:
        """Write this worker's last totals, then remove its record (in that order, on the
        node holding the crawl's keys: a reader never sees the worker gone with its last
        pages missing). Handed to the frontier's thread after any report in flight; the
        frontier waits for it before closing its connection."""
        if self._loop.running:
            self._loop.stop()
        frontier = self.frontier
        totals = self.totals()

        def write() -> None:
            with frontier.client.pipeline(transaction=False) as pipe:
                self._write_totals(pipe, totals)
                pipe.delete(frontier.keys.worker(frontier.owner))
                pipe.srem(frontier.keys.workers, frontier.owner)
                pipe.execute()

        return frontier.call(write).addErrback(self._skipped)

    def totals(self) -> dict[str, int]:
        """This worker's pages (responses received, as Scrapy counts them), items and bytes
        received so far."""
        stats = self.crawler.stats
        assert stats is not None
        return {
            "pages": stats.get_value("response_received_count", 0),
            "items": stats.get_value("item_scraped_count", 0),
            "bytes": stats.get_value("downloader/response_bytes", 0),
        }

    def record(self, now: float, totals: dict[str, int]) -> dict[str, Any]:
        """This worker's status at ``now`` (Redis clock): its page rate over the last
        minute and since its previous record."""
        assert self.crawler.stats is not None
        pages = totals["pages"]
        last_time, last_pages = self._last or (now, pages)
        self._last = (now, pages)
        span = now - last_time
        return {
            "worker": self.frontier.owner,
            "pages_total": pages,
            "items_total": totals["items"],
            "bytes_total": totals["bytes"],
            "pages_per_min": round(self.rate.per_minute(now, pages), 1),
            "pages_per_s": round((pages - last_pages) / span, 2) if span > 0 else 0.0,
            "leases_taken": self.crawler.stats.get_value("frontier/leased", 0),
            "started": self.started if self.started is not None else now,
            "updated": now,
        }

    def _write_totals(self, pipe: redis.client.Pipeline, totals: dict[str, int]) -> None:
        """Queue on ``pipe`` this worker's totals and the crawl's start and last report (on
        the Redis clock, measured on the first call, in the frontier's thread)."""
        frontier = self.frontier
        if self.clock_offset is None:
            seconds, micros = frontier.client.time()
            self.clock_offset = seconds + micros / 1e6 - time.time()
        now_ms = round((time.time() + self.clock_offset) * 1000)
        pipe.hsetnx(frontier.keys.progress, "started", now_ms)
        pipe.hset(
            frontier.keys.progress,
            mapping={
                "updated": now_ms,
                **{f"{what}:{frontier.owner}": totals[what] for what in PROGRESS_COUNTS},
            },
        )

    def publish(self) -> Deferred[None]:
        """Write the record and the totals (from the frontier's background thread in a
        crawl); a Redis hiccup only skips one report. The loop waits for it: one report in
        flight at a time."""
        frontier = self.frontier
        totals = self.totals()
        ttl = max(1, math.ceil(self.interval * STALE_AFTER_INTERVALS))

        def write() -> None:
            with frontier.client.pipeline(transaction=False) as pipe:
                self._write_totals(pipe, totals)
                assert self.clock_offset is not None
                now = time.time() + self.clock_offset
                if self.started is None:
                    self.started = now
                pipe.set(
                    frontier.keys.worker(frontier.owner),
                    json.dumps(self.record(now, totals)),
                    ex=ttl,
                )
                pipe.sadd(frontier.keys.workers, frontier.owner)
                pipe.execute()

        return frontier.call(write).addErrback(self._skipped)

    def _skipped(self, failure: Failure) -> None:
        failure.trap(redis.RedisError)
        # Status is best effort: the crawl goes on, the next report will do.
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("frontier/status_unpublished")
