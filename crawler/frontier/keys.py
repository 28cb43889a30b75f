"""Dedupe keys for requests: computed once per request and carried in its ``meta``,
rejections counted by reason."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from crawler.canonical import InvalidURL, dedupe_key
from crawler.canonical.rules import DEFAULT_RULES, RuleSet, rules_from_settings
from crawler.frontier import META_CHECKED, META_KEY, META_KEY_URL

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)


class RequestKeyer:
    """Gives requests their dedupe keys and records the verdicts in stats and the log.

    Stats: ``dupefilter/invalid/<reason>`` for URLs that cannot be keyed (dropped),
    ``seen/new`` and ``seen/duplicate`` (alias ``dupefilter/filtered``, Scrapy's own name)
    for the seen filter's answers.
    """

    def __init__(
        self, stats: StatsCollector, debug: bool = False, rules: RuleSet = DEFAULT_RULES
    ) -> None:
        self.stats = stats
        self.debug = debug
        self.rules = rules
        self._logged_reasons: set[str] = set()
        self._logged_duplicate = False

    @classmethod
    def from_settings(cls, stats: StatsCollector, settings: BaseSettings) -> Self:
        """The crawl's keyer: ``CANON_HOST_RULES`` applied, ``DUPEFILTER_DEBUG`` honoured."""
        return cls(stats, settings.getbool("DUPEFILTER_DEBUG"), rules_from_settings(settings))

    def keyed(self, requests: Sequence[Request]) -> list[tuple[Request, str]]:
        """Pair each request with its dedupe key; requests whose URL is invalid are dropped,
        logged with the reason and counted."""
        pairs = []
        for request in requests:
            try:
                key = carried_key(request, self.rules) or dedupe_key(request.url, self.rules)
            except InvalidURL as exc:
                self.stats.inc_value(f"dupefilter/invalid/{exc.reason}")
                first = exc.reason not in self._logged_reasons
                self._logged_reasons.add(exc.reason)
                level = logging.INFO if first or self.debug else logging.DEBUG
                logger.log(level, "Rejected %s: %s", request, exc)
                continue
            pairs.append((request, key))
        return pairs

    def verdicts(
        self, pairs: Sequence[tuple[Request, str]], fresh: Sequence[bool]
    ) -> list[Request]:
        """Mark the new requests as checked and count both kinds; return the new ones."""
        admitted = []
        for (request, key), is_new in zip(pairs, fresh, strict=True):
            if is_new:
                carry_key(request, key)
                # The URL, not True: a request copied with another URL must be checked again.
                request.meta[META_CHECKED] = request.url
                admitted.append(request)
            elif self.debug or not self._logged_duplicate:
                logger.debug("Filtered duplicate request %s (key %s)", request, key)
                self._logged_duplicate = True
        self.stats.inc_value("seen/new", len(admitted))
        duplicates = len(pairs) - len(admitted)
        if duplicates:
            self.stats.inc_value("seen/duplicate", duplicates)
            self.stats.inc_value("dupefilter/filtered", duplicates)
        return admitted


def was_checked(request: Request) -> bool:
    """True if this very URL was already checked against the seen filter in a batch."""
    return request.meta.get(META_CHECKED) == request.url


def carry_key(request: Request, key: str) -> None:
    """Store ``key`` in ``request.meta`` as the dedupe key of the request's current URL."""
    request.meta[META_KEY] = key
    request.meta[META_KEY_URL] = request.url


def carried_key(request: Request, rules: RuleSet = DEFAULT_RULES) -> str | None:
    """The key ``request.meta`` carries for this very URL under ``rules``, or None."""
    key = request.meta.get(META_KEY)
    if (
        isinstance(key, str)
        and request.meta.get(META_KEY_URL, request.meta.get(META_CHECKED)) == request.url
        and key.startswith(rules.version + "|")
    ):
        return key
    return None


def url_key(request: Request, url: str, rules: RuleSet = DEFAULT_RULES) -> str:
    """The dedupe key of ``url``, computed once per request: when ``url`` is the URL of
    ``request`` (a response's URL usually is) and the request is a GET, whose key is its
    URL's, the key the request carries, else computed (and carried). Raises
    :class:`~crawler.canonical.InvalidURL`."""
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
