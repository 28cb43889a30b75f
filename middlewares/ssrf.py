"""SSRF guard: the crawl never connects to private, loopback, link-local or metadata addresses.

Two layers, both on by default (``SSRF_GUARD_ENABLED``):

* :class:`SSRFGuardMiddleware` (downloader middleware, before robots.txt) refuses a request
  whose host is such an address in any spelling (``http://2852039166/``,
  ``0xA9.0xFE.0xA9.0xFE``, ``[::ffff:a9fe:a9fe]``: hosts are read through the stage-1
  canonicalizer) or a cloud metadata name. The redirect middleware asks the same policy
  before following a hop.
* :class:`SSRFGuardResolver` (``TWISTED_DNS_RESOLVER``) refuses a DNS answer that is such an
  address, at resolution time, so no connection is ever attempted (no window for DNS
  rebinding between a check and the connect). It serves Scrapy's default HTTP/1.1 and HTTP/2
  handlers (Twisted); the optional httpx/aiohttp handlers resolve names themselves and only get
  the middleware's checks.

Hosts the crawl was started on (the spider's ``allowed_hosts``, ``start_url``,
``start_urls``) and hosts in ``SSRF_ALLOWED_HOSTS`` are exempt: crawling your own intranet
server is a choice, being redirected to one is not. Refusals are recorded as ``blocked``
chains in the record store and counted under ``ssrf/blocked/<reason>``.

Scrapy installs one resolver per process, so the hosts exempted at spider start and the names
the resolver refused are kept process-wide (:data:`PROCESS_GUARD`).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import CannotResolveHostError, IgnoreRequest, NotConfigured
from scrapy.http.request import NO_CALLBACK
from scrapy.resolver import CachingThreadedResolver
from twisted.internet.error import DNSLookupError

from crawler.canonical import InvalidURL, canonicalize
from crawler.frontier import META_KEY
from crawler.frontier.keys import carried_key, key_host
from pipelines.records import BLOCKED, Chain
from pipelines.store import record_chain

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.internet.base import ReactorBase
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Cloud instance-metadata endpoints (AWS, ECS, GCP, Azure, Alibaba, Oracle) by address.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",
        "169.254.170.2",
        "fd00:ec2::254",
        "100.100.100.200",
        "168.63.129.16",
        "192.0.0.192",
    )
)
#: ... and by name (these never resolve to a public address).
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
#: How a failed name lookup reaches downloader middlewares (Scrapy wraps Twisted's error).
DNS_FAILURES = (DNSLookupError, CannotResolveHostError)
CGNAT = ipaddress.ip_network("100.64.0.0/10")
UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo client, NAT64)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_refusal(address: IPAddress) -> str | None:
    """Why a crawler must not connect to ``address`` (None: it is a public address)."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            return address_refusal(inner)
    if address in METADATA_ADDRESSES:
        return "metadata"
    checks = (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("cgnat", address.version == 4 and address in CGNAT),
        ("unique-local", address.version == 6 and address in UNIQUE_LOCAL),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("non-global", not address.is_global),
    )
    return next((reason for reason, hit in checks if hit), None)


def normalized_host(url: str) -> str | None:
    """The host of ``url`` as the stage-1 canonicalizer spells it (IPv4 in dotted quad,
    IPv6 compressed without brackets, names lowercased ASCII); None if it has none."""
    try:
        canonical = canonicalize(url)
    except InvalidURL:
        return None
    host = urlsplit(canonical).hostname
    return host.rstrip(".") if host else None


@functools.lru_cache(maxsize=4096)
def host_key(host: str) -> str:
    """A host name or address as given in settings or spider attributes, normalized.
    Cached: every request and every DNS answer asks it for the request's host."""
    host = host.strip().lower()
    return normalized_host(f"http://{host}/") or host.strip("[]").rstrip(".")


class ProcessGuard:
    """Process-wide state shared by the resolver and the middlewares of every crawler."""

    def __init__(self) -> None:
        self.crawl_hosts: set[str] = set()
        self.refused_names: dict[str, str] = {}

    def exempt(self, hosts: Iterable[str]) -> None:
        """Hosts a crawl was started on."""
        self.crawl_hosts.update(host_key(host) for host in hosts if host)

    def refuse_name(self, name: str, reason: str) -> None:
        self.refused_names[host_key(name)] = reason

    def name_refusal(self, host: str) -> str | None:
        return self.refused_names.get(host_key(host))

    def reset(self) -> None:
        self.crawl_hosts.clear()
        self.refused_names.clear()


PROCESS_GUARD = ProcessGuard()


class SSRFPolicy:
    """Decides whether a URL, or a DNS answer for a name, may be connected to."""

    def __init__(
        self, allowed_hosts: Iterable[str] = (), guard: ProcessGuard = PROCESS_GUARD
    ) -> None:
        self.allowed_hosts = frozenset(host_key(host) for host in allowed_hosts)
        self.guard = guard

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        return cls(settings.getlist("SSRF_ALLOWED_HOSTS"))

    def allows(self, host: str) -> bool:
        """The user started the crawl on ``host`` or allowed it explicitly."""
        key = host_key(host)
        return key in self.allowed_hosts or key in self.guard.crawl_hosts

    def refusal(self, url: str, key: str | None = None) -> str | None:
        """Why ``url`` must not be requested, or None. Names are judged by what they resolve
        to (see :class:`SSRFGuardResolver`), except metadata names and names the resolver
        already refused. ``key``, the URL's dedupe key when known, spares canonicalizing
        ``url`` again (a URL-form key holds the very host stage 1 gives)."""
        host = (key and key_host(key)) or normalized_host(url)
        if host is None or self.allows(host):
            return None
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            if host in METADATA_NAMES:
                return "metadata"
            refused = self.guard.name_refusal(host)
            return f"dns:{refused}" if refused else None
        return address_refusal(address)

    def answer_refusal(self, name: str, answer: str) -> str | None:
        """Why the DNS answer ``answer`` for ``name`` must not be connected to, or None."""
        if self.allows(name):
            return None
        try:
            address = ipaddress.ip_address(answer)
        except ValueError:
            return None
        return address_refusal(address)


class AddressBlocked(IgnoreRequest):
    """A request refused by the SSRF guard (never retried, never connected)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"SSRF guard refused {url} ({reason})")


class RefusedAnswer(DNSLookupError):
    """A DNS answer the resolver refused to hand to the connector."""


class SSRFGuardResolver(CachingThreadedResolver):
    """Scrapy's caching resolver that refuses private answers for names not allowed.

    Twisted turns any resolver failure into "no results for hostname lookup", so the name is
    also remembered in :data:`PROCESS_GUARD`: the middleware then refuses the retry (and every
    later request to that name) before the downloader, and records the block.
    """

    def __init__(
        self,
        reactor: ReactorBase,
        cache_size: int,
        timeout: float,
        policy: SSRFPolicy | None = None,
    ) -> None:
        super().__init__(reactor, cache_size, timeout)
        self.policy = policy

    @classmethod
    def from_crawler(cls, crawler: Crawler, reactor: ReactorBase) -> Self:
        # Called with the CrawlerProcess, which only has settings.
        settings = crawler.settings
        resolver = super().from_crawler(crawler, reactor)
        if settings.getbool("SSRF_GUARD_ENABLED"):
            resolver.policy = SSRFPolicy.from_settings(settings)
        return resolver

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        deferred = super().getHostByName(name, timeout)
        if self.policy is not None:
            deferred.addCallback(self._vet, name)
        return deferred

    def _vet(self, answer: str, name: str) -> str:
        assert self.policy is not None
        reason = self.policy.answer_refusal(name, answer)
        if reason is None:
            return answer
        PROCESS_GUARD.refuse_name(name, reason)
        logger.warning("SSRF guard: %s resolves to %s (%s); not connecting", name, answer, reason)
        raise RefusedAnswer(f"{name} resolves to a {reason} address")


def crawl_hosts(spider: Spider) -> set[str]:
    """Hosts a spider was started on: ``allowed_hosts`` and the hosts of its start URLs."""
    hosts = set(getattr(spider, "allowed_hosts", None) or ())
    urls = list(getattr(spider, "start_urls", None) or ())
    start_url = getattr(spider, "start_url", None)
    if isinstance(start_url, str):
        urls.append(start_url)
    hosts.update(urlsplit(url).hostname or "" for url in urls)
    return {host for host in hosts if host}


class SSRFGuardMiddleware:
    """Refuses requests to private addresses before anything is sent (robots.txt included)
    and records each refusal as a ``blocked`` chain."""

    def __init__(self, crawler: Crawler, policy: SSRFPolicy) -> None:
        self.crawler = crawler
        self.policy = policy

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("SSRF_GUARD_ENABLED"):
            raise NotConfigured
        middleware = cls(crawler, SSRFPolicy.from_settings(crawler.settings))
        crawler.signals.connect(middleware.spider_opened, signal=signals.spider_opened)
        return middleware

    def spider_opened(self, spider: Spider) -> None:
        PROCESS_GUARD.exempt(crawl_hosts(spider))

    def process_request(self, request: Request) -> None:
        reason = self.policy.refusal(request.url, carried_key(request))
        if reason is not None:
            self.record_block(request, reason)
            raise AddressBlocked(request.url, reason)

    def process_exception(self, request: Request, exception: Exception) -> None:
        """A DNS failure the resolver caused (retries off, or the last one) is a block."""
        if isinstance(exception, DNS_FAILURES):
            refused = PROCESS_GUARD.name_refusal(urlsplit(request.url).hostname or "")
            if refused is not None:
                self.record_block(request, f"dns:{refused}")

    def record_block(self, request: Request, reason: str) -> None:
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value(f"ssrf/blocked/{reason}")
        logger.info("SSRF guard refused %s (%s)", request.url, reason)
        if request.callback is NO_CALLBACK:
            return  # robots.txt and other engine-internal downloads are not crawl records
        chain = Chain.from_meta(request.meta) or Chain.begin(
            request.url, request.meta.get(META_KEY)
        )
        record_chain(self.crawler, chain.finish(BLOCKED, request.url, reason))
