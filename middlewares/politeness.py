"""Downloader middlewares: the worker's side of global per-host politeness (shared frontier),
and crawl-wide backoff from hosts that answer 429 or 503 (both modes)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.http import Response
from scrapy.utils.asyncio import sleep
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached

from bloom_frontier.frontier.politeness import (
    BACKOFF_STATUSES,
    BACKOFF_STRIKES,
    STALE_TURN,
    backoff_pause,
    pause_slot,
    politeness_key,
    retry_after,
)
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.meta import FRONTIER_ROBOTS_CLAIM_META, FRONTIER_TURN_META
from bloom_frontier.metrics import HostClasses
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.robotstxt import RobotParser
    from twisted.python.failure import Failure


logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds between looks for the robots.txt another worker is fetching.
ROBOTS_POLL = 0.1


class GlobalPolitenessMiddleware:
    """Keeps a worker's downloads on the turns the shared frontier gives each host
    (:mod:`bloom_frontier.frontier.politeness`):

    - each robots.txt is fetched by one worker for all of them: the first worker to need it
      claims the fetch and shares the answer through Redis, the others wait for that copy
      (``robotstxt/shared_fetch``, ``robotstxt/shared_copy``). Without a copy after the
      longest a fetch may take (``DOWNLOAD_TIMEOUT`` per attempt, retries included), a
      worker fetches it itself;
    - a leased request takes a new turn before it is sent (``frontier/politeness_new_turns``,
      also by host class: :class:`bloom_frontier.metrics.HostClasses`)
      when its host's robots.txt was fetched for it (that fetch used the request's turn), or
      when it waited in the worker longer than ``STALE_TURN`` (its turn went by): it never
      comes right after another request to its host;
    - the ``Crawl-delay`` of each robots.txt Scrapy's ``RobotsTxtMiddleware`` parses is
      recorded in Redis, for every worker's leases (capped at ``FRONTIER_MAX_CRAWL_DELAY``).
      Its user agent is the one ``RobotsTxtMiddleware`` checks: ``ROBOTSTXT_USER_AGENT``,
      else the request's ``User-Agent``.

    Installed by the frontier's add-on when ``REDIS_URL`` is set, right after
    ``RobotsTxtMiddleware`` (whose wait it must see).
    """

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        if not settings.get("REDIS_URL"):
            raise NotConfigured
        self.crawler = crawler
        self.robots_user_agent: str | None = settings.get("ROBOTSTXT_USER_AGENT")
        self.default_user_agent: str = settings.get("USER_AGENT")
        attempts = 1 + max(0, settings.getint("RETRY_TIMES")) * settings.getbool("RETRY_ENABLED")
        #: Longest a worker fetching a robots.txt for all may take.
        self.robots_fetch_time = settings.getfloat("DOWNLOAD_TIMEOUT") * attempts + 5
        #: Hosts whose robots.txt this worker fetched on a leased request's turn.
        self._turn_used: set[str] = set()
        self.host_classes = HostClasses.from_settings(settings)
        if settings.getbool("ROBOTSTXT_OBEY"):
            crawler.signals.connect(self.robots_parsed, signal=signals.robots_parsed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @property
    def frontier(self) -> RedisFrontier:
        frontier = services_of(self.crawler).frontier
        assert isinstance(frontier, RedisFrontier)
        return frontier

    def _count(self, name: str) -> None:
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(name)

    async def process_request(self, request: Request) -> Response | None:
        if request.meta.get(FRONTIER_TURN_META):
            await self._keep_turn(request)
            return None
        if _is_robots_txt(request) and FRONTIER_ROBOTS_CLAIM_META not in request.meta:
            return await self._robots_txt(request)
        return None  # (a redirect of a claimed robots.txt keeps the claim)

    async def _redis(self, function: Callable[..., T], *args: Any) -> T:
        return await call_redis(self.frontier, function, *args)

    async def process_response(self, request: Request, response: Response) -> Response:
        url = request.meta.pop(FRONTIER_ROBOTS_CLAIM_META, None)
        if url is not None:
            share = self.frontier.politeness.share_robots_txt
            try:
                if await self._redis(share, url, response.status, response.body):
                    self._count("robotstxt/shared_fetch")
            except redis.RedisError as exc:
                logger.warning("Cannot share the robots.txt of %s: %s", url, exc)
        return response

    async def process_exception(self, request: Request, exception: Exception) -> None:
        url = request.meta.pop(FRONTIER_ROBOTS_CLAIM_META, None)
        if url is not None:
            try:
                await self._redis(self.frontier.politeness.unclaim_robots_txt, url)
            except redis.RedisError as exc:
                logger.warning("Cannot end the claim on the robots.txt of %s: %s", url, exc)

    async def _robots_txt(self, request: Request) -> Response | None:
        """The robots.txt another worker shared, or None after claiming its fetch (or
        giving up waiting for it, or when Redis is away): the download goes ahead."""
        politeness, owner = self.frontier.politeness, self.frontier.owner
        deadline = time.monotonic() + self.robots_fetch_time
        try:
            while (shared := await self._redis(politeness.shared_robots_txt, request.url)) is None:
                claim = politeness.claim_robots_txt
                if await self._redis(claim, request.url, owner, self.robots_fetch_time):
                    request.meta[FRONTIER_ROBOTS_CLAIM_META] = request.url
                    break
                if time.monotonic() >= deadline:
                    break
                await sleep(ROBOTS_POLL)
        except redis.RedisError as exc:
            logger.warning("Cannot share the robots.txt %s (fetching it): %s", request.url, exc)
            shared = None
        if shared is None:
            self._turn_used.add(politeness_key(request))
            return None
        self._count("robotstxt/shared_copy")
        status, body = shared
        return Response(request.url, status=status, body=body, request=request, flags=["shared"])

    async def _keep_turn(self, request: Request) -> None:
        """Take a new turn at the request's host if its lease's turn was used or went by."""
        leased_at, delay = request.meta[FRONTIER_TURN_META]
        host = politeness_key(request)
        turn_used = host in self._turn_used
        self._turn_used.discard(host)
        if delay <= 0 or (not turn_used and time.monotonic() - leased_at <= STALE_TURN):
            return
        await new_turn(self.frontier, request)
        assert self.crawler.stats is not None
        self.host_classes.count(self.crawler.stats, "frontier/politeness_new_turns", host)

    def robots_parsed(self, robotparser: RobotParser, request: Request) -> None:
        """A robots.txt was parsed for ``request``'s host: record its crawl delay."""
        user_agent = self.robots_user_agent or request.headers.get(
            b"User-Agent", self.default_user_agent
        )
        host = politeness_key(request)
        record, delay = (
            self.frontier.politeness.record_crawl_delay,
            robotparser.crawl_delay(user_agent),
        )

        def failed(failure: Failure) -> None:
            failure.trap(redis.RedisError)
            # Every worker parsing the same robots.txt records it too.
            logger.warning("Cannot record the Crawl-delay of %s now: %s", host, failure.value)

        record = self.frontier.politeness.record_crawl_delay
        self.frontier.call(record, host, delay).addErrback(failed)


async def call_redis(frontier: RedisFrontier, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` from the frontier's background thread (the loop never waits on
    Redis)."""
    return await maybe_deferred_to_future(frontier.call(function, *args))


async def new_turn(frontier: RedisFrontier, request: Request) -> None:
    """Wait for a new turn at the host of ``request``, a leased request whose turn was
    used or went by, and take it (on Redis trouble, send it as it is)."""
    host = politeness_key(request)
    take_turn = frontier.politeness.take_turn
    try:
        wait = await call_redis(frontier, take_turn, host)
        while wait > 0:
            await sleep(wait)
            wait = await call_redis(frontier, take_turn, host)
    except redis.RedisError as exc:
        logger.warning("Cannot take a new turn at %s (sending %s): %s", host, request, exc)
    request.meta[FRONTIER_TURN_META] = [time.monotonic(), request.meta[FRONTIER_TURN_META][1]]


def _is_robots_txt(request: Request) -> bool:
    """True for the robots.txt request of Scrapy's ``RobotsTxtMiddleware``."""
    return bool(request.meta.get("dont_obey_robotstxt")) and (
        urlparse_cached(request).path == "/robots.txt"
    )


class HostBackoffMiddleware:
    """Crawl-wide backoff: a host that answers 429 or 503 with ``Retry-After`` (seconds or
    an HTTP date), or ``BACKOFF_STRIKES`` times in a row without one, gets no request for
    that long (at most ``HOST_BACKOFF_MAX`` seconds; see
    :func:`bloom_frontier.frontier.politeness.backoff_pause`).

    With ``REDIS_URL`` the pause holds for every worker: it is recorded in the shared
    politeness state, where leases obey it, and a request that was not leased (a robots.txt)
    asks Redis before it leaves. In every mode this worker's downloader slot of the host
    pauses too, with the requests already queued in it, and a request on its way to the
    slot waits here. Scrapy's RetryMiddleware still retries the answer: its retry waits
    like any other request.

    Stats: ``backoff/paused`` (pauses this worker started), ``backoff/waited`` (requests
    held back by a pause), each also under ``/<host class>``
    (:class:`bloom_frontier.metrics.HostClasses`).
    """

    def __init__(self, crawler: Crawler, cap: float, shared: bool) -> None:
        self.crawler = crawler
        self.cap = cap
        self.shared = shared
        self.host_classes = HostClasses.from_settings(crawler.settings)
        #: Host -> ``time.monotonic()`` at which this worker's pause of it ends.
        self._paused: dict[str, float] = {}
        #: Hosts with a strike on record: backoff answers without Retry-After, in a row
        #: (counted here in embedded mode, in Redis with a shared frontier).
        self._strikes: dict[str, int] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        try:
            cap = settings.getfloat("HOST_BACKOFF_MAX")
        except ValueError:
            cap = math.nan
        if not 0 < cap < math.inf:
            raise ValueError(
                f"HOST_BACKOFF_MAX must be a number of seconds more than 0, "
                f"got {settings.get('HOST_BACKOFF_MAX')!r}"
            )
        return cls(crawler, cap, shared=bool(settings.get("REDIS_URL")))

    def _count(self, name: str, host: str) -> None:
        assert self.crawler.stats is not None
        self.host_classes.count(self.crawler.stats, name, host)

    def _frontier(self) -> RedisFrontier:
        frontier = services_of(self.crawler).frontier
        assert isinstance(frontier, RedisFrontier)
        return frontier

    async def _redis(self, name: str, *args: Any) -> Any:
        """The shared politeness state's ``name(*args)``, off the loop."""
        frontier = self._frontier()
        return await call_redis(frontier, getattr(frontier.politeness, name), *args)

    async def process_request(self, request: Request) -> None:
        host = politeness_key(request)
        wait = self._paused.get(host, 0.0) - time.monotonic()
        if self.shared and not request.meta.get(FRONTIER_TURN_META) and wait <= 0:
            try:  # not leased: no lease script saw a pause another worker set
                wait = await self._redis("paused_for", host)
            except redis.RedisError as exc:
                logger.warning("Cannot check whether %s is paused: %s", host, exc)
        if wait <= 0:
            self._paused.pop(host, None)
            return
        self._count("backoff/waited", host)
        while wait > 0:
            await sleep(wait)
            wait = self._paused.get(host, 0.0) - time.monotonic()
        turn = request.meta.get(FRONTIER_TURN_META)
        if self.shared and turn and turn[1] > 0:  # its lease's turn went by during the pause
            await new_turn(self._frontier(), request)

    async def process_response(self, request: Request, response: Response) -> Response:
        host = politeness_key(request)
        if response.status in BACKOFF_STATUSES:
            asked = retry_after(response.headers.get(b"Retry-After"), now=time.time())
            await self._back_off(host, asked, response)
        elif host in self._strikes:
            await self._clear_strikes(host)
        return response

    async def _back_off(self, host: str, asked: float | None, response: Response) -> None:
        """Pause ``host`` after a backoff answer (if it asked for it, or it is one too many),
        for every worker and in this worker's downloader slot."""
        try:
            strikes = 0 if asked is not None else await self._strike(host)
            seconds = backoff_pause(asked, strikes, self.cap)
            if seconds <= 0:
                return
            if self.shared:
                seconds = await self._redis("pause", host, seconds)
        except redis.RedisError as exc:
            logger.warning("Cannot pause %s for every worker (pausing it here): %s", host, exc)
            seconds = backoff_pause(asked, BACKOFF_STRIKES, self.cap)
        self._paused[host] = max(self._paused.get(host, 0.0), time.monotonic() + seconds)
        assert self.crawler.engine is not None
        pause_slot(self.crawler.engine.downloader, host, self._paused[host] - time.monotonic())
        self._count("backoff/paused", host)
        logger.info(
            "%s answered %s%s: no request to it for %.1fs%s",
            host,
            response.status,
            "" if asked is None else f" (Retry-After {asked:.0f}s)",
            seconds,
            " (capped by HOST_BACKOFF_MAX)" if asked is not None and asked > self.cap else "",
        )

    async def _strike(self, host: str) -> int:
        strikes = await self._redis("strike", host) if self.shared else 0
        self._strikes[host] = strikes or self._strikes.get(host, 0) + 1
        return self._strikes[host]

    async def _clear_strikes(self, host: str) -> None:
        del self._strikes[host]
        if self.shared:
            try:
                await self._redis("clear_strikes", host)
            except redis.RedisError as exc:
                logger.warning("Cannot clear the backoff count of %s now: %s", host, exc)
