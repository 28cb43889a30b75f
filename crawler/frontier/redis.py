"""The shared frontier: a priority queue of requests in Redis, leased to workers.

Every worker of one crawl (``scrapy crawl SPIDER -s REDIS_URL=...``) shares, under one key
prefix (``FRONTIER_KEY_PREFIX``, one Redis Cluster hash tag):

- a queue of serialized requests (JSON) ordered by priority, then first in, first out;
- the RedisBloom seen filter of their dedupe keys: one key beside the queue, or
  ``SEEN_FILTER_SHARDS`` keys spread over the cluster's masters (past one key's 512 MiB);
- leases: a request handed to a worker stays in Redis, owned by that worker until its
  lease expires (``FRONTIER_LEASE_TTL`` seconds on the Redis server's clock, extended by the
  worker's heartbeat every third of it);
- a record of the requests that failed for good, with the reason.

Each step is one Lua script, so it is atomic (``crawler/frontier/*.lua``):

- **admit**: mark the new requests' keys seen and queue them, and release the lease of the
  request whose handling produced them (the parent). A lease is released only once every
  request it produced is in the frontier: a worker killed at any moment loses nothing, its
  lease expires and another worker fetches the page again.
- With a sharded filter the keys live on other slots than the queue, so admitting a batch
  whose keys need checking takes three steps, in an order that never loses a request:
  **stage** the batch in the frontier under a lease (the parent's, or one of its own), mark
  its keys in the shards, then **commit**: queue the new ones, drop the batch, release the
  lease. A worker killed between the steps leaves a staged batch whose lease expires; the
  next lease call queues the whole batch (``frontier/staged_recovered``): a key marked seen
  always has its request staged or queued, at the cost of a few pages fetched twice after
  a crash. A commit arriving after its lease expired does the same (see ``commit.lua``).
- **lease**: requeue expired leases (``frontier/reclaimed``), then lease the best requests
  whose host is ready: global per-host politeness, see :mod:`crawler.frontier.politeness`.
  A request whose lease expired ``FRONTIER_MAX_EXPIRIES`` times is recorded as failed
  instead (``frontier/given_up``): a page that kills every worker fetching it must not take
  the whole crawl down, one worker after the other.
- **heartbeat**, **fail** (record the reason, release), **release** (give back on shutdown).

An answer (admit or fail) from a worker whose lease expired is still accepted if nobody has
leased the request again; if another worker holds it, the answer is refused and dropped
(``frontier/ack_refused``). That is safe: the other worker fetches the same page and admits
the same links. So each page is fetched at least once, and twice only when its lease
expired while it was being fetched (worker killed, or stalled longer than the lease).

Redis being unreachable or refusing writes (restart, AOF loading, failover, out of memory)
never crashes the crawl nor drops an answer: answers wait in order in a local outbox,
retried with backoff until Redis takes them. A script is never half-applied: Redis refuses
it before its first write, or runs it to the end.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import socket
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry
from scrapy import Request, signals

from crawler.frontier import META_CHECKED, META_KEY
from crawler.frontier.keys import RequestKeyer, was_checked
from crawler.frontier.lua import script_source
from crawler.frontier.politeness import (
    HOST_META,
    TURN_META,
    HostLimits,
    HostPoliteness,
    politeness_key,
)
from crawler.frontier.serialize import (
    RequestNotLoadable,
    RequestNotSerializable,
    request_from_json,
    request_to_json,
)
from crawler.redis_client import describe, redis_from_url, require_bloom
from crawler.seen.layers import OlderLayers, redis_layers
from crawler.seen.redis import REPLY_TTL
from crawler.seen.sharded import ShardedBloomSeenFilter, seen_filter_from_settings

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: ``request.meta`` key holding the id of the lease a request was handed out under.
LEASE_META = "frontier_lease"
#: ``request.meta`` flag: already queued in the shared frontier, the scheduler skips it.
QUEUED_META = "frontier_queued"

#: Errors that mean "Redis cannot take this right now" (down, restarting, loading its AOF,
#: failing over, out of memory): retry later, never drop what it was asked.
REDIS_UNAVAILABLE = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)
#: The frontier's own client retries briefly (the reactor waits meanwhile); longer outages
#: are ridden out by the outbox and the scheduler's backoff instead.
CLIENT_RETRY_ATTEMPTS = 2
#: Seconds between attempts to deliver the outbox while Redis is unreachable, doubling.
OUTBOX_RETRY_MIN, OUTBOX_RETRY_MAX = 0.05, 2.0
#: The filter's parameters admit.lua takes, in its order.
BLOOM_ARGS = ("capacity", "error_rate", "expansion")
#: Most expired leases one lease call puts back in the queue.
RECLAIM_BATCH = 1000

#: The frontier's Lua scripts (``<name>.lua``), each one atomic step.
SCRIPTS = ("admit", "stage", "commit", "lease", "heartbeat", "fail", "release", "counts")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _without_lease(meta: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``meta`` without this worker's lease id and politeness turn (never stored
    nor inherited)."""
    return {name: value for name, value in meta.items() if name not in (LEASE_META, TURN_META)}


def _must_check(request: Request) -> bool:
    """True if ``request``'s key is to be checked against the seen filter."""
    return not (request.dont_filter or was_checked(request))


def _warn_about_setup(client: redis.Redis) -> None:
    """Warn about settings that would lose the crawl."""
    try:
        persistence = client.info("persistence")
    except redis.RedisError:
        return  # INFO may be disabled (managed Redis): nothing to check
    if persistence.get("aof_enabled") == 0:
        logger.warning(
            "Redis at %s has no append-only file: a Redis restart loses what changed since "
            "its last snapshot (queued requests, leases, seen keys). Turn on appendonly.",
            describe(client),
        )


@dataclass(frozen=True)
class FrontierKeys:
    """The Redis keys of one crawl's frontier, all under one prefix (and hash tag)."""

    queue: str
    requests: str
    scores: str
    leases: str
    owners: str
    seq: str
    seen: str
    failed: str
    expiries: str
    staged: str
    hosts: str
    in_flight: str
    host_next: str
    host_busy: str
    host_delay: str

    @classmethod
    def for_prefix(cls, prefix: str) -> Self:
        return cls(**{field.name: f"{prefix}:{field.name}" for field in fields(cls)})

    @property
    def prefix(self) -> str:
        """The crawl's prefix (with its hash tag), for keys named per item."""
        return self.queue.removesuffix(":queue")

    @property
    def all(self) -> list[str]:
        """Every key, in the order the Lua scripts expect them as ``KEYS``."""
        return [getattr(self, field.name) for field in fields(self)]


def worker_id() -> str:
    """An owner id for this process's leases: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def failure_reason(exception: BaseException) -> str:
    """A short, readable reason for a request that failed with ``exception``."""
    text = str(exception).strip()
    name = type(exception).__name__
    return f"{name}: {text}"[:300] if text else name


@dataclass
class _Answer:
    """One update waiting in the outbox: how to deliver it and what to do with its reply."""

    #: What it is, for the log.
    name: str
    #: Sends it; raises ``REDIS_UNAVAILABLE`` errors to be called again later.
    deliver: Callable[[], Any]
    #: Handles the reply; returns whether the update changed anything.
    on_reply: Callable[[Any], bool]
    #: None until delivered, then what ``on_reply`` returned.
    outcome: bool | None = None


class _StagedAdmission:
    """Delivers one batch in the three steps a sharded filter needs (module docstring):
    stage it, mark its checked keys in the shards, commit it. Called again after a
    ``REDIS_UNAVAILABLE`` error, it resumes at the step that failed; a retried step repeats
    harmlessly (the stage and the shards' answers are kept under the batch's id).

    Returns what the admit script returns: per request "1" if queued, else "0"; or
    "refused" when the parent's lease may not be released by this worker (nothing done).
    """

    def __init__(
        self,
        frontier: RedisFrontier,
        parent: str | None,
        checked_keys: list[str],
        checks: list[bool],
        rows: list[Any],
    ) -> None:
        self.frontier = frontier
        self.parent = parent
        self.checked_keys = checked_keys
        self.checks = checks
        self.rows = rows
        self.batch = uuid.uuid4().hex
        #: The lease holding the staged batch, once step 1 is done.
        self.lease: str | None = None
        #: The shards' answers for ``checked_keys``, once step 2 is done.
        self.fresh: list[bool] | None = None

    def __call__(self) -> str:
        frontier = self.frontier
        if self.lease is None:
            args = [frontier.owner, self.parent or "", self.batch, frontier.lease_ttl_ms]
            reply = _text(frontier._run("stage", [*args, *self.rows]))
            if reply == "refused":
                return reply
            self.lease = reply
        if self.fresh is None:
            self.fresh = frontier.seen.add_many(
                self.checked_keys, batch_id=self.batch, reply_ttl=frontier.seen_reply_ttl
            )
        answers = iter(self.fresh)
        flags = "".join("1" if not check or next(answers) else "0" for check in self.checks)
        status = _text(frontier._run("commit", [self.lease, self.batch, flags]))
        if status == "late":
            frontier.stats.inc_value("frontier/staged_recovered", len(self.checks))
            logger.warning(
                "Batch %s committed after its lease expired: all its %d requests queued "
                "(some may be fetched twice)",
                self.batch,
                len(self.checks),
            )
            return "1" * len(self.checks)
        return flags if status == "ok" else status


class RedisFrontier:
    """The frontier of one crawl in Redis, as seen by one worker (see the module docstring).

    Implements :class:`crawler.frontier.Frontier` (``admit``, ``fail``, ``close``) and what
    :class:`crawler.frontier.scheduler.RedisScheduler` needs: :meth:`enqueue`,
    :meth:`lease`, :meth:`heartbeat`, :meth:`release_all`, :meth:`is_drained`.

    Stats: ``frontier/enqueued``, ``frontier/leased``, ``frontier/reclaimed``,
    ``frontier/given_up`` (lease expired ``FRONTIER_MAX_EXPIRIES`` times),
    ``frontier/acked``, ``frontier/ack_refused``, ``frontier/failed``,
    ``frontier/unserializable``, ``frontier/unloadable``, ``frontier/lease_lost``,
    ``frontier/released``, ``frontier/unanswered``, ``frontier/redis_unavailable``,
    ``frontier/errors``, ``frontier/staged_recovered`` (requests of staged batches queued
    whole: their worker died between the steps, or committed after its lease expired); the
    seen-filter verdicts are counted as in the embedded frontier (``seen/new``, ...).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: FrontierKeys,
        seen: ShardedBloomSeenFilter,
        keyer: RequestKeyer,
        stats: StatsCollector,
        *,
        lease_ttl: float = 60.0,
        max_expiries: int = 5,
        spider: Spider | None = None,
        owner: str | None = None,
        limits: HostLimits | None = None,
    ) -> None:
        if lease_ttl <= 0:
            raise ValueError(f"FRONTIER_LEASE_TTL must be positive, got {lease_ttl}")
        if max_expiries < 1:
            raise ValueError(f"FRONTIER_MAX_EXPIRIES must be at least 1, got {max_expiries}")
        self.client = client
        self.keys = keys
        self.seen = seen
        self.keyer = keyer
        self.stats = stats
        self.lease_ttl = lease_ttl
        self.max_expiries = max_expiries
        self.spider = spider
        self.owner = owner or worker_id()
        self.politeness = HostPoliteness(client, keys, limits or HostLimits(), stats)
        self._scripts = {name: client.register_script(script_source(name)) for name in SCRIPTS}
        # Leases this worker holds, by id; the request objects are held weakly: a request
        # dropped without an answer is noticed (see _unanswered) instead of leaking a lease.
        self._held: dict[str, weakref.finalize] = {}
        self._alive: weakref.WeakValueDictionary[str, Request] = weakref.WeakValueDictionary()
        self._responded: set[str] = set()
        self._lost: set[str] = set()
        self._outbox: deque[_Answer] = deque()
        self._flushing = False
        self._retry_delay = OUTBOX_RETRY_MIN
        self._retry_call: Any = None
        self._logged_unserializable = False
        #: Read-only layers of the seen filter (after `scrapy rebuild-filter`).
        self.older = OlderLayers([])

    @property
    def lease_ttl_ms(self) -> int:
        return int(self.lease_ttl * 1000)

    @property
    def seen_reply_ttl(self) -> int:
        """Seconds each filter shard keeps its answer to a staged batch, for a retry: past
        the lease's expiry (after which a commit distrusts the answers, see commit.lua),
        plus a margin for the nodes' clocks."""
        return math.ceil(self.lease_ttl) + REPLY_TTL

    # --- construction ----------------------------------------------------------------

    @classmethod
    def from_settings(
        cls,
        settings: BaseSettings,
        spider_name: str,
        stats: StatsCollector,
        spider: Spider | None = None,
    ) -> Self:
        """The frontier of ``spider_name`` at ``REDIS_URL``, on its own connection."""
        retry = Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.05), CLIENT_RETRY_ATTEMPTS)
        prefix = settings["FRONTIER_KEY_PREFIX"] % {"spider": spider_name}
        client = redis_from_url(settings["REDIS_URL"], retry=retry)
        try:
            require_bloom(client)
            keys = FrontierKeys.for_prefix(prefix)
            keyer = RequestKeyer.from_settings(stats, settings)
            # After `scrapy rebuild-filter`: the current generation and the older layers.
            keys, older = redis_layers(client, keys, settings, keyer.rules)
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
            )
            frontier.older = older
        except BaseException:
            client.close()
            raise
        _warn_about_setup(client)
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
        crawler.signals.connect(frontier.close, signal=signals.spider_closed)
        return frontier

    # --- admitting requests ----------------------------------------------------------

    def admit(self, parent: Request | None, children: Sequence[Request]) -> list[Request]:
        """Queue the new ones among ``children`` in Redis and, in the same atomic step,
        release ``parent``'s lease (when this worker holds it).

        Returns the new ones, as the embedded frontier does, so callers learn the verdict;
        they are already queued in Redis and marked ``meta[QUEUED_META]``, so when they are
        handed to the engine anyway the scheduler does not queue them again. While Redis is
        unreachable the verdict is unknown and every request is returned.
        """
        return self._admit(self._take_lease(parent), children)

    def enqueue(self, request: Request) -> bool:
        """Admit a request the engine scheduled directly (start requests, ``dont_filter``
        links, and requests that replace a leased one still being downloaded: redirects,
        retries). A replacement takes over its original's lease atomically.

        Returns False if the request was dropped (a known duplicate, or no valid key)."""
        if request.meta.get(QUEUED_META):
            return True
        lease = request.meta.get(LEASE_META)
        parent = None
        if lease in self._held and lease not in self._responded:
            parent = self._take_lease_id(lease)
        return bool(self._admit(parent, [request]))

    def _admit(self, parent: str | None, children: Sequence[Request]) -> list[Request]:
        """Admit ``children`` in one atomic admit script, or in the three steps of a sharded
        filter when some of their keys need checking; the new requests (all of them while
        Redis is away)."""
        pairs = self.older.drop_seen(self.keyer.keyed(children), self.keyer, _must_check)
        entries: list[tuple[Request, str]] = []
        checks: list[bool] = []
        rows: list[Any] = []  # per entry: queue score, JSON
        for request, key in pairs:
            try:
                text = request_to_json(self._stored_form(request, key), self.spider)
            except RequestNotSerializable as exc:
                self._count_unserializable(request, exc)
                continue
            entries.append((request, key))
            checks.append(_must_check(request))
            rows += [-request.priority, text]
        if parent is None and not entries:
            return []
        admitted: list[Request] = []

        def on_reply(reply: bytes | str) -> bool:
            flags = _text(reply)
            if flags == "refused":
                self._count_refused(parent)
                return False
            if parent is not None:
                self.stats.inc_value("frontier/acked")
            fresh = [flag == "1" for flag in flags]
            self.stats.inc_value("frontier/enqueued", sum(fresh))
            admitted.extend(self.keyer.verdicts(entries, fresh))
            return True

        if len(self.seen.shards) > 1 and any(checks):
            checked_keys = [key for (_, key), check in zip(entries, checks, strict=True) if check]
            staged = _StagedAdmission(self, parent, checked_keys, checks, rows)
            answer = _Answer("stage+commit", staged, on_reply)
        else:
            bloom = self.seen.parameters  # to recreate a lost filter (admit.lua)
            args = [self.owner, parent or "", *(bloom[name] for name in BLOOM_ARGS)]
            for index, (_, key) in enumerate(entries):
                args += ["1" if checks[index] else "0", key, *rows[2 * index : 2 * index + 2]]
            answer = _Answer("admit", partial(self._run, "admit", args), on_reply)
        self._send(answer)
        if answer.outcome is None:  # waiting for Redis: the verdict is not known yet
            admitted = [request for request, _ in entries]
        for request in admitted:
            request.meta[QUEUED_META] = True
        return admitted

    def _run(self, script: str, args: Sequence[Any]) -> Any:
        """Run one of the frontier's scripts over its keys."""
        return self._scripts[script](keys=self.keys.all, args=args)

    @staticmethod
    def _stored_form(request: Request, key: str) -> Request:
        """``request`` as it is stored: with its key, without this worker's lease id."""
        meta = _without_lease(request.meta)
        meta.pop(QUEUED_META, None)
        meta[META_KEY] = key
        meta[HOST_META] = politeness_key(request)
        # The URL, not True: a copy of the request with another URL is checked again.
        meta[META_CHECKED] = request.url
        return request.replace(meta=meta)

    # --- leases ----------------------------------------------------------------------

    def lease(self, count: int) -> list[Request]:
        """Lease up to ``count`` requests (best priority first, of hosts ready by
        politeness) to this worker, after putting expired leases back in the queue. Raises
        ``REDIS_UNAVAILABLE`` errors."""
        args = [self.owner, count, self.lease_ttl_ms, RECLAIM_BATCH, self.max_expiries]
        reply = self._run("lease", [*args, *self.politeness.limits.script_args()])
        reclaimed, given_up, triples = int(reply[0]), int(reply[1]), reply[7:]
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
        if given_up:
            self.stats.inc_value("frontier/given_up", given_up)
            logger.warning(
                "Gave up %d requests whose lease expired %d times (recorded as failed)",
                given_up,
                self.max_expiries,
            )
        leased = []
        leased_at = time.monotonic()
        for lease, text, delay in zip(triples[::3], triples[1::3], triples[2::3], strict=True):
            lease = _text(lease)
            try:
                request = request_from_json(text, self.spider)
            except RequestNotLoadable as exc:
                self.stats.inc_value("frontier/unloadable")
                logger.error("Cannot load leased request %s: %s", lease, exc)
                self._fail_lease(lease, f"not loadable: {exc}", url="", request_json=_text(text))
                continue
            request.meta[LEASE_META] = lease
            request.meta[TURN_META] = [leased_at, int(delay) / 1000]
            self._hold(lease, request)
            leased.append(request)
        self.stats.inc_value("frontier/leased", len(leased))
        return leased

    def _hold(self, lease: str, request: Request) -> None:
        self._alive[lease] = request
        self._held[lease] = weakref.finalize(request, self._unanswered, lease, request.url)
        self._held[lease].atexit = False

    def _take_lease(self, request: Request | None) -> str | None:
        """The id of ``request``'s lease if this worker holds it, now no longer held."""
        if request is None:
            return None
        lease = request.meta.get(LEASE_META)
        return self._take_lease_id(lease) if lease in self._held else None

    def _take_lease_id(self, lease: str) -> str:
        self._held.pop(lease).detach()
        self._alive.pop(lease, None)
        self._responded.discard(lease)
        self._lost.discard(lease)
        return lease

    def responded(self, request: Request) -> None:
        """A response for ``request`` reached the engine: requests scheduled from now on
        that carry its lease id are its links, no longer its replacements."""
        lease = request.meta.get(LEASE_META)
        if lease in self._held:
            self._responded.add(lease)

    def _unanswered(self, lease: str, url: str) -> None:
        """A leased request vanished without an answer (e.g. ``IgnoreRequest`` raised while
        its response was processed): record it as failed rather than refetch it forever.
        Runs from the garbage collector, so it only queues the update."""
        if lease not in self._held:
            return
        self._take_lease_id(lease)
        self.stats.inc_value("frontier/unanswered")
        logger.warning("Request %s (lease %s) was dropped without an answer", url, lease)
        self._fail_lease(lease, "dropped without an answer", url=url, request_json=None, now=False)

    def heartbeat(self) -> None:
        """Extend the leases of requests this worker is still working on."""
        leases = [lease for lease in list(self._alive) if lease not in self._lost]
        if not leases:
            return
        try:
            lost = self._run("heartbeat", [self.owner, self.lease_ttl_ms, *leases])
        except redis.RedisError as exc:
            self.stats.inc_value("frontier/redis_unavailable")
            logger.warning("Cannot extend %d leases now: %s", len(leases), exc)
            return
        if lost:
            self._lost.update(_text(lease) for lease in lost)
            self.stats.inc_value("frontier/lease_lost", len(lost))
            logger.warning(
                "%d leases expired before their heartbeat (worker stalled or Redis away "
                "longer than FRONTIER_LEASE_TTL); other workers may fetch them again",
                len(lost),
            )

    def release_all(self) -> int:
        """Give back every lease this worker holds (on shutdown), so other workers need
        not wait for them to expire. Returns how many went back to the queue."""
        leases = [self._take_lease_id(lease) for lease in list(self._held)]
        if not leases:
            return 0
        try:
            released = int(self._run("release", [self.owner, *leases]))
        except REDIS_UNAVAILABLE as exc:
            logger.warning("Cannot give back %d leases (they will expire): %s", len(leases), exc)
            return 0
        self.stats.inc_value("frontier/released", released)
        return released

    # --- failures --------------------------------------------------------------------

    def fail(self, request: Request, reason: str) -> None:
        """``request`` failed for good: record it with ``reason`` and release its lease."""
        lease = self._take_lease(request)
        if lease is None:
            return
        try:
            stored: str | None = request_to_json(
                request.replace(meta=_without_lease(request.meta)), self.spider
            )
        except RequestNotSerializable:
            stored = None
        self._fail_lease(lease, reason, url=request.url, request_json=stored)

    def _fail_lease(
        self, lease: str, reason: str, *, url: str, request_json: str | None, now: bool = True
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
            self._count_refused(lease)
            return False

        deliver = partial(self._run, "fail", [self.owner, lease, url or lease, record])
        self._send(_Answer("fail", deliver, on_reply), now=now)

    # --- delivery of answers ---------------------------------------------------------

    def _send(self, answer: _Answer, now: bool = True) -> None:
        """Deliver ``answer`` after those already waiting; keep it if Redis is away."""
        self._outbox.append(answer)
        if now:
            self.flush()
        else:
            self._schedule_flush(0)

    def flush(self) -> bool:
        """Deliver waiting answers in order; True when none is left waiting."""
        if self._flushing:
            return not self._outbox
        self._flushing = True
        try:
            while self._outbox:
                answer = self._outbox[0]
                try:
                    reply = answer.deliver()
                except REDIS_UNAVAILABLE as exc:
                    self.stats.inc_value("frontier/redis_unavailable")
                    if self._retry_delay == OUTBOX_RETRY_MIN:
                        logger.warning(
                            "Redis unavailable (%s); %d frontier updates wait and are retried",
                            exc,
                            len(self._outbox),
                        )
                    self._schedule_flush(self._retry_delay)
                    self._retry_delay = min(self._retry_delay * 2, OUTBOX_RETRY_MAX)
                    return False
                except redis.RedisError:
                    # A reply no retry can change (a bug, or a key of the wrong type):
                    # say so loudly, keep crawling.
                    logger.exception("Frontier update %s failed; dropped", answer.name)
                    self.stats.inc_value("frontier/errors")
                    self._outbox.popleft()
                    continue
                self._outbox.popleft()
                answer.outcome = answer.on_reply(reply)
            if self._retry_delay != OUTBOX_RETRY_MIN:
                logger.info("Redis is back; frontier updates delivered")
            self._retry_delay = OUTBOX_RETRY_MIN
            return True
        finally:
            self._flushing = False

    def _schedule_flush(self, delay: float) -> None:
        if self._retry_call is not None and self._retry_call.active():
            return
        from twisted.internet import reactor

        self._retry_call = reactor.callLater(delay, self.flush)  # type: ignore[attr-defined]

    @property
    def pending_answers(self) -> int:
        """Answers not yet delivered to Redis."""
        return len(self._outbox)

    # --- state -----------------------------------------------------------------------

    def is_drained(self) -> bool:
        """True when the whole crawl is done: nothing queued, no lease outstanding in any
        worker, no answer of this worker waiting. Raises ``REDIS_UNAVAILABLE`` errors."""
        if self._outbox or self._held:
            return False
        queued, leased, _failed = self._run("counts", [])
        return queued == 0 and leased == 0

    def counts(self) -> dict[str, int]:
        """Sizes of the shared state: queued, leased and failed requests, keys seen."""
        queued, leased, failed = self._run("counts", [])
        return {
            "queued": queued,
            "leased": leased,
            "failed": failed,
            "seen": sum(info.items_inserted for info in self.seen.info() if info is not None),
        }

    def failures(self) -> dict[str, dict[str, Any]]:
        """The failed requests' records, by URL."""
        raw = self.client.hgetall(self.keys.failed)
        return {_text(url): json.loads(record) for url, record in raw.items()}

    # --- bookkeeping -----------------------------------------------------------------

    def _count_refused(self, lease: str | None) -> None:
        self.stats.inc_value("frontier/ack_refused")
        logger.info(
            "Answer for lease %s refused: it expired and another worker took the request "
            "over (and fetches it again), or it was answered already; dropped",
            lease,
        )

    def _count_unserializable(self, request: Request, exc: RequestNotSerializable) -> None:
        self.stats.inc_value("frontier/unserializable")
        level = logging.DEBUG if self._logged_unserializable else logging.WARNING
        self._logged_unserializable = True
        logger.log(level, "Request %s cannot be queued (dropped): %s", request, exc.reason)

    def close(self) -> None:
        """Deliver what can be delivered, then release the connection."""
        if not self.flush():
            logger.error(
                "%d frontier updates could not be delivered before closing; their leases "
                "will expire and the pages be fetched again",
                len(self._outbox),
            )
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self.client.close()
