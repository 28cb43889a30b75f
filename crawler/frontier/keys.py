"""Dedupe keys for requests: computed once per batch, rejections counted by reason."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from crawler.canonical import InvalidURL, dedupe_key
from crawler.canonical.rules import DEFAULT_RULES, RuleSet, rules_from_settings
from crawler.frontier import META_CHECKED, META_KEY

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
        self.rules_source: Callable[[], RuleSet] | None = None
        self._logged_reasons: set[str] = set()
        self._logged_duplicate = False

    @classmethod
    def from_settings(cls, stats: StatsCollector, settings: BaseSettings) -> Self:
        """The crawl's keyer: ``CANON_HOST_RULES`` applied, ``DUPEFILTER_DEBUG`` honoured."""
        return cls(stats, settings.getbool("DUPEFILTER_DEBUG"), rules_from_settings(settings))

    def use_rules(self, source: Callable[[], RuleSet]) -> None:
        """Key each batch with ``source()`` from now on: rules that change while the crawl
        runs (learned rules, :mod:`crawler.learning.state`)."""
        self.rules_source = source

    def keyed(self, requests: Sequence[Request]) -> list[tuple[Request, str]]:
        """Pair each request with its dedupe key; requests whose URL is invalid are dropped,
        logged with the reason and counted."""
        pairs = []
        rules = self.rules if self.rules_source is None else self.rules_source()
        for request in requests:
            try:
                key = dedupe_key(request.url, rules)
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
                request.meta[META_KEY] = key
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
