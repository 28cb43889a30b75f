"""Dedupe keys for requests: computed once per request and carried in its ``meta``,
rejections counted by reason.

A request's key is its URL's dedupe key (:func:`bloom_frontier.canonical.dedupe_key`); a request
with another method than GET (a form POST, a HEAD) has that key extended with the method and
a digest of its body (:func:`request_key`), so two POSTs to one URL with different bodies are
two requests, as Scrapy's own fingerprint has them. Links outside the spider's
``allowed_domains`` get no key at all (:class:`OffsiteFilter`): never admitted, never queued.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from pydispatch.dispatcher import getAllReceivers, liveReceivers
from scrapy import signals
from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware
from scrapy.utils.httpobj import urlparse_cached
from w3lib.url import safe_url_string

from bloom_frontier.canonical import InvalidURL, dedupe_key
from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet, rules_from_settings
from bloom_frontier.logtext import short
from bloom_frontier.meta import (
    DEDUPE_CHECKED_META,
    DEDUPE_KEY_META,
    DEDUPE_KEY_RULES_META,
    DEDUPE_KEY_URL_META,
)

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

    from bloom_frontier.learning.state import LiveRules

logger = logging.getLogger(__name__)

T = TypeVar("T")


#: URLs whose keys a :class:`RequestKeyer` remembers (about 250 bytes each): a site's
#: navigation links, repeated on every page, are keyed once.
KEY_MEMO_SIZE = 100_000


def request_key(request: Request, rules: RuleSet = DEFAULT_RULES) -> str:
    """The dedupe key of ``request``: its URL's key for GET, else that key, the method and
    a digest of the body. Raises :class:`~bloom_frontier.canonical.InvalidURL`.

    >>> request_key(Request("https://example.com/a?utm_source=x"))
    'r2|https://example.com/a'
    >>> request_key(Request("https://example.com/a", method="POST", body=b"q=1"))
    'r2|https://example.com/a POST sha256:02f5e6e36c0369d5dbc9195fb0cf6d5e'
    """
    key = dedupe_key(request.url, rules)
    if request.method == "GET":
        return key
    digest = hashlib.sha256(request.body).hexdigest()[:32]
    return f"{key} {request.method} sha256:{digest}"


class OffsiteFilter:
    """Keeps links outside the spider's ``allowed_domains`` out of the frontier, by the
    policy of the crawl's own ``OffsiteMiddleware`` (Scrapy's, or a project's subclass with
    its own ``should_follow``): ``dont_filter`` and ``meta["allow_offsite"]`` requests pass,
    as there. Counted as Scrapy counts them: ``offsite/filtered`` and ``offsite/domains``.
    A crawl that switched Scrapy's ``OffsiteMiddleware`` off filters nothing here either.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._middleware: OffsiteMiddleware | None = None
        self._looked_up = False
        self._domains: set[str] = set()

    def _policy(self) -> OffsiteMiddleware | None:
        if not self._looked_up and self.crawler.spider is not None:
            try:
                self._middleware = self.crawler.get_downloader_middleware(OffsiteMiddleware)
            except RuntimeError:  # no engine yet (start requests are judged later, again)
                return None
            except (AttributeError, TypeError):  # an engine without a downloader's middlewares
                self._middleware = None  # (a scheduler driven alone, as in tests): no policy
            self._looked_up = True
        return self._middleware

    def refuses(self, request: Request) -> bool:
        """True (and counted) if ``request`` is off the site."""
        policy, spider = self._policy(), self.crawler.spider
        if (
            policy is None
            or spider is None
            or request.dont_filter
            or request.meta.get("allow_offsite")
            or policy.should_follow(request, spider)
        ):
            return False
        stats = self.crawler.stats
        assert stats is not None
        domain = urlparse_cached(request).hostname
        if domain and domain not in self._domains:
            self._domains.add(domain)
            logger.debug("Filtered offsite request to %r: %s", short(domain), short(request))
            stats.inc_value("offsite/domains")
        stats.inc_value("offsite/filtered")
        return True


def _safe_url_key(url: str, rules: RuleSet) -> str:
    """The dedupe key of a link's ``url``, made safe as a ``Request`` would make it."""
    return dedupe_key(safe_url_string(url), rules)


def send_request_dropped(crawler: Crawler, requests: Iterable[Request]) -> None:
    """Fire Scrapy's ``request_dropped`` for ``requests`` the frontier did not admit, as
    Scrapy's scheduler does for the requests its dupefilter refuses. For answers that arrive
    later (the shared frontier), call it when they do. Nothing to do when no receiver
    listens (asked once per call: a page's duplicates are hundreds)."""
    receivers = getAllReceivers(crawler.signals.sender, signals.request_dropped)
    if next(liveReceivers(receivers), None) is None:
        return
    for request in requests:
        crawler.signals.send_catch_log(
            signal=signals.request_dropped, request=request, spider=crawler.spider
        )


class RequestKeyer:
    """Gives requests their dedupe keys and records the verdicts in stats and the log.

    Stats: ``dupefilter/invalid/<reason>`` for URLs that cannot be keyed (dropped),
    ``dupefilter/failed/<exception>`` for requests whose keying raised anything else (a
    library's error on one URL: dropped, logged at ERROR once per cause with its traceback,
    so the page's other links still go through),
    ``offsite/filtered`` for links off the site (dropped, with an :attr:`offsite` filter),
    ``seen/new`` and ``seen/duplicate`` (alias ``dupefilter/filtered``, Scrapy's own name)
    for the seen filter's answers.
    """

    def __init__(
        self, stats: StatsCollector, debug: bool = False, rules: RuleSet = DEFAULT_RULES
    ) -> None:
        self.stats = stats
        self.debug = debug
        self.rules = rules
        #: Set by a crawl (:meth:`for_crawler`); None: every host is on the site.
        self.offsite: OffsiteFilter | None = None
        #: The crawl's learned rules, when they may change while it runs (:meth:`use_rules`).
        self.live: LiveRules | None = None
        self._logged_reasons: set[str] = set()
        self._logged_failures: set[tuple[str, str]] = set()
        self._logged_duplicate = False
        #: URL -> key under :attr:`_memo_rules` (keys are pure functions of the two).
        self._memo: dict[str, str] = {}
        self._memo_rules: RuleSet | None = None

    @classmethod
    def from_settings(cls, stats: StatsCollector, settings: BaseSettings) -> Self:
        """The crawl's keyer: ``CANON_HOST_RULES`` applied, ``DUPEFILTER_DEBUG`` honoured."""
        return cls(stats, settings.getbool("DUPEFILTER_DEBUG"), rules_from_settings(settings))

    def for_crawler(self, crawler: Crawler) -> Self:
        """This keyer, keeping links off the crawl's site out (:class:`OffsiteFilter`)."""
        self.offsite = OffsiteFilter(crawler)
        return self

    def use_version(self, version: str) -> None:
        """Key under the version prefix ``version`` (that of the seen filter, when it was
        rebuilt with learned rules on top of these, :mod:`bloom_frontier.seen.layers`)."""
        if version != self.rules.version:
            self.rules = replace(self.rules, version=version)

    def use_rules(self, live: LiveRules) -> None:
        """Key each batch with ``live.current()`` from now on: rules that change while the
        crawl runs (learned rules, :mod:`bloom_frontier.learning.state`). A key carried in a
        request's ``meta`` serves only under the version it was made under."""
        self.live = live

    @property
    def rules_version(self) -> str:
        """The learned rules' version the last keys were made under ('': rules that never
        change), for the admission to check against the crawl's."""
        return "" if self.live is None else str(self.live.version)

    def _carried(self, request: Request, rules: RuleSet) -> str | None:
        """The key ``request`` carries, if it is its key under ``rules``: with learned
        rules, one this keyer made under their current version, or one made without them
        (no version: redirects, canonical hints) on a host none of them touches."""
        key = carried_key(request, rules)
        live = self.live
        if key is None or live is None:
            return key
        made_under = request.meta.get(DEDUPE_KEY_RULES_META)
        if made_under == live.version or (made_under is None and not live.touches(key_host(key))):
            return key
        return None

    def _carry(self, request: Request, key: str) -> None:
        carry_key(request, key)
        if self.live is not None:
            request.meta[DEDUPE_KEY_RULES_META] = self.live.version

    def current_rules(self) -> RuleSet:
        """The rules keys are made under now (learned ones included, when they change)."""
        return self.rules if self.live is None else self.live.current()

    def url_key(self, url: str, rules: RuleSet) -> str:
        """:func:`~bloom_frontier.canonical.dedupe_key` of ``url`` under ``rules``, memoized per URL
        (at most :data:`KEY_MEMO_SIZE`, the oldest forgotten first; all forgotten when the
        rules change: a learned rule, another version). Raises
        :class:`~bloom_frontier.canonical.InvalidURL` (not memoized)."""
        if rules is not self._memo_rules:
            self._memo, self._memo_rules = {}, rules
        key = self._memo.get(url)
        if key is None:
            key = dedupe_key(url, rules)
            self._remember(url, key)
        return key

    def _remember(self, url: str, key: str) -> None:
        if len(self._memo) >= KEY_MEMO_SIZE:
            del self._memo[next(iter(self._memo))]
        self._memo[url] = key

    def link_key(self, url: str) -> str | None:
        """The key a GET ``Request(url)`` for a link would get (its URL is w3lib's
        ``safe_url_string`` of ``url``, as Scrapy makes it), without building the request;
        None if it cannot be keyed (not counted: its batch rejects its request and counts
        it). Memoized per link URL (:meth:`url_key`)."""
        rules = self.current_rules()
        key = self._memo.get(url) if rules is self._memo_rules else None
        if key is None:
            try:
                key = self.url_key(safe_url_string(url), rules)
            except Exception:  # InvalidURL, or a failure :meth:`keyed` counts
                return None
            if url not in self._memo:
                self._remember(url, key)
        return key

    def _request_key(self, request: Request, rules: RuleSet) -> str:
        """:func:`request_key`, memoized per URL for GET requests."""
        if request.method == "GET":
            return self.url_key(request.url, rules)
        return request_key(request, rules)

    def key_of(self, request: Request) -> str | None:
        """``request``'s key, carried in its ``meta`` for its batch; None (not counted: its
        batch rejects it and counts it) if it cannot be keyed."""
        rules = self.current_rules()
        key = self._carried(request, rules)
        if key is None:
            try:
                key = self._request_key(request, rules)
            except Exception:  # InvalidURL, or a failure :meth:`keyed` counts
                return None
            self._carry(request, key)
        return key

    def merged_by_learned(self, request: Request, key: str) -> bool:
        """True if ``key`` (``request``'s, from :meth:`key_of`) is not the key the request
        has without the learned rules: a learned rule merged it with another URL. Such a
        key is trusted only by an admission that checks its rules' version (a rule revoked
        a moment ago may still be in force here)."""
        return self._merged(request.url, key, request_key, request)

    def link_merged_by_learned(self, url: str, key: str) -> bool:
        """:meth:`merged_by_learned` for a link's URL and its :meth:`link_key`."""
        return self._merged(url, key, _safe_url_key, url)

    def _merged(
        self, url: str, key: str, key_under: Callable[[T, RuleSet], str], subject: T
    ) -> bool:
        """True if ``key_under(subject, rules)`` without the learned rules is not ``key``;
        asked (nothing built) only when a learned rule may apply: most links never are."""
        live = self.live
        # Learned rules drop query parameters only: a URL without a query keys alike.
        if live is None or "?" not in url or not live.touches(key_host(key)):
            return False
        try:
            return key != key_under(subject, live.without_learned())
        except InvalidURL:
            return True

    def keyed(self, requests: Sequence[Request]) -> list[tuple[Request, str]]:
        """Pair each request with its dedupe key; requests whose URL is invalid or whose
        keying fails are dropped, logged with the reason and counted, as are requests off
        the site."""
        pairs = []
        rules = self.current_rules()
        for request in requests:
            if self.offsite is not None and self.offsite.refuses(request):
                continue
            try:
                key = self._carried(request, rules) or self._request_key(request, rules)
            except InvalidURL as exc:
                self.stats.inc_value(f"dupefilter/invalid/{exc.reason}")
                first = exc.reason not in self._logged_reasons
                self._logged_reasons.add(exc.reason)
                level = logging.INFO if first or self.debug else logging.DEBUG
                logger.log(level, "Rejected %s: %s", request, exc)
                continue
            except Exception as exc:
                self._failed(request, exc)
                continue
            pairs.append((request, key))
        return pairs

    def _failed(self, request: Request, exc: Exception) -> None:
        """Count a request whose keying raised ``exc``; log it at ERROR, with the traceback,
        the first time this cause is met (a library's error repeats on every such URL)."""
        name = type(exc).__name__
        self.stats.inc_value(f"dupefilter/failed/{name}")
        cause = (name, str(exc))
        if cause in self._logged_failures and not self.debug:
            logger.debug("Cannot key %s: %s: %s", short(request), name, short(exc))
            return
        self._logged_failures.add(cause)
        logger.error(
            "Cannot key %s, dropped (counted as dupefilter/failed/%s; further URLs failing "
            "the same way are logged at DEBUG): %s: %s",
            short(request),
            name,
            name,
            short(exc),
            exc_info=exc,
        )

    def verdicts(
        self, pairs: Sequence[tuple[Request, str]], fresh: Sequence[bool]
    ) -> list[Request]:
        """Mark the new requests as checked and count both kinds; return the new ones."""
        admitted = []
        for (request, key), is_new in zip(pairs, fresh, strict=True):
            if is_new:
                self._carry(request, key)
                # The URL, not True: a request copied with another URL must be checked again.
                request.meta[DEDUPE_CHECKED_META] = request.url
                admitted.append(request)
            elif self.debug or not self._logged_duplicate:
                self._log_duplicate(request, key)
        self.stats.inc_value("seen/new", len(admitted))
        self.count_duplicates(len(pairs) - len(admitted))
        return admitted

    def duplicates(self, pairs: Sequence[tuple[Request | str, str]]) -> None:
        """Count (and log, as :meth:`verdicts` does) requests (or links, by URL) found seen
        before their batch, with their keys."""
        if self.debug:
            for request, key in pairs:
                self._log_duplicate(request, key)
        elif pairs and not self._logged_duplicate:
            self._log_duplicate(*pairs[0])
        self.count_duplicates(len(pairs))

    def count_duplicates(self, duplicates: int) -> None:
        if duplicates:
            self.stats.inc_value("seen/duplicate", duplicates)
            self.stats.inc_value("dupefilter/filtered", duplicates)

    def _log_duplicate(self, request: Request | str, key: str) -> None:
        logger.debug("Filtered duplicate request %s (key %s)", short(request), short(key))
        self._logged_duplicate = True


def was_checked(request: Request) -> bool:
    """True if this very URL was already checked against the seen filter in a batch."""
    return request.meta.get(DEDUPE_CHECKED_META) == request.url


def carry_key(request: Request, key: str) -> None:
    """Store ``key`` in ``request.meta`` as the dedupe key of the request's current URL."""
    request.meta[DEDUPE_KEY_META] = key
    request.meta[DEDUPE_KEY_URL_META] = request.url


def carried_key(request: Request, rules: RuleSet = DEFAULT_RULES) -> str | None:
    """The key ``request.meta`` carries for this very URL under ``rules``, or None."""
    key = request.meta.get(DEDUPE_KEY_META)
    if (
        isinstance(key, str)
        and request.meta.get(DEDUPE_KEY_URL_META, request.meta.get(DEDUPE_CHECKED_META))
        == request.url
        and key.startswith(rules.version + "|")
    ):
        return key
    return None


def url_key(request: Request, url: str, rules: RuleSet = DEFAULT_RULES) -> str:
    """The dedupe key of ``url``, computed once per request: when ``url`` is the URL of
    ``request`` (a response's URL usually is) and the request is a GET, whose key is its
    URL's, the key the request carries, else computed (and carried). Raises
    :class:`~bloom_frontier.canonical.InvalidURL`."""
    if url != request.url or request.method != "GET":
        return dedupe_key(url, rules)
    key = carried_key(request, rules)
    if key is None:
        key = dedupe_key(url, rules)
        carry_key(request, key)
    return key


def key_host(key: str) -> str | None:
    """The host of a URL-form key, spelled as stage 1 spells it; None for a provider
    identity. The rules rewrite a URL's path and query, never its authority.

    >>> key_host("r2|https://xn--bcher-kva.example:8080/a?b=1")
    'xn--bcher-kva.example'
    >>> key_host("r2|youtube:kJQP7kiw5Fk") is None
    True
    """
    url = key.partition("|")[2]
    if "://" not in url:
        return None
    host = urlsplit(url).hostname
    return host.rstrip(".") if host else None
