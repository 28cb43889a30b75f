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

Only ``http`` and ``https`` URLs reach the downloader (``SSRF_ALLOWED_SCHEMES`` widens
that), whatever the request's origin: a link, a redirect hop, a stored request, a canonical
hint, a seed. A refused scheme is reason ``scheme:<name>``; a URL whose host the stage-1
canonicalizer rejects is ``invalid-host``. The ``file``, ``data``, ``s3`` and ``ftp`` download
handlers are switched off as well (by the add-on, ``crawler/addon.py``).

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
name resolves to, is allowed. Refusals are recorded as ``blocked`` chains in the record
store and counted under ``ssrf/blocked/<reason>``.

Exemptions belong to one crawler (:func:`policy_for`): two crawlers of one process never
share them. Scrapy installs one resolver per process, so the resolver lets a private answer
through when any running crawler exempts that name (each registers its policy with it), and
remembers which names answered private addresses; each crawler's middleware then refuses
those names unless that crawler exempts them.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import urllib.request
import weakref
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.exceptions import CannotResolveHostError, IgnoreRequest, NotConfigured
from scrapy.http.request import NO_CALLBACK
from scrapy.resolver import CachingThreadedResolver
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.error import DNSLookupError

from bloom_frontier import defaults
from bloom_frontier.canonical import InvalidURL, canonicalize
from bloom_frontier.frontier.keys import carried_key, key_host
from bloom_frontier.meta import DEDUPE_KEY_META
from bloom_frontier.pipelines.records import BLOCKED, Chain
from bloom_frontier.pipelines.store import record_chain

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
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


class ProxyWithGuard(RuntimeError):
    """A proxy is configured while the SSRF guard is on and ``SSRF_ALLOW_PROXY`` is not."""


def environment_proxies() -> dict[str, str]:
    """The ``http``/``https`` proxies Scrapy's HttpProxyMiddleware would take from the
    environment (``http_proxy``, ``HTTPS_PROXY``...)."""
    return {
        scheme: url
        for scheme, url in urllib.request.getproxies().items()
        if scheme in ("http", "https") and url
    }


def check_proxy_setup(settings: BaseSettings) -> None:
    """Raise :class:`ProxyWithGuard`, saying what to do, when the environment configures a
    proxy Scrapy would use while the guard is on and proxies are not allowed."""
    if (
        not settings.getbool("SSRF_GUARD_ENABLED")
        or settings.getbool("SSRF_ALLOW_PROXY")
        or not settings.getbool("HTTPPROXY_ENABLED")
    ):
        return
    proxies = environment_proxies()
    if proxies:
        names = ", ".join(f"{scheme}_proxy" for scheme in sorted(proxies))
        raise ProxyWithGuard(
            f"a proxy is configured ({names}) and the SSRF guard cannot see where a proxy "
            "connects: unset it, or set SSRF_ALLOW_PROXY=True if the proxy enforces egress "
            "itself"
        )


class SSRFPolicy:
    """Decides whether a URL, or a DNS answer for a name, may be connected to, for one
    crawler: hosts it allows, and the names its process's resolver saw answer private
    addresses."""

    def __init__(
        self,
        allowed_hosts: Iterable[str] = (),
        resolver: SSRFGuardResolver | None = None,
        schemes: Iterable[str] = defaults.SSRF_ALLOWED_SCHEMES,
        allow_proxy: bool = False,
    ) -> None:
        self.allowed_hosts = {host_key(host) for host in allowed_hosts if host}
        self.resolver = resolver
        self.schemes = frozenset(scheme.lower() for scheme in schemes)
        self.allow_proxy = allow_proxy

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> Self:
        return cls(
            settings.getlist("SSRF_ALLOWED_HOSTS"),
            schemes=settings.getlist("SSRF_ALLOWED_SCHEMES"),
            allow_proxy=settings.getbool("SSRF_ALLOW_PROXY"),
        )

    def exempt(self, hosts: Iterable[str]) -> None:
        """Allow ``hosts`` too: the crawl was started on them."""
        self.allowed_hosts.update(host_key(host) for host in hosts if host)

    def allows(self, host: str) -> bool:
        """The user started the crawl on ``host`` or allowed it explicitly."""
        return host_key(host) in self.allowed_hosts

    def name_refusal(self, host: str) -> str | None:
        """Why the resolver refused (or would refuse) ``host``: what it answered."""
        if self.resolver is None or self.allows(host):
            return None
        return self.resolver.private_names.get(host_key(host))

    def refusal(self, url: str, key: str | None = None) -> str | None:
        """Why ``url`` must not be requested, or None. A scheme outside the allowed ones is
        refused whatever the host; names are judged by what they resolve to (see
        :class:`SSRFGuardResolver`), except metadata names and names the resolver already
        found private. ``key``, the URL's dedupe key when known, spares canonicalizing
        ``url`` again (a URL-form key holds the very host stage 1 gives).

        >>> SSRFPolicy().refusal("file:///etc/passwd")
        'scheme:file'
        """
        scheme = url.partition(":")[0].lower() if ":" in url else ""
        if scheme not in self.schemes:
            return f"scheme:{scheme[:20] or 'none'}"
        # A widened scheme's host is read as an http URL's (the canonicalizer knows http).
        host = (key and key_host(key)) or normalized_host(
            url if scheme in ("http", "https") else f"http:{url[len(scheme) + 1 :]}"
        )
        if host is None:
            return "invalid-host"
        if self.allows(host):
            return None
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            if host in METADATA_NAMES:
                return "metadata"
            refused = self.name_refusal(host)
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
    """Scrapy's caching resolver that refuses private answers for names no running crawler
    allows (``SSRF_ALLOWED_HOSTS`` of the process, or a crawler's own exemptions).

    Twisted turns any resolver failure into "no results for hostname lookup", so the name is
    also remembered (:attr:`private_names`): each crawler's middleware then refuses the retry
    (and every later request to that name) before the downloader, and records the block.
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
        #: The policies of the crawlers running in this process (see :func:`policy_for`).
        self.crawl_policies: weakref.WeakSet[SSRFPolicy] = weakref.WeakSet()
        #: Names that answered a private address, with the address's class.
        self.private_names: dict[str, str] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler, reactor: ReactorBase) -> Self:
        # Called with the CrawlerProcess, which only has settings.
        settings = crawler.settings
        resolver = super().from_crawler(crawler, reactor)
        if settings.getbool("SSRF_GUARD_ENABLED"):
            resolver.policy = SSRFPolicy.from_settings(settings)
        return resolver

    @staticmethod
    def installed() -> SSRFGuardResolver | None:
        """The resolver of this process's reactor, if it is this class (a ``CrawlerRunner``
        script installs none unless it does so itself)."""
        from twisted.internet import reactor

        resolver = getattr(reactor, "resolver", None)
        return resolver if isinstance(resolver, SSRFGuardResolver) else None

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
        self.private_names[host_key(name)] = reason
        if any(policy.allows(name) for policy in self.crawl_policies):
            return answer
        logger.warning("SSRF guard: %s resolves to %s (%s); not connecting", name, answer, reason)
        raise RefusedAnswer(f"{name} resolves to a {reason} address")


_policies: weakref.WeakKeyDictionary[Crawler, SSRFPolicy] = weakref.WeakKeyDictionary()


def policy_for(crawler: Crawler) -> SSRFPolicy:
    """The crawler's own policy: ``SSRF_ALLOWED_HOSTS`` and the hosts it was started on
    (:func:`crawl_hosts`, then each start request's, see :class:`SSRFStartHostsMiddleware`),
    registered with the process's resolver while the crawler runs."""
    policy = _policies.get(crawler)
    if policy is None:
        policy = SSRFPolicy.from_settings(crawler.settings)
        if crawler.spider is not None:
            policy.exempt(crawl_hosts(crawler.spider))
        policy.resolver = SSRFGuardResolver.installed()
        if policy.resolver is not None:
            policy.resolver.crawl_policies.add(policy)
        _policies[crawler] = policy
    return policy


def crawl_hosts(spider: Spider) -> set[str]:
    """Hosts a spider was started on: ``allowed_domains``, ``allowed_hosts`` and the hosts of
    its start URLs."""
    hosts = set(getattr(spider, "allowed_domains", None) or ())
    hosts.update(getattr(spider, "allowed_hosts", None) or ())
    urls = list(getattr(spider, "start_urls", None) or ())
    start_url = getattr(spider, "start_url", None)
    if isinstance(start_url, str):
        urls.append(start_url)
    hosts.update(urlsplit(url).hostname or "" for url in urls)
    return {host for host in hosts if host}


class SSRFGuardMiddleware:
    """Refuses requests to private addresses before anything is sent (robots.txt included)
    and records each refusal as a ``blocked`` chain."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("SSRF_GUARD_ENABLED"):
            raise NotConfigured
        check_proxy_setup(crawler.settings)
        return cls(crawler)

    @property
    def policy(self) -> SSRFPolicy:
        return policy_for(self.crawler)

    def process_request(self, request: Request) -> None:
        reason = self.policy.refusal(request.url, carried_key(request))
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
        logger.info("SSRF guard refused %s (%s)", request.url, reason)
        if request.callback is NO_CALLBACK:
            return  # robots.txt and other engine-internal downloads are not crawl records
        chain = Chain.from_meta(request.meta) or Chain.begin(
            request.url, request.meta.get(DEDUPE_KEY_META)
        )
        record_chain(self.crawler, chain.finish(BLOCKED, request.url, reason))


class SSRFStartHostsMiddleware:
    """Spider middleware: the host of every request the spider's ``start()`` yields is one
    the crawl was started on, exempt from the guard for this crawler."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        if not crawler.settings.getbool("SSRF_GUARD_ENABLED"):
            raise NotConfigured
        return cls(crawler)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        policy = policy_for(self.crawler)
        async for output in start:
            if isinstance(output, Request):
                policy.exempt([urlparse_cached(output).hostname or ""])
            yield output
