"""The SSRF policy: which URLs and DNS answers a crawler may connect to, and proxy checks.

A URL is refused when its scheme is not allowed (``SSRF_ALLOWED_SCHEMES``, http and https by
default: reason ``scheme:<name>``), its host is not one the stage-1 canonicalizer accepts
(``invalid-host``), or its host is a private, loopback, link-local or metadata address in any
spelling (``http://2852039166/``, ``0xA9.0xFE.0xA9.0xFE``, ``[::ffff:a9fe:a9fe]``) or a cloud
metadata name. :class:`SSRFGuardResolver` (``TWISTED_DNS_RESOLVER``) refuses a DNS answer that
is such an address, at resolution time, so no connection is ever attempted.

Hosts the crawl was started on and hosts in ``SSRF_ALLOWED_HOSTS`` are exempt, by host name
(or address) only. Exemptions belong to one crawler's policy (built by
:class:`bloom_frontier.services.CrawlServices`): two crawlers of one process never share them.
Scrapy installs one resolver per process, so the resolver lets a private answer through when
any running crawler exempts that name (each registers its policy with it), and remembers which
names answered private addresses; each crawler's guard then refuses those names unless that
crawler exempts them.

The downloader middlewares that apply the policy are in :mod:`bloom_frontier.middlewares.ssrf`.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import urllib.request
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import CannotResolveHostError
from scrapy.resolver import CachingThreadedResolver
from twisted.internet.error import DNSLookupError

from bloom_frontier import defaults
from bloom_frontier.canonical import InvalidURL, canonicalize
from bloom_frontier.canonical.structural import MAX_URL_LENGTH

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


#: An http(s) URL whose authority is a plain host (ASCII letters, digits, dots and hyphens,
#: or a bracketed IPv6 literal) and an optional port, with no user part: the canonicalizer and
#: ``urlsplit`` cannot read another host in it, so :meth:`SSRFPolicy.refusal` judges that
#: host alone (normalized and cached by :func:`host_key`) instead of canonicalizing the URL.
_PLAIN_AUTHORITY = re.compile(
    r"https?://([a-z0-9.-]+|\[[0-9a-f:.]+\])(?::[0-9]*)?(?=[/?#]|\Z)", re.IGNORECASE
)


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

    def register(self, resolver: SSRFGuardResolver | None) -> None:
        """Judge DNS answers with ``resolver`` (the process's, if it is the guard's), and let
        it through the private answers for names this policy allows while the policy lives."""
        self.resolver = resolver
        if resolver is not None:
            resolver.crawl_policies.add(self)

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

    def refusal(self, url: str) -> str | None:
        """Why ``url`` must not be requested, or None. A scheme outside the allowed ones is
        refused whatever the host; names are judged by what they resolve to (see
        :class:`SSRFGuardResolver`), except metadata names and names the resolver already
        found private.

        Judged on ``url`` alone, the URL that will be fetched: never on a dedupe key a
        request carries (a stored request's meta is whatever its writer put there). The
        host is read as stage 1 reads it and, when that spelling differs, as
        :func:`urllib.parse.urlsplit` reads it (what download handlers connect to): either
        refused refuses the URL.

        >>> SSRFPolicy().refusal("file:///etc/passwd")
        'scheme:file'
        """
        scheme = url.partition(":")[0].lower() if ":" in url else ""
        if scheme not in self.schemes:
            return f"scheme:{scheme[:20] or 'none'}"
        if len(url.partition("#")[0]) > MAX_URL_LENGTH:
            return "too-long"  # the canonicalizer reads no host in it: neither does the guard
        if plain := _PLAIN_AUTHORITY.match(url):  # one reading only: no spelling to differ
            return self.host_refusal(host_key(plain[1]))
        # A widened scheme's host is read as an http URL's (the canonicalizer knows http).
        host = normalized_host(
            url if scheme in ("http", "https") else f"http:{url[len(scheme) + 1 :]}"
        )
        if host is None:
            return "invalid-host"
        try:
            raw = urlsplit(url).hostname
        except ValueError:
            return "invalid-host"
        hosts = dict.fromkeys([host, host_key(raw) if raw else host])
        return next(filter(None, map(self.host_refusal, hosts)), None)

    def host_refusal(self, host: str) -> str | None:
        """Why a URL whose host is ``host`` (normalized) must not be requested, or None."""
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
        #: The policies of the crawlers running in this process (:meth:`SSRFPolicy.register`).
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
