"""The ``meta`` of a stored request, vetted: what it may change of how it is fetched.

A stored request is untrusted input (see :mod:`bloom_frontier.frontier.decode`), and some
``meta`` keys change how Scrapy fetches a request: skip robots.txt, lift the size limits,
go through a proxy, bind to a source address, pick another download slot. Each such key is
honoured from a stored request only as far as the crawl's settings allow it for any request
(:meth:`StoredMeta.honoured`, documented in ``docs/security.md``); beyond that it is
dropped, counted under ``frontier/stored_meta_dropped/<key>`` and logged once per key. A
value of the wrong type (a list ``bindaddress``, ``redirect_chain: 1``) is what no worker
writes: the request is refused (the decoder's ``RequestNotLoadable``, quarantined with the
reason) instead of failing later with a traceback. The users' own keys, and ``cb_kwargs``,
pass through unchanged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.settings import default_settings

from bloom_frontier.logtext import short
from bloom_frontier.meta import (
    CANONICAL_OF_META,
    DEDUPE_CHECKED_META,
    DEDUPE_KEY_META,
    DEDUPE_KEY_URL_META,
    DOWNLOAD_SLOT_META,
    FRONTIER_HOST_META,
    FRONTIER_ROBOTS_CLAIM_META,
    LEARN_RECHECK_META,
    REDIRECT_CHAIN_META,
    SHORTENER_META,
)
from bloom_frontier.pipelines.records import Chain
from bloom_frontier.shorteners import Shorteners, shorteners_from_settings

if TYPE_CHECKING:
    from typing import Self

    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: The stat a dropped key is counted under, with the key after it.
DROPPED_STAT = "frontier/stored_meta_dropped"


def _flag(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _seconds(value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _texts(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)


def _statuses(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(_count(item) for item in value)


def _bind_address(value: Any) -> bool:
    """What Scrapy's handlers take: a host, or a ``[host, port]`` pair."""
    if isinstance(value, str):
        return True
    pair = isinstance(value, (list, tuple)) and len(value) == 2
    return pair and isinstance(value[0], str) and _count(value[1]) and value[1] < 65536


def _cookie_jar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float))


def _chain(value: Any) -> bool:
    """A redirect chain as :meth:`Chain.to_meta` writes it (the redirect middleware reads
    it back with :meth:`Chain.from_meta`)."""
    if not isinstance(value, dict):
        return False
    try:
        Chain.from_meta({REDIRECT_CHAIN_META: value})
    except (TypeError, KeyError, ValueError, AttributeError):
        return False
    return True


def _mapping(value: Any) -> bool:
    return isinstance(value, dict)


#: Every key of Scrapy's or the frontier's whose value a stored request carries, with the
#: check its value must pass (else the request is refused) and what that check expects.
TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    # Scrapy's keys that change how a request is fetched (see StoredMeta.honoured).
    "dont_obey_robotstxt": (_flag, "true/false"),
    "allow_offsite": (_flag, "true/false"),
    "download_maxsize": (_count, "a byte count"),
    "download_warnsize": (_count, "a byte count"),
    "download_timeout": (_seconds, "seconds, more than 0"),
    "download_fail_on_dataloss": (_flag, "true/false"),
    "proxy": (lambda value: value is None or _text(value), "a proxy URL"),
    "_auth_proxy": (lambda value: value is None or _text(value), "a proxy URL"),
    DOWNLOAD_SLOT_META: (_text, "a slot name"),
    "bindaddress": (_bind_address, "a host or a [host, port] pair"),
    "max_retry_times": (_count, "a count"),
    # Scrapy's keys that only narrow what is fetched or followed, or count it: honoured.
    "dont_redirect": (_flag, "true/false"),
    "dont_retry": (_flag, "true/false"),
    "dont_cache": (_flag, "true/false"),
    "dont_merge_cookies": (_flag, "true/false"),
    "handle_httpstatus_all": (_flag, "true/false"),
    "handle_httpstatus_list": (_statuses, "a list of statuses"),
    "cookiejar": (_cookie_jar, "a jar id (text or a number)"),
    "referrer_policy": (_text, "a policy name"),
    "depth": (_count, "a count"),
    "retry_times": (_count, "a count"),
    "redirect_times": (_count, "a count"),
    "redirect_ttl": (_count, "a count"),
    "redirect_urls": (_texts, "a list of URLs"),
    "redirect_reasons": (lambda value: isinstance(value, (list, tuple)), "a list"),
    # The frontier's own (bloom_frontier.meta).
    DEDUPE_KEY_META: (_text, "a dedupe key"),
    DEDUPE_KEY_URL_META: (_text, "a URL"),
    DEDUPE_CHECKED_META: (_text, "a URL"),
    FRONTIER_HOST_META: (_text, "a host"),
    FRONTIER_ROBOTS_CLAIM_META: (_text, "a URL"),
    REDIRECT_CHAIN_META: (_chain, "a redirect chain"),
    CANONICAL_OF_META: (_text, "a URL"),
    SHORTENER_META: (_text, "a URL"),
    LEARN_RECHECK_META: (_mapping, "an object"),
}


class StoredMetaRefused(ValueError):
    """A stored request's meta holds a value of the wrong type for its key."""


def _within(value: int, limit: int) -> bool:
    """A size limit ``value`` is no looser than ``limit`` (0: no limit)."""
    return limit == 0 or 0 < value <= limit


@dataclass
class StoredMeta:
    """The crawl's settings a stored request's fetch-changing ``meta`` is judged by
    (:meth:`honoured`), and the count of what was dropped."""

    #: ``ROBOTSTXT_OBEY``.
    robots_obey: bool = True
    #: ``DOWNLOAD_MAXSIZE``, ``DOWNLOAD_WARNSIZE`` (0: no limit).
    max_size: int = default_settings.DOWNLOAD_MAXSIZE
    warn_size: int = default_settings.DOWNLOAD_WARNSIZE
    #: ``DOWNLOAD_TIMEOUT``, seconds.
    timeout: float = default_settings.DOWNLOAD_TIMEOUT
    #: ``DOWNLOAD_FAIL_ON_DATALOSS``.
    fail_on_dataloss: bool = True
    #: ``RETRY_TIMES``.
    retry_times: int = default_settings.RETRY_TIMES
    #: The guard is off (``SSRF_GUARD_ENABLED``) or allows proxies (``SSRF_ALLOW_PROXY``).
    proxies: bool = False
    #: ``DOWNLOAD_BIND_ADDRESS``.
    bind_address: Any = None
    #: The slots ``DOWNLOAD_SLOTS`` names.
    slots: frozenset[str] = frozenset()
    #: Shortener hosts whose resolution requests skip robots.txt and the offsite filter
    #: (``SHORTENERS_ENABLED``, ``SHORTENER_HOSTS``); None when off.
    shorteners: Shorteners | None = field(default_factory=Shorteners)
    #: Where drops are counted (None: not counted).
    stats: StatsCollector | None = None
    _logged: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def from_settings(cls, settings: BaseSettings, stats: StatsCollector | None = None) -> Self:
        guard = settings.getbool("SSRF_GUARD_ENABLED")
        enabled = settings.getbool("SHORTENERS_ENABLED")
        return cls(
            robots_obey=settings.getbool("ROBOTSTXT_OBEY"),
            max_size=settings.getint("DOWNLOAD_MAXSIZE"),
            warn_size=settings.getint("DOWNLOAD_WARNSIZE"),
            timeout=settings.getfloat("DOWNLOAD_TIMEOUT"),
            fail_on_dataloss=settings.getbool("DOWNLOAD_FAIL_ON_DATALOSS"),
            retry_times=settings.getint("RETRY_TIMES"),
            proxies=not guard or settings.getbool("SSRF_ALLOW_PROXY"),
            bind_address=settings.get("DOWNLOAD_BIND_ADDRESS"),
            slots=frozenset(settings.getdict("DOWNLOAD_SLOTS")),
            shorteners=shorteners_from_settings(settings) if enabled else None,
            stats=stats,
        )

    def is_resolution(self, url: str, meta: Mapping[str, Any]) -> bool:
        """A shortener resolution request of a host the crawl resolves (the shortener
        middleware's: it skips robots.txt and the offsite filter, by design)."""
        return (
            self.shorteners is not None
            and meta.get(SHORTENER_META) == url
            and self.shorteners.host_of(url) is not None
        )

    def honoured(self, name: str, value: Any, url: str, meta: Mapping[str, Any]) -> bool:
        """The crawl's settings allow ``meta[name] = value`` on any request for ``url``."""
        if name in ("dont_obey_robotstxt", "allow_offsite"):
            return (
                not value
                or (name == "dont_obey_robotstxt" and not self.robots_obey)
                or (self.is_resolution(url, meta))
            )
        if name == "download_maxsize":
            return _within(value, self.max_size)
        if name == "download_warnsize":
            return _within(value, self.warn_size)
        if name == "download_timeout":
            return value <= self.timeout
        if name == "download_fail_on_dataloss":
            return bool(value) or not self.fail_on_dataloss
        if name in ("proxy", "_auth_proxy"):
            return not value or self.proxies
        if name == DOWNLOAD_SLOT_META:
            return value in self.slots or value == _host(url)
        if name == "bindaddress":
            return _bind_pair(value) == _bind_pair(self.bind_address)
        if name == "max_retry_times":
            return value <= self.retry_times
        return True

    def vet(self, meta: dict[str, Any], url: str) -> dict[str, Any]:
        """``meta`` of a stored request for ``url`` without what the crawl's settings do not
        allow (the same dict when nothing is dropped); :class:`StoredMetaRefused` for a value
        of the wrong type."""
        dropped = []
        for name, value in meta.items():
            check = TYPES.get(name)
            if check is None:
                continue  # a user's own key
            valid, expected = check
            if not valid(value):
                raise StoredMetaRefused(
                    f"meta {name!r} must be {expected}, not {short(repr(value), 60)}"
                )
            if not self.honoured(name, value, url, meta):
                dropped.append(name)
        if not dropped:
            return meta
        for name in dropped:
            self._dropped(name, meta[name], url)
        return {name: value for name, value in meta.items() if name not in dropped}

    def _dropped(self, name: str, value: Any, url: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"{DROPPED_STAT}/{name}")
        if name not in self._logged:
            self._logged.add(name)
            # Scrapy sets every downloaded request's slot and a redirect to another host
            # keeps it: the crawl's own requests drop it too (they go by their own host).
            log = logger.info if name == DOWNLOAD_SLOT_META else logger.warning
            log(
                "A stored request asks for meta %s=%s, which the crawl's settings do not "
                "allow (%s): dropped; counted under %s/%s, logged once",
                name,
                short(repr(value), 60),
                short(url),
                DROPPED_STAT,
                name,
            )


def _host(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


def _bind_pair(value: Any) -> tuple[str, int] | None:
    if not value:
        return None
    if isinstance(value, str):
        return (value, 0)
    return (str(value[0]), int(value[1]))
