"""The metric families a worker serves and ``scrapy frontier --metrics`` prints.

Names and labels follow Prometheus' conventions: every name starts with ``bloom_frontier_``,
counters end in ``_total``, durations are seconds and sizes bytes, labels take a few values
each (HTTP status, host class, result; ``crawl`` and ``worker`` on the crawl-wide families).
The counters are the crawler's stats, read at each scrape (:data:`STAT_COUNTERS`); nothing is
counted twice. Imports prometheus_client: only loaded once metrics are asked for (the
``[metrics]`` extra).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from bloom_frontier.frontier.status import FrontierStatus, read_status
from bloom_frontier.metrics import HOST_CLASSES

if TYPE_CHECKING:
    from bloom_frontier.frontier.politeness import HostLimits
    from bloom_frontier.pipelines.writer import StoreWriter
    from bloom_frontier.seen.memory import MemoryBloomSeenFilter

logger = logging.getLogger(__name__)

PREFIX = "bloom_frontier_"


@dataclass(frozen=True)
class StatCounter:
    """A counter family made of crawler stats: ``stats`` maps each value of ``label`` to
    the stat counted under it (no label: one stat, under the key ``""``)."""

    name: str
    help: str
    stats: Mapping[str, str]
    label: str = ""

    def family(self, values: Mapping[str, Any]) -> CounterMetricFamily:
        family = CounterMetricFamily(
            PREFIX + self.name, self.help, labels=[self.label] if self.label else None
        )
        for value, stat in self.stats.items():
            family.add_metric([value] if self.label else [], values.get(stat, 0))
        return family


def _one(stat: str) -> dict[str, str]:
    return {"": stat}


#: Every counter a worker serves from its stats (the stat names: docs/metrics.md).
STAT_COUNTERS = (
    StatCounter(
        "requests_queued",
        "Requests this worker queued (new links and start requests).",
        _one("scheduler/enqueued"),
    ),
    StatCounter(
        "requests_leased",
        "Requests this worker leased from the shared queue.",
        _one("frontier/leased"),
    ),
    StatCounter(
        "requests_failed",
        "Requests failed for good: downloads that failed (after Scrapy's retries) or leases "
        "that expired too often.",
        {"download": "frontier/failed", "lease_expiries": "frontier/given_up"},
        "reason",
    ),
    StatCounter(
        "links_checked",
        "Links checked against the seen filter: new (queued) or seen before.",
        {"new": "seen/new", "seen": "seen/duplicate"},
        "result",
    ),
    StatCounter(
        "leases_expired",
        "Leases of this worker that expired before it answered (others may fetch them again).",
        _one("frontier/lease_lost"),
    ),
    StatCounter(
        "leases_reclaimed",
        "Expired leases (any worker's) this worker's leases requeued.",
        _one("frontier/reclaimed"),
    ),
    StatCounter(
        "requests_quarantined",
        "Stored requests this worker quarantined (undecodable or longer than "
        "FRONTIER_MAX_REQUEST_BYTES).",
        _one("frontier/quarantined"),
    ),
    StatCounter(
        "politeness_skipped",
        "Queue lanes a lease passed over: their host was waiting for its delay or at its "
        "concurrency limit.",
        _one("frontier/politeness_skipped"),
    ),
    StatCounter(
        "politeness_new_turns",
        "Requests that waited for a new turn at their host (their leased turn went by), by "
        "host class.",
        {name: f"frontier/politeness_new_turns/{name}" for name in HOST_CLASSES},
        "host_class",
    ),
    StatCounter(
        "backoff_pauses",
        "Hosts paused by this worker after 429/503 answers, by host class.",
        {name: f"backoff/paused/{name}" for name in HOST_CLASSES},
        "host_class",
    ),
    StatCounter(
        "backoff_waits",
        "Requests held back by their host's backoff pause, by host class.",
        {name: f"backoff/waited/{name}" for name in HOST_CLASSES},
        "host_class",
    ),
    StatCounter(
        "redis_unavailable",
        "Frontier calls that found Redis unavailable.",
        _one("frontier/redis_unavailable"),
    ),
    StatCounter(
        "robotstxt_shared_copies",
        "robots.txt answers taken from another worker's fetch, not downloaded (counted in "
        "pages_fetched_total too).",
        _one("robotstxt/shared_copy"),
    ),
    StatCounter(
        "response_bytes", "Bytes of responses received.", _one("downloader/response_bytes")
    ),
)
#: Scrapy's count of responses by status: ``<prefix><status>``.
STATUS_STAT_PREFIX = "downloader/response_status_count/"


def stats_families(values: Mapping[str, Any]) -> Iterator[Metric]:
    """The families made of a snapshot of the crawler's stats."""
    pages = CounterMetricFamily(
        PREFIX + "pages_fetched",
        "Responses received (pages, redirects, robots.txt), by HTTP status.",
        labels=["status"],
    )
    for stat, count in sorted(values.items()):
        if stat.startswith(STATUS_STAT_PREFIX):
            pages.add_metric([stat.removeprefix(STATUS_STAT_PREFIX)], count)
    yield pages
    for counter in STAT_COUNTERS:
        yield counter.family(values)
    yield GaugeMetricFamily(
        PREFIX + "hosts_waiting",
        "Hosts waiting for their delay or concurrency limit at this worker's last lease.",
        value=values.get("frontier/hosts_waiting", 0),
    )


def store_families(store: StoreWriter) -> Iterator[Metric]:
    """The record store's commits and what waits for the next one."""
    yield SummaryMetricFamily(
        PREFIX + "store_commit_seconds",
        "Transactions written to the record store, and the seconds they took.",
        count_value=store.commits,
        sum_value=store.commit_seconds,
    )
    yield GaugeMetricFamily(
        PREFIX + "store_buffered_records",
        "Records buffered for the record store's next transaction.",
        value=store.buffered,
    )
    yield GaugeMetricFamily(
        PREFIX + "store_pages_waiting",
        "Pages whose lease waits for their records' commit.",
        value=store.pages_waiting,
    )


def _crawl_gauge(name: str, help_text: str, crawl: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(PREFIX + name, help_text, labels=["crawl"])
    family.add_metric([crawl], value)
    return family


def filter_families(
    crawl: str, keys: int, size: int, capacity: int | None, error: float | None, budget: float
) -> Iterator[Metric]:
    """The seen filter's fill and expected false-positive rate (against ``budget``,
    ``SEEN_FILTER_ERROR_RATE``)."""
    yield _crawl_gauge("seen_filter_keys", "Keys in the seen filter.", crawl, keys)
    yield _crawl_gauge("seen_filter_bytes", "Memory the seen filter takes.", crawl, size)
    if capacity:
        yield _crawl_gauge(
            "seen_filter_capacity_keys",
            "Keys the seen filter's sub-filters hold at their error rates.",
            crawl,
            capacity,
        )
        yield _crawl_gauge(
            "seen_filter_fill_ratio",
            "Keys over capacity of the seen filter.",
            crawl,
            keys / capacity,
        )
    if error is not None:
        yield _crawl_gauge(
            "seen_filter_expected_false_positive_rate",
            "Chance that a new key is taken for seen (and its page never fetched), at the "
            "filter's current fill.",
            crawl,
            error,
        )
    yield _crawl_gauge(
        "seen_filter_error_budget",
        "The false-positive rate the filter was made for (SEEN_FILTER_ERROR_RATE).",
        crawl,
        budget,
    )


def crawl_families(status: FrontierStatus, budget: float) -> Iterator[Metric]:
    """The crawl-wide families of one reading of a shared frontier (every worker's)."""
    crawl = status.name
    for name, help_text, value in (
        ("crawl_queued_requests", "Requests queued in the shared frontier.", status.queued),
        ("crawl_leased_requests", "Requests leased by workers now.", status.leased),
        ("crawl_failed_requests", "Requests failed for good.", status.failed),
        ("crawl_quarantined_requests", "Stored requests in quarantine.", status.quarantined),
        ("crawl_hosts_waiting", "Hosts waiting for their politeness turn.", status.hosts_waiting),
        ("crawl_workers_alive", "Workers publishing their status.", len(status.alive)),
        ("crawl_finished", "1 once the crawl finished (nothing queued, leased or running).",
         int(status.state == "finished")),
    ):  # fmt: skip
        yield _crawl_gauge(name, help_text, crawl, value)
    for name, help_text, value in (
        ("crawl_pages", "Responses received by every worker of the crawl.", status.pages),
        ("crawl_items", "Items scraped by every worker of the crawl.", status.items),
        ("crawl_response_bytes", "Response bytes received by every worker.", status.bytes),
    ):
        family = CounterMetricFamily(PREFIX + name, help_text, labels=["crawl"])
        family.add_metric([crawl], value)
        yield family
    leases = GaugeMetricFamily(
        PREFIX + "crawl_worker_leased_requests",
        "Requests each worker holds leased now.",
        labels=["crawl", "worker"],
    )
    for worker in status.workers:
        leases.add_metric([crawl, str(worker["worker"])], worker["leased"])
    yield leases
    if status.seen_keys is not None:
        yield from filter_families(
            crawl,
            status.seen_keys,
            status.filter_bytes or 0,
            status.filter_capacity,
            status.expected_error_rate,
            budget,
        )


@dataclass
class SharedCrawl:
    """How to read a shared frontier's crawl-wide view: the client (the reader's own), the
    crawl's key prefix, ``SEEN_FILTER_ERROR_RATE`` and the politeness limits."""

    client: redis.Redis
    prefix: str
    error_rate: float
    limits: HostLimits

    def families(self) -> Iterator[Metric]:
        """A Redis round trip, then the crawl-wide families; ``redis_up`` 0 (and nothing
        more) when Redis does not answer. Blocks: runs in the scrape's thread."""
        started = time.perf_counter()
        try:
            self.client.ping()
            round_trip = time.perf_counter() - started
            status = read_status(self.client, self.prefix, self.error_rate, self.limits)
        except redis.RedisError as exc:
            logger.warning("Metrics without the crawl-wide view, Redis did not answer: %s", exc)
            yield GaugeMetricFamily(PREFIX + "redis_up", "1 if Redis answered the scrape.", 0)
            return
        yield GaugeMetricFamily(PREFIX + "redis_up", "1 if Redis answered the scrape.", 1)
        yield GaugeMetricFamily(
            PREFIX + "redis_round_trip_seconds",
            "Seconds a PING to the frontier's Redis took, at this scrape.",
            value=round_trip,
        )
        yield from crawl_families(status, self.error_rate)


class FamiliesCollector(Collector):
    """A collector that yields what ``source`` makes, read anew at each scrape."""

    def __init__(self, source: Callable[[], Iterator[Metric]]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        return self.source()


@dataclass
class WorkerSources:
    """What a worker's metrics are read from: its stats, its record store's writer, the
    crawl's name (the ``crawl`` label), its memory seen filter (embedded) or the shared crawl
    and this worker's id in it (``REDIS_URL``)."""

    stats: Callable[[], dict[str, Any]]
    store: StoreWriter
    crawl: str
    error_rate: float
    shared: SharedCrawl | None = None
    memory_seen: MemoryBloomSeenFilter | None = None
    worker: str = ""

    def families(self) -> Iterator[Metric]:
        yield from stats_families(self.stats())
        yield from store_families(self.store)
        if self.shared is not None:
            info = GaugeMetricFamily(
                PREFIX + "worker_info", "This worker's id in its crawl.", labels=["crawl", "worker"]
            )
            info.add_metric([self.crawl, self.worker], 1)
            yield info
            yield from self.shared.families()
        elif self.memory_seen is not None:
            seen = self.memory_seen
            yield from filter_families(
                self.crawl, len(seen), seen.size_in_bytes, None, None, self.error_rate
            )


def worker_registry(sources: WorkerSources) -> CollectorRegistry:
    """The registry a worker serves: its families and its process' (CPU, memory, files)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(sources.families))
    ProcessCollector(registry=registry)
    return registry


def crawl_metrics_text(
    client: redis.Redis, prefix: str, error_rate: float, limits: HostLimits
) -> str:
    """The crawl-wide families of the shared frontier under ``prefix``, in Prometheus' text
    format (``scrapy frontier SPIDER --metrics``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(SharedCrawl(client, prefix, error_rate, limits).families))
    return generate_latest(registry).decode()
