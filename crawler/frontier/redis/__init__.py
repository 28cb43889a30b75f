"""The shared frontier: a priority queue of requests in Redis, leased to workers.

Every worker of one crawl (``scrapy crawl SPIDER -s REDIS_URL=...``) shares, under one key
prefix (``FRONTIER_KEY_PREFIX``, one Redis Cluster hash tag):

- a queue of compact stored requests in lanes, one Redis list per priority level and host:
  best level first, each host's requests first in, first out, hosts of a level taking turns
  (:mod:`.layout`, "The queue");
- the RedisBloom seen filter of their dedupe keys: one key beside the queue, or
  ``SEEN_FILTER_SHARDS`` keys spread over the cluster's masters (past one key's 512 MiB);
- leases: a request handed to a worker stays in Redis, owned by that worker until its
  lease expires (``FRONTIER_LEASE_TTL`` seconds on the Redis server's clock, extended by the
  worker's heartbeat every third of it);
- a record of the requests that failed for good, with the reason.

Each step is one Lua script, so it is atomic (:mod:`.lua`, each naming the keys and
arguments it takes); :mod:`.protocol` parses what they answer. One module per concern:

- :mod:`.layout`: every Redis key of a crawl, documented;
- :mod:`.partitions`: one crawl's queue split over the masters of a cluster
  (``FRONTIER_PARTITIONS``), and which partition holds what;
- :mod:`.admission`: admit a page's links and release its lease (crash-safe, also with a
  sharded filter);
- :mod:`.leases`: lease, heartbeat, failure, release: the requests a worker holds;
- :mod:`.politeness`: the crawl-wide politeness state in Redis, as one worker uses it;
- :mod:`.outbox`: answers delivered in order, waiting while Redis is away;
- :mod:`.state`: sizes and failure records;
- :mod:`.identity`: the crawl's state trusted only while it is the crawl's (its identity,
  checked by every worker's step; Redis' eviction policy and memory; keys of the wrong
  type): a wiped frontier stops every worker with one line, never "finished";
- :mod:`.upgrade`: a crawl queued by an older release moved to lanes when a worker starts.

So each page is fetched at least once, and twice only when its lease expired while it was
being fetched (worker killed, or stalled longer than the lease). Redis being unreachable or
refusing writes never crashes the crawl nor drops an answer; Redis losing the crawl's state
(restarted without persistence, flushed, keys evicted or overwritten) stops the worker
(:mod:`.identity`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry
from twisted.internet.defer import Deferred, DeferredList, maybeDeferred
from twisted.python.failure import Failure

from bloom_frontier import defaults
from bloom_frontier.background import BackgroundThread, PeriodicThread
from bloom_frontier.frontier import failure_reason
from bloom_frontier.frontier.decode import DEFAULT_DECODER, RequestDecoder
from bloom_frontier.frontier.keys import RequestKeyer
from bloom_frontier.frontier.politeness import HostLimits
from bloom_frontier.frontier.redis import identity, state
from bloom_frontier.frontier.redis.admission import Admission
from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.redis.leases import Leases, worker_id
from bloom_frontier.frontier.redis.lua import FrontierScripts
from bloom_frontier.frontier.redis.outbox import REDIS_UNAVAILABLE, Outbox
from bloom_frontier.frontier.redis.partitions import Partitions, partition_count, partition_keys
from bloom_frontier.frontier.redis.politeness import HostPoliteness
from bloom_frontier.frontier.redis.protocol import FrontierGone, LeaseReply
from bloom_frontier.frontier.redis.upgrade import upgrade_layout
from bloom_frontier.meta import FRONTIER_LEASE_META, FRONTIER_QUEUED_META
from bloom_frontier.redis_client import Client, describe, redis_from_url, require_bloom
from bloom_frontier.seen.layers import OlderLayers, redis_layers
from bloom_frontier.seen.sharded import ShardedBloomSeenFilter, seen_filter_from_settings

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

__all__ = [
    "FRONTIER_LEASE_META",
    "FRONTIER_QUEUED_META",
    "REDIS_UNAVAILABLE",
    "FrontierKeys",
    "RedisFrontier",
    "failure_reason",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The frontier's own client retries briefly; longer outages are ridden out by the outbox
#: and the scheduler's backoff instead.
CLIENT_RETRY_ATTEMPTS = 2
#: The frontier's Lua scripts (``<name>.lua``), each one atomic step.
SCRIPTS = (
    "admit",
    "stage",
    "commit",
    "lease",
    "heartbeat",
    "downloaded",
    "fail",
    "release",
    "counts",
    "quarantine",
)
#: The scripts each partition's politeness runs (:class:`HostPoliteness`).
POLITENESS_SCRIPTS = ("turn", "pause", "paused", "waiting")


def _warn_about_setup(client: Client, keys: FrontierKeys) -> None:
    """Warn about a Redis set-up that would lose the crawl: once per crawl, by its first
    worker (the one that sets the ``setup_warned`` marker, :mod:`.layout`); commands and
    later workers stay quiet."""
    try:
        unsafe = client.info("persistence").get("aof_enabled") == 0
        first = unsafe and client.set(keys.setup_warned, 1, nx=True)
    except redis.RedisError:
        return  # INFO may be disabled (managed Redis), the marker refused: nothing to say
    if first:
        logger.warning(
            "Redis at %s has no append-only file: a Redis restart loses what changed since "
            "its last snapshot (queued requests, leases, seen keys). Turn on appendonly.",
            describe(client),
        )


def stop_worker(crawler: Crawler, error: FrontierGone) -> None:
    """The crawl's state in Redis is gone (:mod:`.identity`): say so in one line and close
    the spider with :data:`.identity.LOST_REASON`, never "finished" (``scrapy crawl`` exits
    non-zero). Its leases and answers are moot: the state they belonged to is gone."""
    from scrapy.utils.defer import deferred_from_coro

    assert crawler.spidercls is not None and crawler.engine is not None
    logger.error("%s; this worker stops", str(error).replace("SPIDER", crawler.spidercls.name))
    closing = deferred_from_coro(crawler.engine.close_spider_async(reason=identity.LOST_REASON))
    closing.addErrback(_closed_already)


def _closed_already(failure: Failure) -> None:
    """The spider was closing or closed already (the loss met while it closed): the line
    above said it; its finish reason stands."""
    logger.debug("Spider already closed: %s", failure.value)


class RedisFrontier:
    """The frontier of one crawl in Redis, as seen by one worker (see the module docstring).

    Implements :class:`bloom_frontier.frontier.Frontier` (``admit``, ``fail``, ``close``) and what
    :class:`bloom_frontier.frontier.scheduler.RedisScheduler` needs: :meth:`enqueue`,
    :meth:`lease`, :meth:`heartbeat`, :meth:`release_all`, :meth:`is_drained`. Its parts
    keep their own stats (:class:`.admission.Admission`, :class:`.leases.Leases`,
    :class:`.outbox.Outbox`).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: FrontierKeys,
        seen: ShardedBloomSeenFilter,
        keyer: RequestKeyer,
        stats: StatsCollector,
        *,
        lease_ttl: float = defaults.FRONTIER_LEASE_TTL,
        max_expiries: int = defaults.FRONTIER_MAX_EXPIRIES,
        spider: Spider | None = None,
        owner: str | None = None,
        limits: HostLimits | None = None,
        decoder: RequestDecoder = DEFAULT_DECODER,
        quarantine_cap: int = defaults.FRONTIER_QUARANTINE_MAX,
        older: OlderLayers | None = None,
        partitions: int = defaults.FRONTIER_PARTITIONS,
        eviction: identity.EvictionWatch | None = None,
    ) -> None:
        if lease_ttl <= 0:
            raise ValueError(f"FRONTIER_LEASE_TTL must be positive, got {lease_ttl}")
        if max_expiries < 1:
            raise ValueError(f"FRONTIER_MAX_EXPIRIES must be at least 1, got {max_expiries}")
        self.client = client
        self.keys = keys
        self.seen = seen
        #: Looks for keys evicted during the crawl (None: FRONTIER_ALLOW_EVICTION).
        self.eviction = eviction
        self.keyer = keyer
        self.stats = stats
        #: The queue's partitions (one by default: the crawl's own keys).
        self.partitions = Partitions(
            client, keys, partition_count(client, keys, partitions), SCRIPTS + POLITENESS_SCRIPTS
        )
        identity.run_as(self.partitions.scripts, identity.adopt(client, self.partitions.keys))
        self.politeness = HostPoliteness(
            client, keys, limits or HostLimits(), stats, self.partitions
        )
        self.outbox = Outbox(stats)
        owner = owner or worker_id()
        self.leases = Leases(
            self.partitions,
            self.outbox,
            self.politeness,
            stats,
            owner=owner,
            lease_ttl=lease_ttl,
            max_expiries=max_expiries,
            decoder=decoder,
            quarantine_cap=quarantine_cap,
        )
        #: Read-only layers of the seen filter (after `scrapy rebuild-filter`).
        self.older = older or OlderLayers([])
        self.admission = Admission(
            self.partitions,
            seen,
            keyer,
            self.leases,
            self.outbox,
            stats,
            owner=owner,
            lease_ttl=lease_ttl,
            max_request_bytes=decoder.max_bytes,
            quarantine_cap=quarantine_cap,
            older=self.older,
        )
        self.spider = spider
        #: Where Redis is called from in a crawl (:meth:`go_background`); None: the
        #: caller's thread (commands, tests).
        self.background: BackgroundThread | None = None
        #: Extends this worker's leases in a crawl (:meth:`go_background`).
        self.heartbeats: PeriodicThread | None = None
        #: Reports downloads that ended, as they end, in a crawl (:meth:`go_background`).
        self.reports: PeriodicThread | None = None

    def call(self, function: Callable[..., T], *args: Any) -> Deferred[T]:
        """``function(*args)`` (a Redis call) from the background thread, or in the
        caller's thread without one; the Deferred fires with its result."""
        if self.background is None:
            return maybeDeferred(function, *args)
        return self.background.run(function, *args)

    def go_background(self) -> None:
        """From now on, call Redis from a thread of its own, never from Twisted's loop:
        answers, leases (a crawl's scheduler calls this when it opens); and extend leases
        from another thread, every third of their TTL (:attr:`heartbeats`, started by the
        scheduler): neither a loop kept busy for seconds nor a slow call queued in the
        first thread may let a living worker's leases expire; and report downloads as they
        end from a third (:attr:`reports`, started by the scheduler): the other workers get
        their host's turns back at once, not after this loop's parsing or the answers queued
        in the first thread."""
        if self.background is None:
            self.background = self.outbox.background = BackgroundThread("frontier-redis")
            self.leases.from_thread = True
            self.heartbeats = PeriodicThread(
                "frontier-heartbeat", self.lease_ttl / 3, self.leases.heartbeat
            )
            self.reports = PeriodicThread("frontier-downloads", None, self.leases.report_downloads)

    @property
    def spider(self) -> Spider | None:
        return self.leases.spider

    @spider.setter
    def spider(self, spider: Spider | None) -> None:
        self.leases.spider = self.admission.spider = spider

    @property
    def scripts(self) -> FrontierScripts:
        """The scripts of the first partition (of the crawl's only one, by default)."""
        return self.partitions.scripts[0]

    @property
    def owner(self) -> str:
        return self.leases.owner

    @property
    def lease_ttl(self) -> float:
        return self.leases.lease_ttl

    # --- construction ----------------------------------------------------------------

    @classmethod
    def from_settings(
        cls,
        settings: BaseSettings,
        spider_name: str,
        stats: StatsCollector,
        spider: Spider | None = None,
        client: Client | None = None,
    ) -> Self:
        """The frontier of ``spider_name`` at ``REDIS_URL``, on its own connection (or on
        ``client``, e.g. a command's, see :func:`bloom_frontier.redis_client.command_client`)."""
        retry = Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.05), CLIENT_RETRY_ATTEMPTS)
        prefix = settings["FRONTIER_KEY_PREFIX"] % {"spider": spider_name}
        if client is None:
            client = redis_from_url(settings["REDIS_URL"], retry=retry)
        try:
            require_bloom(client, f"{prefix}:bloom-probe")
            keys = FrontierKeys.for_prefix(prefix)
            keyer = RequestKeyer.from_settings(stats, settings)
            # After `scrapy rebuild-filter`: the current generation and the older layers.
            keys, older = redis_layers(client, keys, settings, keyer)
            identity.check_start(client, partition_keys(client, keys), settings)
            if moved := upgrade_layout(client, keys):
                logger.warning("Moved %d requests of an older release's queue to lanes", moved)
            seen = seen_filter_from_settings(client, keys.seen, settings)
            frontier = cls(
                client,
                keys,
                seen,
                keyer,
                stats,
                lease_ttl=settings.getfloat("FRONTIER_LEASE_TTL"),
                max_expiries=settings.getint("FRONTIER_MAX_EXPIRIES"),
                spider=spider,
                limits=HostLimits.from_settings(settings),
                decoder=RequestDecoder.from_settings(settings, stats),
                quarantine_cap=settings.getint("FRONTIER_QUARANTINE_MAX"),
                older=older,
                partitions=settings.getint("FRONTIER_PARTITIONS"),
                eviction=(
                    None
                    if settings.getbool("FRONTIER_ALLOW_EVICTION")
                    else identity.EvictionWatch(client)
                ),
            )
        except BaseException:
            client.close()
            raise
        logger.info(
            "Shared frontier %s at %s (worker %s, leases of %ss)",
            prefix,
            describe(client),
            frontier.owner,
            frontier.lease_ttl,
        )
        return frontier

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        assert crawler.spidercls is not None
        assert crawler.stats is not None
        frontier = cls.from_settings(
            crawler.settings, crawler.spidercls.name, crawler.stats, crawler.spider
        )
        frontier.keyer.for_crawler(crawler)
        frontier.outbox.on_gone = partial(stop_worker, crawler)
        _warn_about_setup(frontier.client, frontier.keys)
        return frontier

    # --- admission -------------------------------------------------------------------

    def admit(
        self,
        parent: Request | None,
        children: Sequence[Request],
        *,
        after: Deferred[Any] | None = None,
        on_late_duplicates: Callable[[list[Request]], None] | None = None,
    ) -> list[Request]:
        """Queue the new ones among ``children`` in Redis and, in the same atomic step,
        release ``parent``'s lease (when this worker holds it), once ``after`` fired (the
        page's records committed).

        Returns the new ones, as the embedded frontier does, so callers learn the verdict;
        they are already queued in Redis and marked ``meta[FRONTIER_QUEUED_META]``, so when they are
        handed to the engine anyway the scheduler does not queue them again. When the
        verdict is not known yet (sent in the background, or Redis away) every request is
        returned, and ``on_late_duplicates`` gets the duplicates once it is.
        """
        lease = self.leases.take(parent)
        with self.leases.keeping(lease):  # extended while the batch is keyed
            return self.admission.admit(
                lease, children, after=after, on_late_duplicates=on_late_duplicates
            )

    def enqueue(self, request: Request) -> bool:
        """Admit a request the engine scheduled directly (start requests, ``dont_filter``
        links, and requests that replace a leased one still being downloaded: redirects,
        retries). A replacement takes over its original's lease atomically.

        Returns False if the request was dropped (a known duplicate, or no valid key)."""
        if request.meta.get(FRONTIER_QUEUED_META):
            return True
        parent = self.leases.take_replaced(request)
        return bool(self.admission.admit(parent, [request], dropped_by_caller=True))

    def seen_before(self, request: Request) -> str | None:
        """``request``'s key if an answer to this worker said the filter holds it
        (:mod:`bloom_frontier.frontier.known`); no Redis call. Not for a key a learned rule merged:
        this worker's rules may be a second old (a rule revoked since), so its admission,
        which checks their version, decides."""
        keyer = self.keyer
        key = keyer.key_of(request)
        if key is None or not self.admission.seen_before(key):
            return None
        return None if keyer.merged_by_learned(request, key) else key

    def seen_link(self, url: str, key: str) -> bool:
        """True if an answer to this worker said the filter holds ``key``, unless a learned
        rule merged it (as :meth:`seen_before`)."""
        if not self.admission.seen_before(key):
            return False
        return not self.keyer.link_merged_by_learned(url, key)

    def request_seen(self, request: Request) -> bool:
        """True if ``request``'s key is in the seen filter (or it cannot be keyed); marks
        and queues nothing (:meth:`enqueue` does both at once). Calls Redis in the caller's
        thread: Scrapy's dupefilter contract is synchronous, and the shared scheduler never
        asks it."""
        keyed = self.keyer.keyed([request])
        # After `scrapy rebuild-filter`, a key an older layer holds is seen too.
        return not keyed or self.seen.contains(keyed[0][1]) or self.older.seen([request.url])[0]

    # --- leases ----------------------------------------------------------------------

    def lease(self, count: int) -> list[Request]:
        """Lease up to ``count`` requests (see :meth:`.leases.Leases.lease`); none once the
        crawl's state is gone (:meth:`.outbox.Outbox.gone`: raised the first time without a
        crawler)."""
        try:
            return self.leases.lease(count)
        except FrontierGone as exc:
            self.outbox.gone(exc)
            return []

    def lease_later(self, count: int) -> Deferred[list[Request]]:
        """Lease up to ``count`` requests from the background thread (in the caller's
        thread without one); errbacks with Redis' error. Afterwards :meth:`seems_drained`
        tells whether the crawl looked drained then."""
        leasing = self.call(self._lease_replies, count)
        return leasing.addCallbacks(self.leases.take_delivery, self._lease_failed)

    def _lease_replies(self, count: int) -> list[tuple[int, LeaseReply]]:
        """:meth:`.leases.Leases.lease_replies`; when they say the crawl is drained, Redis is
        asked (in the same thread) whether it evicted keys meanwhile: a crawl it emptied is
        not finished (raises :class:`.protocol.FrontierLost`)."""
        replies = self.leases.lease_replies(count)
        drained = all(not r.requests and r.queued == 0 and r.leased == 0 for _, r in replies)
        if drained and self.eviction is not None:
            self.eviction.check(now=True)
        return replies

    def _lease_failed(self, failure: Failure) -> list[Request] | Failure:
        """The crawl's state in Redis is gone: this worker stops (:meth:`.outbox.Outbox.gone`;
        nothing leased meanwhile). Any other error goes on to the caller."""
        if not failure.check(FrontierGone):
            return failure
        self.outbox.gone(failure.value)
        return []

    def seems_drained(self) -> bool:
        """:meth:`is_drained` as of the last lease call, without asking Redis: nothing
        queued nor leased anywhere then, and nothing held or waiting here now."""
        sizes = self.leases.shared_sizes
        return sizes == (0, 0) and not self.outbox and not self.leases and not self.outbox.lost

    def responded(self, request: Request) -> None:
        """A response for ``request`` reached the engine (see :meth:`.leases.Leases.responded`)."""
        if self.leases.responded(request):
            self.report_downloads()

    def left_downloader(self, request: Request) -> None:
        """``request`` left the downloader (see :meth:`.leases.Leases.left_downloader`)."""
        if self.leases.left_downloader(request):
            self.report_downloads()

    def report_downloads(self) -> None:
        """Report the downloads that ended (:meth:`.leases.Leases.report_downloads`): from
        :attr:`reports`' thread in a crawl, at once in the caller's thread without one."""
        if self.reports is None:
            self.leases.report_downloads()
        else:
            self.reports.wake()

    def answer_dropped(self, grace: float) -> int:
        """Fail the requests dropped after their download; how many
        (:meth:`.leases.Leases.answer_dropped`)."""
        return self.leases.answer_dropped(grace)

    def heartbeat(self) -> None:
        """Extend the leases of requests this worker is still working on, in every
        partition, in the caller's thread (in a crawl, :attr:`heartbeats` calls it from a
        thread of its own), then looks for keys Redis evicted meanwhile
        (:class:`.identity.EvictionWatch`): the worker stops if it did."""
        self.leases.heartbeat()
        if self.eviction is None:
            return
        try:
            self.eviction.check()
        except FrontierGone as exc:
            self.leases.on_loop(self.outbox.gone, exc)
        except redis.RedisError:
            pass  # Redis away: the leases' own heartbeat counts and says it

    def release_all(self) -> int:
        """Give back every lease this worker holds; how many went back to the queue."""
        return self.leases.release_all()

    def fail(self, request: Request, reason: str, *, after: Deferred[Any] | None = None) -> None:
        """``request`` failed for good: record it with ``reason`` and release its lease
        (once ``after`` fired, when given)."""
        self.leases.fail(request, reason, after=after)

    # --- answers waiting for Redis ---------------------------------------------------

    def flush(self) -> bool:
        """Deliver waiting answers in order; True when none is left waiting."""
        return self.outbox.flush()

    def answers_ready(self) -> Deferred[Any]:
        """Fires once every waiting answer may be sent (the records of the pages whose
        leases they answer committed)."""
        return DeferredList(self.outbox.waiting_for())

    @property
    def pending_answers(self) -> int:
        """Answers not yet delivered to Redis."""
        return len(self.outbox)

    # --- state -----------------------------------------------------------------------

    def is_drained(self) -> bool:
        """True when the whole crawl is done: nothing queued, no lease outstanding in any
        worker, no answer of this worker waiting, nothing evicted. Raises
        ``REDIS_UNAVAILABLE`` errors."""
        if self.outbox or self.leases or self.outbox.lost:
            return False
        queued, leased, _failed = state.sizes(self.partitions.scripts)
        return queued == 0 and leased == 0 and not self._evicted()

    def _evicted(self) -> bool:
        """True, the worker stopping (:meth:`.outbox.Outbox.gone`), when Redis evicted keys
        during the crawl or may evict them now: a crawl it emptied is not finished."""
        if self.eviction is None:
            return False
        try:
            self.eviction.check(now=True)
        except FrontierGone as exc:
            self.outbox.gone(exc)
            return True
        return False

    def counts(self) -> dict[str, int]:
        """Sizes of the shared state: queued, leased and failed requests, keys seen."""
        return state.counts(self.partitions.scripts, self.seen)

    def failures(self) -> dict[str, dict[str, Any]]:
        """The failed requests' records, by URL."""
        return state.failures(self.client, self.partitions.keys)

    def close(self) -> None:
        """Deliver what can be delivered, then release the connection."""
        if self.background is not None:
            self.background.close()
        if not self.outbox.close() and self.outbox.lost is None:  # lost: they are moot
            logger.error(
                "%d frontier updates could not be delivered before closing; their leases "
                "will expire and the pages be fetched again",
                len(self.outbox),
            )
        self.client.close()
