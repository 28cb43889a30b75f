"""Scrapy scheduler and downloader middleware for the shared Redis frontier.

Installed by :class:`bloom_frontier.addon.BloomFrontierAddon` when ``REDIS_URL`` is set.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import redis
from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import DontCloseSpider
from twisted.internet import defer
from twisted.internet.task import LoopingCall

from bloom_frontier.compat import download_room, wake_engine
from bloom_frontier.frontier.politeness import disable_local_delays
from bloom_frontier.frontier.redis import REDIS_UNAVAILABLE, RedisFrontier, failure_reason
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request, Spider
    from scrapy.core.downloader import Downloader
    from scrapy.crawler import Crawler
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

#: Seconds between lease attempts while the shared queue is empty: doubling from the first
#: to the last, back to the first as soon as work appears. Idle workers poll gently.
POLL_MIN, POLL_MAX = 0.05, 1.0
#: Longest wait between lease attempts while requests are queued but none could be leased
#: because their hosts are at their crawl-wide concurrency: another worker's download ending
#: frees a turn (this worker's own answers ask again at once,
#: :meth:`RedisScheduler._leases_answered`; its own downloads ending ask through the engine).
POLL_QUEUED_MAX = 0.2
#: Seconds a leased request may take from leaving the downloader to its response reaching
#: the engine (the downloader middlewares' ``process_response``) before it counts as
#: dropped on the way, and how often that is checked.
DROPPED_GRACE, DROPPED_CHECK = 5.0, 1.0


def _redis_frontier(crawler: Crawler) -> RedisFrontier:
    frontier = services_of(crawler).frontier
    if not isinstance(frontier, RedisFrontier):
        raise RuntimeError("RedisScheduler needs REDIS_URL: it serves the shared frontier")
    return frontier


class RedisScheduler(BaseScheduler):
    """Serves requests leased from the shared frontier (:mod:`bloom_frontier.frontier.redis`).

    ``next_request`` hands out requests from a small local buffer, refilled with up to
    ``FRONTIER_LEASE_BATCH`` leases at a time, and no more than the downloader can start at
    once: a request leaves right after its host's politeness turn, not after waiting in the
    buffer (the worker's own download delay is 0, see :mod:`bloom_frontier.frontier.politeness`).
    When nothing can be leased it polls again after a delay doubling up to one second, or
    sooner when a host waiting on its delay becomes ready. The crawl ends only when the whole
    frontier is drained: nothing queued and no lease outstanding in any worker (another
    worker may still find links, or die and have its pages requeued). While this worker
    works, a heartbeat extends its leases every third of ``FRONTIER_LEASE_TTL``, from a thread
    of its own (:attr:`RedisFrontier.heartbeats`): the leases of requests buffered here,
    queued in a downloader slot, downloading, being handled, and of answers waiting in the
    outbox. On close, leases not yet answered go back to the queue.

    Twisted's loop never waits on Redis: in a crawl, the frontier calls Redis from a thread
    of its own (:meth:`RedisFrontier.go_background`). The engine asks synchronously, so
    ``next_request`` answers from the buffer and starts a refill (the engine is woken when
    it arrives), ``has_pending_requests`` answers from what is known locally (requests
    buffered, leases held, answers waiting) and the crawl-wide drain read with the last
    empty lease, and ``enqueue_request`` accepts a request whose verdict comes later:
    Scrapy's ``request_dropped`` is sent then for a duplicate.

    Scrapy's scheduler contract: ``__len__`` is the requests buffered here plus those
    queued in Redis at the last reading; stats ``scheduler/enqueued(/redis)`` count
    requests the frontier queued (when its answer says so), ``scheduler/dequeued(/redis)``
    those handed to the engine. Deviations: ``has_pending_requests`` stays True while a
    request handed out is unanswered (its page may still add links), and while any worker
    holds a lease; see ``tests/test_scheduler_contract.py``.

    When leases land from the background thread, or a host's turn comes, the engine is asked
    to call ``next_request`` again (:func:`bloom_frontier.compat.wake_engine`, private Scrapy
    API); without it the engine would ask again only after its 5 s heartbeat or the next
    finished download. The downloader's free room is read through
    :func:`bloom_frontier.compat.download_room`.
    """

    def __init__(self, crawler: Crawler, frontier: RedisFrontier, batch_size: int) -> None:
        self.crawler = crawler
        self.frontier = frontier
        self.batch_size = max(1, batch_size)
        self._buffer: deque[Request] = deque()
        self._poll_delay = POLL_MIN
        self._next_poll = 0.0
        self._wake_call: Any = None
        self._heartbeat = LoopingCall(self._beat)
        self._dropped_check = LoopingCall(self.frontier.answer_dropped, DROPPED_GRACE)
        self._redis_away = False
        #: A lease call is under way.
        self._leasing = False
        #: Requests queued in Redis at the last reading.
        self._queued_elsewhere = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        scheduler = cls(
            crawler, _redis_frontier(crawler), crawler.settings.getint("FRONTIER_LEASE_BATCH")
        )
        crawler.signals.connect(scheduler.spider_idle, signal=signals.spider_idle)
        # A lease is answered by what happens to its request (module docstring of
        # bloom_frontier.frontier.redis.leases), never by the garbage collector.
        frontier = scheduler.frontier
        crawler.signals.connect(frontier.responded, signal=signals.response_received)
        crawler.signals.connect(frontier.left_downloader, signal=signals.request_left_downloader)
        frontier.admission.on_verdict = scheduler._verdict
        frontier.outbox.on_released = scheduler._leases_answered
        return scheduler

    def open(self, spider: Spider) -> None:
        from twisted.internet import reactor

        self.frontier.spider = spider
        if reactor.running:  # type: ignore[attr-defined]
            self.frontier.go_background()
        downloader = self._downloader()
        if downloader is not None:
            disable_local_delays(downloader)
        for thread in (self.frontier.heartbeats, self.frontier.reports):
            if thread is not None:
                thread.start()
        self._heartbeat.start(self.frontier.lease_ttl / 3, now=False)
        self._dropped_check.start(DROPPED_CHECK, now=False)

    def close(self, reason: str) -> None:
        for loop in (self._heartbeat, self._dropped_check):
            if loop.running:
                loop.stop()
        if self._wake_call is not None and self._wake_call.active():
            self._wake_call.cancel()
        for thread in (self.frontier.heartbeats, self.frontier.reports):
            if thread is not None:
                thread.stop()
        if self.frontier.background is not None:
            self.frontier.background.close()  # a heartbeat or lease under way ends first
        released = self.frontier.release_all()  # first: the buffered requests are still held
        self._buffer.clear()
        if released:
            logger.info("Gave back %d leased requests to the shared frontier", released)

    def __len__(self) -> int:
        return len(self._buffer) + self._queued_elsewhere

    def enqueue_request(self, request: Request) -> bool:
        return self.frontier.enqueue(request)

    def _verdict(self, new: list[Request], duplicates: list[Request]) -> None:
        """The frontier's answer to an admission: count what it queued, and tell Scrapy
        about the duplicates it dropped (``request_dropped``, as for a refused
        ``enqueue_request``)."""
        stats = self.crawler.stats
        assert stats is not None
        if new:
            self._queued_elsewhere += len(new)
            stats.inc_value("scheduler/enqueued/redis", len(new))
            stats.inc_value("scheduler/enqueued", len(new))
        for request in duplicates:
            self.crawler.signals.send_catch_log(
                signal=signals.request_dropped, request=request, spider=self.crawler.spider
            )

    def next_request(self) -> Request | None:
        if not self._buffer:
            wait = self._next_poll - time.monotonic()
            if wait <= 0:
                self._refill()
            else:  # asked early (a download ended): make sure the engine asks again
                self._wake_later(wait)
        if not self._buffer:
            return None
        request = self._buffer.popleft()
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value("scheduler/dequeued/redis")
        stats.inc_value("scheduler/dequeued")
        return request

    def has_pending_requests(self) -> bool:
        if self._buffer or self._leasing:
            return True
        if self.frontier.background is None:
            try:
                return not self.frontier.is_drained()
            except redis.RedisError:
                return True  # cannot tell: keep waiting for Redis
        return not self.frontier.seems_drained()

    def spider_idle(self, spider: Spider) -> None:
        """Keep the spider open while other workers may still add work."""
        if self.has_pending_requests():
            raise DontCloseSpider

    def _refill(self) -> None:
        """Lease requests (in the background): the engine is woken when they come."""
        if self._leasing:
            return
        self._leasing = True
        leasing = self.frontier.lease_later(self._lease_count())
        leasing.addCallbacks(self._leased, self._lease_failed)

    def _leased(self, leased: list[Request]) -> None:
        self._leasing = False
        sizes = self.frontier.leases.shared_sizes
        self._queued_elsewhere = sizes[0] if sizes else 0
        if self._redis_away:
            logger.info("Redis is back: leasing again")
            self._redis_away = False
        self.frontier.flush()
        if leased:
            self._buffer.extend(leased)
            self._poll_delay = POLL_MIN
            self._next_poll = 0.0
            if self.frontier.background is not None:
                self._wake_engine()
            return
        self._poll_later()
        if self.frontier.seems_drained():
            # The engine checks whether the spider is idle when it asks for requests; at the
            # planned poll it would start a lease first (pending again) and miss the end.
            self._wake_engine()

    def _lease_failed(self, failure: Failure) -> None:
        """Redis unavailable, or a script error: keep polling."""
        self._leasing = False
        if not self._redis_away:
            exc = failure.value
            log = logger.warning if isinstance(exc, REDIS_UNAVAILABLE) else logger.error
            log("Cannot lease requests from Redis (retrying): %s", exc)
            self._redis_away = True
        self._poll_later()

    def _poll_later(self) -> None:
        wait = self._poll_delay
        ready_in = self.frontier.politeness.ready_in
        if ready_in is not None:
            wait = min(wait, ready_in)
        self._next_poll = time.monotonic() + wait
        self._wake_later(wait)
        # Requests queued, none leasable, no host waiting on its delay: their hosts are at
        # their concurrency, and any worker's answer may free a turn.
        gated = self._queued_elsewhere and ready_in is None
        longest = POLL_QUEUED_MAX if gated else POLL_MAX
        self._poll_delay = min(self._poll_delay * 2, longest)

    def _leases_answered(self) -> None:
        """This worker's answers released leases: their hosts have room for more requests
        now, so lease again at once rather than after the planned poll."""
        if self._next_poll > time.monotonic():
            self._poll_delay = POLL_MIN
            self._next_poll = 0.0
            self._wake_engine()

    def _lease_count(self) -> int:
        """Requests to lease now: the batch size, at most what the downloader has room for."""
        downloader = self._downloader()
        room = None if downloader is None else download_room(downloader)
        if room is None:  # no engine, or no limit
            return self.batch_size
        return max(1, min(self.batch_size, room))

    def _downloader(self) -> Downloader | None:
        """The engine's downloader; None while driven without an engine (as in tests)."""
        try:
            return self.crawler.engine.downloader
        except RuntimeError:  # Crawler.engine is not set yet
            return None

    def _wake_later(self, delay: float) -> None:
        """Have the engine ask for requests again after ``delay`` seconds (its own periodic
        check only comes every 5 s)."""
        if self._wake_call is not None and self._wake_call.active():
            if self._wake_call.getTime() <= self._wake_call.seconds() + delay:
                return
            self._wake_call.cancel()  # a host is ready sooner than the planned poll
        from twisted.internet import reactor

        self._wake_call = reactor.callLater(delay, self._wake_engine)  # type: ignore[attr-defined]

    def _wake_engine(self) -> None:
        wake_engine(self.crawler.engine)

    def _beat(self) -> None:
        if self.frontier.heartbeats is None:  # driven without a running loop (tests)
            self.frontier.heartbeat()
        self.frontier.flush()


class LeaseMiddleware:
    """Downloader middleware, next to the engine (lowest order): a download that failed for
    good answers its lease.

    An exception no other middleware handled (retries exhausted, ``IgnoreRequest`` from
    robots.txt, the offsite filter or any other middleware's ``process_request``...): the
    request failed for good; the frontier records the reason and releases the lease. A
    download cancelled by a shutdown is not a failure: the request goes back to the queue
    when the scheduler closes.

    The other outcomes answer the lease elsewhere: a response, through its page batch
    (:class:`bloom_frontier.middlewares.linkbatch.BatchDedupeMiddleware`, also when the callback
    raises);
    a redirect or retry, by taking the lease over (:meth:`RedisFrontier.enqueue`); a
    request dropped after its download, by :meth:`RedisFrontier.answer_dropped`.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        if isinstance(exception, (defer.CancelledError, asyncio.CancelledError)):
            return
        _redis_frontier(self.crawler).fail(request, failure_reason(exception))
