"""SSRF guard: the crawl never connects to private, loopback, link-local or metadata addresses.

Two layers, both on by default (``SSRF_GUARD_ENABLED``), judged by the crawler's
:class:`~bloom_frontier.ssrf.SSRFPolicy` (:mod:`bloom_frontier.ssrf`, one per crawler, from
:class:`bloom_frontier.services.CrawlServices`):

* :class:`SSRFGuardMiddleware` (downloader middleware, before robots.txt) refuses a request
  the policy refuses: a host that is such an address in any spelling, a cloud metadata name,
  a scheme outside ``SSRF_ALLOWED_SCHEMES``, a host the stage-1 canonicalizer rejects. The
  redirect middleware asks the same policy before following a hop.
* :class:`~bloom_frontier.ssrf.SSRFGuardResolver` (``TWISTED_DNS_RESOLVER``) refuses a DNS
  answer that is such an address, at resolution time, so no connection is ever attempted (no
  window for DNS rebinding between a check and the connect). It serves Scrapy's default
  HTTP/1.1 and HTTP/2 handlers (Twisted); the optional httpx/aiohttp handlers resolve names
  themselves and only get the middleware's checks.

Whatever the request's origin (a link, a redirect hop, a stored request, a canonical hint, a
seed, the robots.txt Scrapy fetches for a new host, a redirect target's too) the middleware
judges the URL that will be fetched, never the dedupe key the request carries in its meta
(a stored request's meta is its writer's), and only allowed schemes reach the downloader.
The ``file``, ``data``, ``s3`` and ``ftp`` download handlers are switched off as well (by
the add-on, ``crawler/addon.py``). What a library would fetch on its own is off: the Public
Suffix List of Scrapy's cookie handling is tldextract's bundled snapshot
(:func:`bloom_frontier.compat.offline_cookie_domains`).

A proxy hides where a connection really goes (the proxy resolves the name, the resolver
never sees it), so by default the guard refuses to run with one: a crawl started with
``http_proxy``/``https_proxy`` in the environment stops with a one-line error, and a request
whose ``meta["proxy"]`` is set is refused (reason ``proxy``). ``SSRF_ALLOW_PROXY = True``
allows proxies: the proxy must then enforce egress itself.

Hosts the crawl was started on and hosts in ``SSRF_ALLOWED_HOSTS`` are exempt: crawling your
own intranet server is a choice, being redirected to one is not. A crawl is started on the
spider's ``allowed_domains`` (and ``allowed_hosts``, ``start_url``, ``start_urls``), and on the
host of every request its ``start()`` yields (:class:`SSRFStartHostsMiddleware`). The
exemption is by host name (or address) only: every port of that host, and every address its
name resolves to, is allowed. Refusals are recorded as ``blocked`` chains by the crawl's
recorder and counted under ``ssrf/blocked/<reason>``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.httpobj import urlparse_cached

from bloom_frontier.compat import offline_cookie_domains
from bloom_frontier.logtext import short
from bloom_frontier.meta import DEDUPE_KEY_META
from bloom_frontier.pipelines.records import BLOCKED, Chain
from bloom_frontier.services import services_of
from bloom_frontier.ssrf import DNS_FAILURES, SSRFPolicy, check_proxy_setup

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler

    from bloom_frontier.services import CrawlServices

logger = logging.getLogger(__name__)


class AddressBlocked(IgnoreRequest):
    """A request refused by the SSRF guard (never retried, never connected)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"SSRF guard refused {short(url)} ({reason})")


class SSRFGuardMiddleware:
    """Refuses requests to private addresses before anything is sent (robots.txt included)
    and records each refusal as a ``blocked`` chain."""

    def __init__(self, crawler: Crawler, services: CrawlServices) -> None:
        self.crawler = crawler
        self.services = services

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        # What a library fetches on its own passes no guard: off, whatever the settings.
        offline_cookie_domains()
        if not crawler.settings.getbool("SSRF_GUARD_ENABLED"):
            raise NotConfigured
        check_proxy_setup(crawler.settings)
        return cls(crawler, services_of(crawler))

    @property
    def policy(self) -> SSRFPolicy:
        return self.services.ssrf_policy

    def process_request(self, request: Request) -> None:
        # The URL that will be fetched, never the dedupe key its meta carries (stored
        # requests are untrusted: a key naming a start host proves nothing about the URL).
        reason = self.policy.refusal(request.url)
        if reason is None and request.meta.get("proxy") and not self.policy.allow_proxy:
            reason = "proxy"
        if reason is not None:
            self.record_block(request, reason)
            raise AddressBlocked(request.url, reason)

    def process_exception(self, request: Request, exception: Exception) -> None:
        """A DNS failure the resolver caused (retries off, or the last one) is a block."""
        if isinstance(exception, DNS_FAILURES):
            refused = self.policy.name_refusal(urlsplit(request.url).hostname or "")
            if refused is not None:
                self.record_block(request, f"dns:{refused}")

    def record_block(self, request: Request, reason: str) -> None:
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value(f"ssrf/blocked/{reason}")
        logger.info("SSRF guard refused %s (%s)", short(request.url), reason)
        if request.callback is NO_CALLBACK:
            return  # robots.txt and other engine-internal downloads are not crawl records
        chain = Chain.from_meta(request.meta) or Chain.begin(
            request, request.meta.get(DEDUPE_KEY_META)
        )
        self.services.recorder.chain(chain.finish(BLOCKED, request.url, reason))


class SSRFStartHostsMiddleware:
    """Spider middleware: the host of every request the spider's ``start()`` yields is one
    the crawl was started on, exempt from the guard for this crawler."""

    def __init__(self, services: CrawlServices) -> None:
        self.services = services

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("SSRF_GUARD_ENABLED"):
            raise NotConfigured
        return cls(services_of(crawler))

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        policy = self.services.ssrf_policy
        async for output in start:
            if isinstance(output, Request):
                policy.exempt([urlparse_cached(output).hostname or ""])
            yield output
