"""Lease bookkeeping: the requests one worker holds, how it gets them and gives them back.

- **lease** (``lease.lua``): requeue expired leases (``frontier/reclaimed``), then lease the
  best requests whose host is ready (global per-host politeness, see
  :mod:`crawler.frontier.politeness`). A request whose lease expired
  ``FRONTIER_MAX_EXPIRIES`` times is recorded as failed instead (``frontier/given_up``): a
  page that kills every worker fetching it must not take the crawl down, worker after worker.
- **heartbeat** (``heartbeat.lua``): extend the leases this worker still works on, every
  third of ``FRONTIER_LEASE_TTL``.
- **fail** (``fail.lua``): record the reason a request failed for good and release it.
- **release** (``release.lua``): give every held lease back on shutdown.
- **quarantine** (``quarantine.lua``): a leased request that does not decode (the strict
  decoder, :mod:`crawler.frontier.decode`) is answered by putting it in quarantine with the
  reason (:mod:`crawler.frontier.redis.quarantine`); the requests leased with it are held as
  usual. The lease script itself quarantines a request longer than
  ``FRONTIER_MAX_REQUEST_BYTES`` by its length, before it leaves Redis.

A lease is answered (links admitted, failure recorded) once, by what happens to its request,
never by garbage collection nor by waiting for it to expire:

- its response is handled: the page's link batch releases it (even empty, even when the
  callback raised midway); a callback that raised first, through Scrapy's ``spider_error``
  (:class:`middlewares.linkbatch.BatchDedupeMiddleware`);
- its download failed (retries exhausted, ``IgnoreRequest`` from any downloader
  middleware's ``process_request``): :class:`crawler.frontier.scheduler.LeaseMiddleware`;
  an errback that raised: ``spider_error`` again;
- a redirect or retry replaces it: the replacement takes the lease over, atomically;
- it left the downloader (``request_left_downloader``) and nothing of the above followed
  within seconds (a middleware's ``process_response`` raised, a ``request_scheduled``
  handler dropped its redirect): :meth:`Leases.answer_dropped` records it as failed;
- the worker shuts down: :meth:`Leases.release_all` gives it back.

Answers go through the :class:`crawler.frontier.redis.outbox.Outbox`, in order with every
other answer.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import redis

from crawler.frontier.decode import DEFAULT_DECODER, RequestDecoder, RequestNotLoadable
from crawler.frontier.politeness import TURN_META
from crawler.frontier.redis.outbox import REDIS_UNAVAILABLE, Answer
from crawler.frontier.redis.quarantine import QUARANTINE_MAX
from crawler.frontier.serialize import RequestNotSerializable, request_to_json

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from crawler.frontier.lua import FrontierScripts
    from crawler.frontier.politeness import HostPoliteness
    from crawler.frontier.redis.outbox import Outbox

logger = logging.getLogger(__name__)

#: ``request.meta`` key holding the id of the lease a request was handed out under.
LEASE_META = "frontier_lease"
#: Most expired leases one lease call puts back in the queue.
RECLAIM_BATCH = 1000
#: Items before the leased requests in the lease script's reply (lease.lua).
LEASE_REPLY_HEAD = 10


def text(value: bytes | str) -> str:
    """A Redis reply as text, whether or not the client decodes responses."""
    return value.decode() if isinstance(value, bytes) else value


def without_lease(meta: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``meta`` without this worker's lease id and politeness turn (never stored
    nor inherited)."""
    return {name: value for name, value in meta.items() if name not in (LEASE_META, TURN_META)}


def worker_id() -> str:
    """An owner id for this process's leases: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Leases:
    """The leases one worker holds (see the module docstring).

    Stats: ``frontier/leased``, ``frontier/reclaimed``, ``frontier/given_up``,
    ``frontier/staged_recovered``, ``frontier/quarantined``, ``frontier/lease_lost``,
    ``frontier/released``, ``frontier/failed``, ``frontier/ack_refused``,
    ``frontier/unanswered``, ``frontier/heartbeat_longest_gap_ms`` (between two heartbeats:
    more than ``FRONTIER_LEASE_TTL`` and leases expire).
    """

    def __init__(
        self,
        scripts: FrontierScripts,
        outbox: Outbox,
        politeness: HostPoliteness,
        stats: StatsCollector,
        *,
        owner: str,
        lease_ttl: float,
        max_expiries: int,
        decoder: RequestDecoder = DEFAULT_DECODER,
        quarantine_cap: int = QUARANTINE_MAX,
    ) -> None:
        self.scripts = scripts
        self.decoder = decoder
        self.quarantine_cap = quarantine_cap
        self.outbox = outbox
        self.politeness = politeness
        self.stats = stats
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.max_expiries = max_expiries
        self.spider: Spider | None = None
        #: Leases this worker holds, by id: the URL of each request, for the log.
        self._held: dict[str, str] = {}
        #: Leases whose response reached the engine: later requests carrying the lease are
        #: the page's links, not its replacements.
        self._responded: set[str] = set()
        #: Leases whose request left the downloader without a response (yet), with when.
        self._left: dict[str, float] = {}
        #: Leases the heartbeat found taken over by another worker.
        self._lost: set[str] = set()
        #: The heartbeat runs in a thread of its own (a crawl's): its findings go to the loop.
        self.from_thread = False
        #: Leases the lease script granted whose delivery has not reached the loop yet.
        self._arriving: set[str] = set()
        #: When the last heartbeat began (``time.monotonic()``).
        self._last_beat: float | None = None
        #: Leases whose request was overdue at the last :meth:`answer_dropped`.
        self._overdue: set[str] = set()

    @property
    def lease_ttl_ms(self) -> int:
        return int(self.lease_ttl * 1000)

    def __len__(self) -> int:
        """Leases held."""
        return len(self._held)

    # --- getting leases ----------------------------------------------------------------

    def lease(self, count: int) -> list[Request]:
        """Lease up to ``count`` requests (best priority first, of hosts ready by
        politeness) to this worker, after putting expired leases back in the queue. Raises
        ``REDIS_UNAVAILABLE`` errors."""
        return self.take_delivery(self.scripts.run("lease", self.lease_args(count)))

    def lease_reply(self, count: int) -> list[Any]:
        """The lease script's reply for ``count`` requests, its leases noted as arriving
        (heartbeated until :meth:`take_delivery` holds them): called in the background
        thread, while the loop that takes the delivery may be busy for seconds."""
        reply = self.scripts.run("lease", self.lease_args(count))
        self._arriving.update(map(text, reply[LEASE_REPLY_HEAD::3]))
        return reply

    def lease_args(self, count: int) -> list[Any]:
        """The lease script's arguments for ``count`` requests."""
        args = [self.owner, count, self.lease_ttl_ms, RECLAIM_BATCH, self.max_expiries]
        args += [self.decoder.max_bytes, self.quarantine_cap]
        return [*args, *self.politeness.limits.script_args()]

    def take_delivery(self, reply: list[Any]) -> list[Request]:
        """Hold the requests the lease script's ``reply`` hands out; note the rest."""
        reclaimed, given_up, triples = int(reply[0]), int(reply[1]), reply[LEASE_REPLY_HEAD:]
        self.shared_sizes = int(reply[7]), int(reply[8])
        recovered_batches, recovered = int(reply[2]), int(reply[3])
        self.politeness.leased(int(reply[4]), int(reply[5]), int(reply[6]))
        if recovered:
            self.stats.inc_value("frontier/staged_recovered", recovered)
        if recovered_batches:
            logger.warning(
                "Queued %d requests of %d batches whose worker stopped between staging and "
                "committing them (some may be fetched twice)",
                recovered,
                recovered_batches,
            )
        if reclaimed:
            self.stats.inc_value("frontier/reclaimed", reclaimed)
            logger.info("Requeued %d requests whose lease had expired", reclaimed)
        if int(reply[9]):
            self.stats.inc_value("frontier/quarantined", int(reply[9]))
            logger.warning(
                "Quarantined %d stored requests longer than FRONTIER_MAX_REQUEST_BYTES",
                int(reply[9]),
            )
        if given_up:
            self.stats.inc_value("frontier/given_up", given_up)
            logger.warning(
                "Gave up %d requests whose lease expired %d times (recorded as failed)",
                given_up,
                self.max_expiries,
            )
        leased = []
        leased_at = time.monotonic()
        for lease, stored, delay in zip(triples[::3], triples[1::3], triples[2::3], strict=True):
            lease = text(lease)
            try:
                request = self.decoder.decode(stored, self.spider)
            except RequestNotLoadable as exc:
                self.quarantine(lease, exc.reason)
                continue
            request.meta[LEASE_META] = lease
            request.meta[TURN_META] = [leased_at, int(delay) / 1000]
            self._hold(lease, request)
            leased.append(request)
        self._arriving.difference_update(map(text, triples[::3]))  # held, or answered
        self.stats.inc_value("frontier/leased", len(leased))
        return leased

    # --- which request holds which lease -----------------------------------------------

    def _hold(self, lease: str, request: Request) -> None:
        self._held[lease] = request.url

    def holds(self, lease: str | None) -> bool:
        """True if this worker holds ``lease`` (not answered yet)."""
        return lease in self._held

    def take(self, request: Request | None) -> str | None:
        """The id of ``request``'s lease if this worker holds it, now no longer held."""
        if request is None:
            return None
        lease = request.meta.get(LEASE_META)
        return self.take_id(lease) if lease in self._held else None

    def take_replaced(self, request: Request) -> str | None:
        """The lease ``request`` takes over if it replaces a leased request still being
        downloaded (a redirect, a retry: before the original's response reached the
        engine), now no longer held; None for a page's link."""
        lease = request.meta.get(LEASE_META)
        if lease in self._held and lease not in self._responded:
            return self.take_id(lease)
        return None

    def take_id(self, lease: str) -> str:
        del self._held[lease]
        self._responded.discard(lease)
        self._left.pop(lease, None)
        return lease

    def responded(self, request: Request) -> None:
        """A response for ``request`` reached the engine (Scrapy's ``response_received``):
        requests scheduled from now on that carry its lease id are its links, no longer its
        replacements; its page batch (or its callback's error) answers the lease."""
        lease = request.meta.get(LEASE_META)
        if lease in self._held:
            self._responded.add(lease)
            self._left.pop(lease, None)

    def left_downloader(self, request: Request) -> None:
        """``request`` left the downloader (Scrapy's ``request_left_downloader``): its
        response, or a replacement taking its lease over, or its failure follows at once,
        unless a downloader middleware drops it on the way (see :meth:`answer_dropped`)."""
        lease = request.meta.get(LEASE_META)
        if lease in self._held and lease not in self._responded:
            self._left.setdefault(lease, time.monotonic())

    def answer_dropped(self, grace: float) -> int:
        """Record as failed the requests that left the downloader more than ``grace``
        seconds ago with nothing since: no response reached the engine, no replacement took
        their lease over, no failure was reported (an exception raised in a downloader
        middleware's ``process_response``, a redirect dropped by a ``request_scheduled``
        handler). Returns how many.

        A request counts as dropped only when it was overdue at the previous call too: a
        loop that stalled longer than ``grace`` (a long page parsed, a busy machine) has
        the response's callbacks queued but not yet run, and runs them before the next
        call."""
        deadline = time.monotonic() - grace
        overdue = {lease for lease, left in self._left.items() if left <= deadline}
        dropped = [lease for lease in self._overdue if lease in overdue]
        self._overdue = overdue.difference(dropped)
        for lease in dropped:
            url = self._held[lease]
            self.take_id(lease)
            self.stats.inc_value("frontier/unanswered")
            logger.warning("Request %s (lease %s) was dropped after its download", url, lease)
            reason = "dropped after its download (no response, no replacement, no error)"
            self.fail_lease(lease, reason, url=url, request_json=None)
        return len(dropped)

    # --- keeping and giving back -------------------------------------------------------

    def heartbeat(self) -> None:
        """Extend the leases of requests this worker is still working on. In a crawl this
        runs in a thread of its own (:attr:`from_thread`), and what it finds goes back to
        the loop."""
        now = time.monotonic()
        if self._last_beat is not None:
            gap_ms = round((now - self._last_beat) * 1000)
            self._on_loop(self.stats.max_value, "frontier/heartbeat_longest_gap_ms", gap_ms)
        self._last_beat = now
        args = self.heartbeat_args()
        if not args:
            return
        try:
            lost = self.scripts.run("heartbeat", args)
        except redis.RedisError as exc:
            self._on_loop(self.heartbeat_failed, exc)
            return
        self._on_loop(self.note_lost, lost)

    def _on_loop(self, function: Callable[..., object], *args: Any) -> None:
        if not self.from_thread:
            function(*args)
            return
        from twisted.internet import reactor

        reactor.callFromThread(function, *args)  # type: ignore[attr-defined]

    def heartbeat_args(self) -> list[Any] | None:
        """The heartbeat script's arguments (None: no lease to extend): every lease this
        worker still works on, whether its delivery is on its way to the loop, its
        request is buffered, queued in a downloader slot, downloading or being handled, or
        its answer waits in the outbox. Reads copies, so the heartbeat thread may call it
        while the other threads change them."""
        lost = set(self._lost)
        working = [*set(self._arriving), *list(self._held), *self.outbox.leases()]
        leases = [lease for lease in working if lease not in lost]
        return [self.owner, self.lease_ttl_ms, *leases] if leases else None

    def note_lost(self, lost: list[Any]) -> None:
        """Note the leases the heartbeat found taken over, among those still held or whose
        answer was not sent yet (an answer sent meanwhile released its lease: not lost)."""
        unanswered = {*self._arriving, *self._held, *self.outbox.leases(unsent=True)}
        self._lost &= {*self._held, *self.outbox.leases()}  # forget the answered ones
        lost = [lease for lease in map(text, lost) if lease in unanswered]
        if lost:
            self._lost.update(lost)
            self.stats.inc_value("frontier/lease_lost", len(lost))
            logger.warning(
                "%d leases expired before their heartbeat (worker stalled or Redis away "
                "longer than FRONTIER_LEASE_TTL); other workers may fetch them again",
                len(lost),
            )

    def heartbeat_failed(self, exc: BaseException) -> None:
        self.stats.inc_value("frontier/redis_unavailable")
        logger.warning("Cannot extend %d leases now: %s", len(self._held), exc)

    def release_all(self) -> int:
        """Give back every lease this worker holds (on shutdown), so other workers need
        not wait for them to expire. Returns how many went back to the queue."""
        leases = [self.take_id(lease) for lease in list(self._held)]
        if not leases:
            return 0
        try:
            released = int(self.scripts.run("release", [self.owner, *leases]))
        except REDIS_UNAVAILABLE as exc:
            logger.warning("Cannot give back %d leases (they will expire): %s", len(leases), exc)
            return 0
        self.stats.inc_value("frontier/released", released)
        return released

    # --- failures ----------------------------------------------------------------------

    def fail(self, request: Request, reason: str, *, after: Deferred[Any] | None = None) -> None:
        """``request`` failed for good: record it with ``reason`` and release its lease
        (once ``after`` fired, when given)."""
        lease = self.take(request)
        if lease is None:
            return
        try:
            stored: str | None = request_to_json(
                request.replace(meta=without_lease(request.meta)), self.spider
            )
        except RequestNotSerializable:
            stored = None
        self.fail_lease(lease, reason, url=request.url, request_json=stored, after=after)

    def fail_lease(
        self,
        lease: str,
        reason: str,
        *,
        url: str,
        request_json: str | None,
        after: Deferred[Any] | None = None,
    ) -> None:
        """Record the failure (with the stored request, when there is one) and release."""
        try:
            stored = json.loads(request_json) if request_json else None
        except ValueError:
            stored = request_json  # not JSON (why it could not be loaded): kept as text
        record = json.dumps(
            {
                "url": url,
                "reason": reason,
                "worker": self.owner,
                "failed_at": time.time(),
                "request": stored,
            }
        )

        def on_reply(reply: int) -> bool:
            if int(reply):
                self.stats.inc_value("frontier/failed")
                logger.info("Request %s failed for good: %s", url or lease, reason)
                return True
            self.refused(lease)
            return False

        deliver = partial(self.scripts.run, "fail", [self.owner, lease, url or lease, record])
        self.outbox.send(Answer("fail", deliver, on_reply, after, lease=lease))

    def quarantine(self, lease: str, reason: str) -> None:
        """The leased request ``lease`` does not decode: put it in quarantine with
        ``reason`` (its stored text stays in Redis, the script copies it) and release it."""
        self.stats.inc_value("frontier/quarantined")
        logger.warning("Quarantined stored request %s: %s", lease, reason)

        def on_reply(reply: int) -> bool:
            if int(reply):
                return True
            self.refused(lease)
            return False

        args = [self.owner, lease, reason, self.quarantine_cap]
        deliver = partial(self.scripts.run, "quarantine", args)
        self.outbox.send(Answer("quarantine", deliver, on_reply, lease=lease))

    def refused(self, lease: str | None) -> None:
        """Redis refused this worker's answer for ``lease``."""
        self.stats.inc_value("frontier/ack_refused")
        logger.info(
            "Answer for lease %s refused: it expired and another worker took the request "
            "over (and fetches it again), or it was answered already; dropped",
            lease,
        )
