"""Lease bookkeeping: the requests one worker holds, how it gets them and gives them back.

- **lease** (``lease.lua``): requeue expired leases (``frontier/reclaimed``), then lease the
  best requests whose host is ready (global per-host politeness, see
  :mod:`bloom_frontier.frontier.politeness`). A request whose lease expired
  ``FRONTIER_MAX_EXPIRIES`` times is recorded as failed instead (``frontier/given_up``): a
  page that kills every worker fetching it must not take the crawl down, worker after worker.
- **heartbeat** (``heartbeat.lua``): extend the leases this worker still works on, every
  third of ``FRONTIER_LEASE_TTL``.
- **downloaded** (``downloaded.lua``, or with the next lease call): the downloads of these
  leased requests ended (response or failure): they stop counting against their host's
  crawl-wide concurrency, while their leases go on until answered. The report is sent from
  a thread of its own as soon as a download ends (:meth:`Leases.report_downloads`), or rides
  on a lease call that comes first. A report lost (Redis away) delays nothing but the
  host's turn: the lease's end releases it too.
- **fail** (``fail.lua``): record the reason a request failed for good and release it.
- **release** (``release.lua``): give every held lease back on shutdown.
- **quarantine** (``quarantine.lua``): a leased request that does not decode (the strict
  decoder, :mod:`bloom_frontier.frontier.decode`) is answered by putting it in quarantine with the
  reason (:mod:`bloom_frontier.frontier.redis.quarantine`); the requests leased with it are held as
  usual. The lease script itself quarantines a request longer than
  ``FRONTIER_MAX_REQUEST_BYTES`` by its length, before it leaves Redis.

A lease is answered (links admitted, failure recorded) once, by what happens to its request,
never by garbage collection nor by waiting for it to expire:

- its response is handled: the page's link batch releases it (even empty, even when the
  callback raised midway); a callback that raised first, through Scrapy's ``spider_error``
  (:class:`bloom_frontier.middlewares.linkbatch.BatchDedupeMiddleware`);
- its download failed (retries exhausted, ``IgnoreRequest`` from any downloader
  middleware's ``process_request``): :class:`bloom_frontier.frontier.scheduler.LeaseMiddleware`;
  an errback that raised: ``spider_error`` again;
- a redirect or retry replaces it: the replacement takes the lease over, atomically;
- it left the downloader (``request_left_downloader``) and nothing of the above followed
  within seconds (a middleware's ``process_response`` raised, a ``request_scheduled``
  handler dropped its redirect): :meth:`Leases.answer_dropped` records it as failed;
- the worker shuts down: :meth:`Leases.release_all` gives it back.

Answers go through the :class:`bloom_frontier.frontier.redis.outbox.Outbox`, in order with every
other answer.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import redis

from bloom_frontier import defaults
from bloom_frontier.frontier.decode import DEFAULT_DECODER, RequestDecoder, RequestNotLoadable
from bloom_frontier.frontier.redis.outbox import REDIS_UNAVAILABLE, Answer
from bloom_frontier.frontier.redis.protocol import FrontierGone, LeaseReply
from bloom_frontier.frontier.serialize import RequestNotSerializable, request_to_json
from bloom_frontier.logtext import short
from bloom_frontier.meta import FRONTIER_LEASE_META, FRONTIER_TURN_META
from bloom_frontier.redis_client import text

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from scrapy import Request, Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from bloom_frontier.frontier.redis.outbox import Outbox
    from bloom_frontier.frontier.redis.partitions import Partitions
    from bloom_frontier.frontier.redis.politeness import HostPoliteness

logger = logging.getLogger(__name__)

#: Most expired leases one lease call puts back in the queue.
RECLAIM_BATCH = 1000


def none_done(reply: int | bytes | str) -> bool:
    """Whether a script answering how many requests it updated (fail, quarantine) refused
    this worker's answer: 0, the lease was not this worker's to answer."""
    return not int(reply)


def without_lease(meta: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``meta`` without this worker's lease id and politeness turn (never stored
    nor inherited)."""
    return {
        name: value
        for name, value in meta.items()
        if name not in (FRONTIER_LEASE_META, FRONTIER_TURN_META)
    }


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
        partitions: Partitions,
        outbox: Outbox,
        politeness: HostPoliteness,
        stats: StatsCollector,
        *,
        owner: str,
        lease_ttl: float,
        max_expiries: int,
        decoder: RequestDecoder = DEFAULT_DECODER,
        quarantine_cap: int = defaults.FRONTIER_QUARANTINE_MAX,
    ) -> None:
        self.partitions = partitions
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
        #: Leases taken from the book whose answer is being made (a page's last links
        #: keyed), not in the outbox yet (:meth:`keeping`).
        self._answering: set[str] = set()
        #: When the last heartbeat began (``time.monotonic()``).
        self._last_beat: float | None = None
        #: Leases whose request was overdue at the last :meth:`answer_dropped`.
        self._overdue: set[str] = set()
        #: Held leases whose download ended (a response came, or it failed).
        self._downloaded: set[str] = set()
        #: Of those, the ones not yet reported to Redis (:meth:`report_downloads`); the
        #: loop appends, the threads reporting take.
        self._unreported: deque[str] = deque()

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
        return self.take_delivery(self.lease_replies(count))

    def lease_replies(self, count: int) -> list[tuple[int, LeaseReply]]:
        """Run the lease script for up to ``count`` requests: on the next partition in turn,
        then on the following ones while fewer were leased than asked (every partition when
        the crawl is short of ready requests). Each partition's reply, with its index. Its
        leases are noted as arriving (heartbeated until :meth:`take_delivery` holds them):
        in a crawl this runs in the background thread, while the loop that takes the
        delivery may be busy for seconds. Raises ``REDIS_UNAVAILABLE`` errors when no
        partition answered.

        Downloads that ended since the last report are reported with it (each partition's
        with its lease, the others' after).
        """
        downloaded = self.partitions.by_partition(self._take_unreported())
        replies: list[tuple[int, LeaseReply]] = []
        for partition in self.partitions.lease_order():
            args = self.lease_args(count, downloaded.pop(partition, ()))
            try:
                reply = LeaseReply.from_reply(self.partitions.run(partition, "lease", args))
            except REDIS_UNAVAILABLE:
                if not replies:
                    raise
                break  # keep what was leased: this partition is asked again next time
            replies.append((partition, reply))
            self._arriving.update(self._lease_ids(partition, reply))
            count -= len(reply.requests)
            if count <= 0:
                break
        self._report(downloaded)
        return replies

    def lease_args(self, count: int, downloaded: Sequence[str] = ()) -> list[Any]:
        """The lease script's arguments for ``count`` requests, reporting the requests
        ``downloaded`` (ids of the partition asked)."""
        args = [self.owner, count, self.lease_ttl_ms, RECLAIM_BATCH, self.max_expiries]
        args += [self.decoder.max_bytes, self.quarantine_cap]
        return [*args, *self.politeness.limits.script_args(), *downloaded]

    def take_delivery(self, replies: list[tuple[int, LeaseReply]]) -> list[Request]:
        """Hold the requests the lease script's ``replies`` (one per partition asked, see
        :meth:`lease_replies`) hand out; note the rest."""
        parsed = [reply for _, reply in replies]
        reclaimed = sum(reply.requeued for reply in parsed)
        given_up = sum(reply.given_up for reply in parsed)
        recovered_batches = sum(reply.recovered_batches for reply in parsed)
        recovered = sum(reply.recovered for reply in parsed)
        # Sizes of the partitions asked: all of them unless requests were leased (not drained).
        self.shared_sizes = (
            sum(reply.queued for reply in parsed),
            sum(reply.leased for reply in parsed),
        )
        soonest = [reply.soonest_ms for reply in parsed if reply.soonest_ms >= 0]
        self.politeness.leased(
            sum(reply.skipped for reply in parsed),
            min(soonest, default=-1),
            sum(reply.hosts_waiting for reply in parsed),
        )
        quarantined = sum(reply.quarantined for reply in parsed)
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
        if quarantined:
            self.stats.inc_value("frontier/quarantined", quarantined)
            logger.warning(
                "Quarantined %d stored requests longer than FRONTIER_MAX_REQUEST_BYTES",
                quarantined,
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
        for partition, reply in replies:
            for row in reply.requests:  # a row's shape is of its partition's table
                lease = self.partitions.lease_id(partition, row.request_id)
                try:
                    request = self.decoder.decode(
                        row.record, self.spider, shape=row.shape, host=row.host
                    )
                except RequestNotLoadable as exc:
                    self.quarantine(lease, exc.reason)
                    continue
                request.meta[FRONTIER_LEASE_META] = lease
                request.meta[FRONTIER_TURN_META] = [leased_at, row.delay_ms / 1000]
                self._hold(lease, request)
                leased.append(request)
        for partition, reply in replies:  # held now, or answered
            self._arriving.difference_update(self._lease_ids(partition, reply))
        self.stats.inc_value("frontier/leased", len(leased))
        return leased

    def _lease_ids(self, partition: int, reply: LeaseReply) -> list[str]:
        """The lease ids the lease script's ``reply`` from ``partition`` grants."""
        return [self.partitions.lease_id(partition, row.request_id) for row in reply.requests]

    # --- which request holds which lease -----------------------------------------------

    def _hold(self, lease: str, request: Request) -> None:
        self._held[lease] = request.url
        self._downloaded.discard(lease)  # held again after its lease expired: downloads again

    def holds(self, lease: str | None) -> bool:
        """True if this worker holds ``lease`` (not answered yet)."""
        return lease in self._held

    def take(self, request: Request | None) -> str | None:
        """The id of ``request``'s lease if this worker holds it, now no longer held."""
        if request is None:
            return None
        lease = request.meta.get(FRONTIER_LEASE_META)
        return self.take_id(lease) if lease in self._held else None

    def take_replaced(self, request: Request) -> str | None:
        """The lease ``request`` takes over if it replaces a leased request still being
        downloaded (a redirect, a retry: before the original's response reached the
        engine), now no longer held; None for a page's link."""
        lease = request.meta.get(FRONTIER_LEASE_META)
        if lease in self._held and lease not in self._responded:
            return self.take_id(lease)
        return None

    @contextmanager
    def keeping(self, lease: str | None) -> Iterator[None]:
        """Keep extending ``lease``, taken from the book, while its answer is made (a page's
        links keyed and their records built, which takes a while for many): until it waits
        in the outbox, which the heartbeat extends too."""
        if lease is None:
            yield
            return
        self._answering.add(lease)
        try:
            yield
        finally:
            self._answering.discard(lease)

    def take_id(self, lease: str) -> str:
        del self._held[lease]
        self._responded.discard(lease)
        self._downloaded.discard(lease)
        self._left.pop(lease, None)
        return lease

    def responded(self, request: Request) -> bool:
        """A response for ``request`` reached the engine (Scrapy's ``response_received``):
        requests scheduled from now on that carry its lease id are its links, no longer its
        replacements; its page batch (or its callback's error) answers the lease. Its
        download is over (even one a middleware answered without downloading): True if that
        is news to report (:meth:`report_downloads`)."""
        lease = request.meta.get(FRONTIER_LEASE_META)
        if lease not in self._held:
            return False
        self._responded.add(lease)
        self._left.pop(lease, None)
        return self._download_ended(lease)

    def left_downloader(self, request: Request) -> bool:
        """``request`` left the downloader (Scrapy's ``request_left_downloader``): its
        response, or a replacement taking its lease over, or its failure follows at once,
        unless a downloader middleware drops it on the way (see :meth:`answer_dropped`).
        Its download is over: True if that is news to report (:meth:`report_downloads`)."""
        lease = request.meta.get(FRONTIER_LEASE_META)
        if lease not in self._held:
            return False
        if lease not in self._responded:
            self._left.setdefault(lease, time.monotonic())
        return self._download_ended(lease)

    def _download_ended(self, lease: str) -> bool:
        """Note that the download of the held ``lease`` ended; True the first time."""
        if lease in self._downloaded:
            return False
        self._downloaded.add(lease)
        self._unreported.append(lease)
        return True

    def _take_unreported(self) -> list[str]:
        """The leases whose download ended and was not reported yet, taken (any thread)."""
        taken = []
        while True:
            try:
                taken.append(self._unreported.popleft())
            except IndexError:
                return taken

    def report_downloads(self) -> None:
        """Tell Redis which leased requests' downloads ended since the last report, so
        their hosts have room for other downloads, this worker's or another's, while their
        pages are parsed (Scrapy's own per-domain limit counts downloads too). In a crawl
        this runs in a thread of its own (:attr:`RedisFrontier.reports`), woken as each
        download ends; a lease call reports what is waiting too."""
        self._report(self.partitions.by_partition(self._take_unreported()))

    def _report(self, downloaded: dict[int, list[str]]) -> None:
        """Run the downloaded script for ``downloaded`` (request ids by partition). A report
        Redis does not take is dropped: the lease's end releases the host's turn instead
        (Redis away: the outbox and the scheduler say so; anything else is said here)."""
        for partition, ids in downloaded.items():
            try:
                self.partitions.run(partition, "downloaded", [self.owner, *ids])
            except REDIS_UNAVAILABLE as exc:
                logger.debug("Cannot report %d downloads ended now: %s", len(ids), exc)
            except redis.RedisError as exc:
                logger.warning("Cannot report %d downloads ended: %s", len(ids), exc)

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
            logger.warning(
                "Request %s (lease %s) was dropped after its download", short(url), lease
            )
            reason = "dropped after its download (no response, no replacement, no error)"
            self.fail_lease(lease, reason, url=url, request_json=None)
        return len(dropped)

    # --- keeping and giving back -------------------------------------------------------

    def heartbeat(self) -> None:
        """Extend the leases of requests this worker is still working on, in every
        partition. In a crawl this runs in a thread of its own (:attr:`from_thread`), and
        what it finds goes back to the loop."""
        now = time.monotonic()
        if self._last_beat is not None:
            gap_ms = round((now - self._last_beat) * 1000)
            self.on_loop(self.stats.max_value, "frontier/heartbeat_longest_gap_ms", gap_ms)
        self._last_beat = now
        leases = self.to_extend()
        if not leases:
            return
        try:
            lost = self.extend(leases)
        except FrontierGone as exc:  # the crawl's state is gone: the worker stops
            self.on_loop(self.outbox.gone, exc)
            return
        except redis.RedisError as exc:
            self.on_loop(self.heartbeat_failed, exc)
            return
        self.on_loop(self.note_lost, lost)

    def on_loop(self, function: Callable[..., object], *args: Any) -> None:
        """``function(*args)`` on Twisted's loop (now, off a crawl's heartbeat thread)."""
        if not self.from_thread:
            function(*args)
            return
        from twisted.internet import reactor

        reactor.callFromThread(function, *args)  # type: ignore[attr-defined]

    def to_extend(self) -> list[str]:
        """The leases the heartbeat extends: every lease this worker still works on and
        has not found lost, whether its delivery is on its way to the loop, its request is
        buffered, queued in a downloader slot, downloading or being handled, or its answer
        waits in the outbox (a batch sent again after a stale answer included), or is being
        made (:meth:`keeping`). Reads copies, so the heartbeat thread may call it while the
        other threads change them."""
        lost = set(self._lost)
        working = [*set(self._arriving), *list(self._held), *set(self._answering)]
        working += self.outbox.leases()
        return [lease for lease in dict.fromkeys(working) if lease not in lost]

    def extend(self, leases: list[str]) -> list[str]:
        """Extend ``leases`` (the heartbeat script, once per partition: lease ids carry
        theirs); those this worker no longer holds. Raises Redis' errors."""
        lost = []
        for partition, ids in self.partitions.by_partition(leases).items():
            args = [self.owner, self.lease_ttl_ms, *ids]
            replies = self.partitions.run(partition, "heartbeat", args)
            lost += [self.partitions.lease_id(partition, request_id) for request_id in replies]
        return lost

    def note_lost(self, lost: list[Any]) -> None:
        """Note the leases the heartbeat found taken over, among those still held or whose
        answer was not sent yet (an answer sent meanwhile released its lease: not lost)."""
        unanswered = {*self._arriving, *self._held, *self._answering}
        unanswered.update(self.outbox.leases(unsent=True))
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
            released = sum(
                int(self.partitions.run(partition, "release", [self.owner, *ids]))
                for partition, ids in self.partitions.by_partition(leases).items()
            )
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

        def counted(_: int) -> None:
            self.stats.inc_value("frontier/failed")
            logger.info("Request %s failed for good: %s", short(url or lease), short(reason))

        on_reply = self.reply_handler(lease, refused=none_done, accepted=counted)

        partition, request_id = self.partitions.split(lease)
        args = [self.owner, request_id, url or request_id, record]
        deliver = partial(self.partitions.run, partition, "fail", args)
        self.outbox.send(Answer("fail", deliver, on_reply, after, lease=lease))

    def quarantine(self, lease: str, reason: str) -> None:
        """The leased request ``lease`` does not decode: put it in quarantine with
        ``reason`` (its stored text stays in Redis, the script copies it) and release it."""
        self.stats.inc_value("frontier/quarantined")
        logger.warning("Quarantined stored request %s: %s", lease, reason)

        on_reply = self.reply_handler(lease, refused=none_done)

        partition, request_id = self.partitions.split(lease)
        args = [self.owner, request_id, reason, self.quarantine_cap]
        deliver = partial(self.partitions.run, partition, "quarantine", args)
        self.outbox.send(Answer("quarantine", deliver, on_reply, lease=lease))

    def reply_handler(
        self,
        lease: str | None,
        *,
        refused: Callable[[Any], bool],
        accepted: Callable[[Any], None] | None = None,
    ) -> Callable[[Any], bool]:
        """The ``on_reply`` of an :class:`Answer` for ``lease``: a reply that ``refused``
        says is a refusal is noted (:meth:`refused`) and dropped (False); any other goes to
        ``accepted`` (True)."""

        def on_reply(reply: Any) -> bool:
            if refused(reply):
                self.refused(lease)
                return False
            if accepted is not None:
                accepted(reply)
            return True

        return on_reply

    def refused(self, lease: str | None) -> None:
        """Redis refused this worker's answer for ``lease``."""
        self.stats.inc_value("frontier/ack_refused")
        logger.info(
            "Answer for lease %s refused: it expired and another worker took the request "
            "over (and fetches it again), or it was answered already; dropped",
            lease,
        )
