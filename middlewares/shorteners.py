"""Shortener links (bit.ly, t.co, ...) resolved to their target's key, without fetching it.

A link to a known shortener host (:mod:`bloom_frontier.shorteners`) becomes a **resolution
request**: queued in the frontier as its own work under the short URL's key (so each short
link is asked once, and never while holding the lease of the page that linked it), it asks
the shortener once and reads its answer without following it:

- no retry, no robots.txt (the shortener's content is not crawled, only its ``Location``),
  ``SHORTENER_TIMEOUT`` seconds at most: a shortener that is down costs one bounded wait,
  and the link is kept as it is (its chain recorded as ``error``);
- through the SSRF guard like any request, and rate-limited per shortener host (a download
  slot per host with ``SHORTENER_DELAY``, which a shared crawl enforces across workers);
- answered from the answers recorded (``shortener_answers``, with the answer's time, read
  through the crawl's recorder) when a worker asked it within ``SHORTENER_CACHE_TTL`` seconds.

The answer is a redirect hop like any other
(:class:`bloom_frontier.middlewares.redirects.RedirectChainMiddleware`
records it): a target at a private address is blocked and recorded; a target on the crawl's
hosts is admitted under its own key through the frontier, so one already seen is not fetched
again; a target that is itself a short link (``t.co`` -> ``bit.ly``) is followed as one more
resolution request of the same chain, within ``REDIRECT_MAX_HOPS``. A target elsewhere is
recorded (chain outcome ``offsite``), not fetched.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from scrapy.utils.defer import maybe_deferred_to_future

from bloom_frontier.canonical import resolve_link
from bloom_frontier.frontier import page_handled
from bloom_frontier.logtext import short
from bloom_frontier.meta import SHORTENER_META
from bloom_frontier.middlewares.redirects import REDIRECT_STATUSES, key_or_error
from bloom_frontier.pipelines.records import ERROR, OFFSITE, Chain, Hop, KeyAlias, ShortenerAnswer
from bloom_frontier.services import services_of
from bloom_frontier.shorteners import Shorteners, shorteners_from_settings
from bloom_frontier.ssrf import crawl_hosts

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Self

    from scrapy.crawler import Crawler

    from bloom_frontier.canonical.rules import RuleSet
    from bloom_frontier.services import CrawlServices

logger = logging.getLogger(__name__)

#: Response flag of an answer served from the record store's cache.
CACHED_FLAG = "shortener-cache"
#: ``via`` of key aliases from a short link's key to its target's.
VIA_SHORTENER = "shortener"
#: What a resolution request carries besides its marker, removed before it is redirected.
_RESOLUTION_META = ("allow_offsite", "download_timeout", "dont_retry", "dont_obey_robotstxt")


def resolution_meta(short_url: str, timeout: float) -> dict[str, Any]:
    """The ``meta`` that makes a request for ``short_url`` a resolution request."""
    return {
        SHORTENER_META: short_url,
        # Past Scrapy's offsite filters (allowed_domains): the shortener is asked, only
        # its target must be on the crawl's hosts.
        "allow_offsite": True,
        "download_timeout": timeout,
        "dont_retry": True,
        "dont_obey_robotstxt": True,
    }


def is_resolution(request: Request) -> bool:
    return request.meta.get(SHORTENER_META) == request.url


class ShortenerLinksMiddleware:
    """Spider middleware: turns the links a callback yields to shortener hosts into
    resolution requests, before the page's batch admits them (stat ``shortener/links``)."""

    def __init__(self, crawler: Crawler, shorteners: Shorteners, timeout: float) -> None:
        self.crawler = crawler
        self.shorteners = shorteners
        self.timeout = timeout

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        if not settings.getbool("SHORTENERS_ENABLED"):
            raise NotConfigured
        shorteners = shorteners_from_settings(settings)
        return cls(crawler, shorteners, settings.getfloat("SHORTENER_TIMEOUT"))

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterable[Any]:
        for output in result:
            yield self._resolve(output)

    async def process_spider_output_async(self, response: Response, result: Any) -> Any:
        async for output in result:
            yield self._resolve(output)

    def _resolve(self, output: Any) -> Any:
        if not isinstance(output, Request) or SHORTENER_META in output.meta:
            return output
        if self.shorteners.host_of(output.url) is None:
            return output
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("shortener/links")
        return output.replace(meta={**output.meta, **resolution_meta(output.url, self.timeout)})


class ShortenerResolveMiddleware:
    """Downloader middleware: answers resolution requests from the cache, records each
    answer, and settles those the redirect middleware does not (see the module docstring).

    Stats: ``shortener/asked``, ``shortener/cached``, ``shortener/offsite``,
    ``shortener/unresolved`` (no redirect in the answer), ``shortener/failed`` (download
    error or timeout).
    """

    def __init__(
        self,
        crawler: Crawler,
        services: CrawlServices,
        cache_ttl: float,
        shorteners: Shorteners,
        timeout: float,
    ) -> None:
        self.crawler = crawler
        self.services = services
        self.cache_ttl = cache_ttl
        self.shorteners = shorteners
        self.timeout = timeout
        settings = crawler.settings
        self.ssrf_enabled = settings.getbool("SSRF_GUARD_ENABLED")

    @property
    def rules(self) -> RuleSet:
        """The rules the crawl's links are keyed with now (its keyer's: ``CANON_HOST_RULES``,
        the seen filter's version prefix and the learned rules in force), so the keys
        recorded here agree with the links' keys."""
        return self.services.frontier.keyer.current_rules()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        if not settings.getbool("SHORTENERS_ENABLED"):
            raise NotConfigured
        return cls(
            crawler,
            services_of(crawler),
            settings.getfloat("SHORTENER_CACHE_TTL"),
            shorteners_from_settings(settings),
            settings.getfloat("SHORTENER_TIMEOUT"),
        )

    @property
    def stats(self) -> Any:
        return self.crawler.stats

    async def process_request(self, request: Request) -> Response | None:
        if not is_resolution(request):
            return None
        # Read off Twisted's loop, behind the store's pending flushes.
        answer = await maybe_deferred_to_future(
            self.services.recorder.cached_shortener_answer(request.url)
        )
        if answer is None or time.time() - answer.at > self.cache_ttl:
            self.stats.inc_value("shortener/asked")
            return None
        self.stats.inc_value("shortener/cached")
        headers = {"Location": answer.location} if answer.location is not None else {}
        return Response(
            request.url, status=answer.status, headers=headers, request=request, flags=[CACHED_FLAG]
        )

    def process_response(self, request: Request, response: Response) -> Response:
        if not is_resolution(request):
            return response
        for name in (SHORTENER_META, *_RESOLUTION_META):
            request.meta.pop(name, None)  # the target's request is built from this one
        location = response.headers.get("Location")
        location_text = location.decode("utf-8", "surrogateescape") if location else None
        if CACHED_FLAG not in response.flags:
            self.services.recorder.shortener_answer(
                ShortenerAnswer(request.url, response.status, location_text)
            )
        target = resolve_link(request.url, location_text) if location_text else None
        if response.status not in REDIRECT_STATUSES or target is None:
            self.stats.inc_value("shortener/unresolved")
            chain = self._chain(request)
            self._settle(request, response, chain, ERROR, f"shortener-answered-{response.status}")
        assert location_text is not None
        target_host = (urlsplit(target).hostname or "").rstrip(".")
        blocked = self.ssrf_enabled and self.services.ssrf_policy.refusal(target) is not None
        if blocked or target_host in crawl_hosts(self.crawler.spider):
            return response  # the redirect middleware records the hop, blocks or admits
        if self.shorteners.host_of(target) is not None:
            # Another short link: the redirect middleware records the hop and follows it
            # (or stops the chain at its hop cap or a loop), as one more resolution request.
            request.meta.update(resolution_meta(target, self.timeout))
            return response
        self.stats.inc_value("shortener/offsite")
        short_key, target_key = self._key(request.url), self._key(target)
        chain = self._chain(request).add(
            Hop(request.url, short_key, response.status, location_text, target, target_key)
        )
        if short_key and target_key:
            self.services.recorder.key_alias(
                KeyAlias(short_key, target_key, VIA_SHORTENER, self.rules.version)
            )
        self._settle(request, response, chain, OFFSITE, None, final_url=target)

    def process_exception(self, request: Request, exception: Exception) -> None:
        """A shortener that is down or too slow: the link stays as it is (recorded as an
        ``error`` chain, logged in one line: it is the shortener's failure, not the crawl's)."""
        if not is_resolution(request) or isinstance(exception, IgnoreRequest):
            return
        self.stats.inc_value("shortener/failed")
        reason = f"{type(exception).__name__}: {exception}"[:500]
        logger.info("Shortener link %s not resolved: %s", short(request.url), short(reason))
        chain = self._chain(request)
        self._settle(request, None, chain, ERROR, reason)

    def _key(self, url: str) -> str | None:
        return key_or_error(url, self.rules)[0]

    def _chain(self, request: Request) -> Chain:
        """The chain this resolution continues (a short link reached from another one), or
        a new one from it."""
        return Chain.from_meta(request.meta) or Chain.begin(request, self._key(request.url))

    def _settle(
        self,
        request: Request,
        response: Response | None,
        chain: Chain,
        outcome: str,
        reason: str | None,
        final_url: str | None = None,
    ) -> NoReturn:
        """Record how the resolution ended, release its lease (nothing to admit) and stop."""
        self.services.recorder.chain(chain.finish(outcome, final_url or request.url, reason))
        self.crawler.signals.send_catch_log(signal=page_handled, response=response)
        self.services.frontier.admit(request, [])
        raise IgnoreRequest(f"shortener link {request.url} resolved: {outcome}")
