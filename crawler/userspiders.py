"""A user's own ``CrawlSpider`` at the project's speed, untouched.

About 99% of the links a page of a real site yields were seen long ago (its navigation),
and a ``CrawlSpider`` spends most of its CPU on them: Scrapy's ``LinkExtractor`` resolves and
checks each anew, then a ``Request`` is built for each and sent through every spider
middleware, to be dropped as seen. :class:`CrawlSpiderLinks` (an extension the add-on
installs) changes two things when the spider opens, for that spider only:

- each rule whose extractor is Scrapy's plain ``LinkExtractor`` gets the memoized drop-in
  :class:`bloom_frontier.links.LinkExtractor` (configured alike: the same links);
- when nothing between the extraction and the frontier's early dedup could see a link
  differently (every rule's ``process_links`` and ``process_request`` are Scrapy's defaults,
  the spider's link-following methods are CrawlSpider's, and the seen-links middleware
  serves the spider: :attr:`bloom_frontier.services.CrawlServices.seen_links`), a rule's
  links certainly seen are dropped as they are extracted, before their ``Request`` is
  built. Counted as the seen-links middleware counts them (``seen/duplicate``,
  ``dupefilter/filtered``), with Scrapy's ``request_dropped`` for the request Scrapy would
  have built (only when something listens). New links go on as before: the same requests,
  ``Referer``, depth, URL-length and offsite outcomes. While learned rules are applied (links
  are sampled for a re-check) a page's links all go the middlewares' way.

The spider's class and its ``rules`` stay as they are (the spider's own copies of its
rules are changed, :func:`bloom_frontier.compat.crawl_spider_rules`); a rule's extractor
reads as before (``rule.link_extractor.allow_res`` ...).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy import signals
from scrapy.link import Link
from scrapy.spiders import CrawlSpider, Rule

from bloom_frontier.compat import crawl_spider_request, crawl_spider_rules
from bloom_frontier.frontier.keys import send_request_dropped
from bloom_frontier.learning.recheck import LearnedRuleRecheck
from bloom_frontier.links import LinkExtractor, before_plain_fragment, fast_extractor
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from bloom_frontier.frontier.keys import RequestKeyer
    from bloom_frontier.services import CrawlServices

logger = logging.getLogger(__name__)

_DEFAULT_RULE = Rule()
#: The methods a CrawlSpider follows its rules' links with: overridden, the links a rule
#: extracts may become requests otherwise.
_FOLLOWING = ("_requests_to_follow", "_build_request", "parse_with_rules", "_parse_response")


def link_key(keyer: RequestKeyer, url: str) -> str | None:
    """``keyer.link_key(url)``, asked of ``url`` before a plain fragment: one keying for a
    page's every ``#section`` link (:func:`bloom_frontier.links.before_plain_fragment`)."""
    return keyer.link_key(before_plain_fragment(url))


def drops_early(spider: CrawlSpider, rules: list[Rule]) -> bool:
    """True if a link of ``rules`` certainly seen may be dropped as it is extracted: each
    link becomes ``CrawlSpider._build_request``'s request, unchanged by the rule."""
    return all(
        getattr(type(spider), name, None) is getattr(CrawlSpider, name, None) for name in _FOLLOWING
    ) and all(
        rule.process_links is _DEFAULT_RULE.process_links
        and rule.process_request is _DEFAULT_RULE.process_request
        for rule in rules
    )


class RuleLinks:
    """A rule's link extractor as the add-on runs it: the memoized one when there is one,
    the rule's own otherwise, its seen links dropped (:meth:`CrawlSpiderLinks.new_links`).
    Reads like the rule's own (its attributes)."""

    def __init__(
        self, original: Any, fast: Any, owner: CrawlSpiderLinks | None, index: int
    ) -> None:
        self.original = original
        self.extractor = fast if fast is not None else original
        self.owner = owner
        self.index = index

    def extract_links(self, response: Response) -> list[Link]:
        if self.owner is None:
            return self.extractor.extract_links(response)  # type: ignore[no-any-return]
        return self.owner.new_links(response, self.index, self.extractor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


class PageLinks:
    """A page's links by the rules so far, by URL: the ``Link`` of each followed (given to
    CrawlSpider), and what the memoized extractor makes the ``Link`` of each dropped
    (:meth:`bloom_frontier.links.LinkExtractor.link_of`). CrawlSpider follows a ``Link``
    once per page however many rules extract it: a later rule's copy of a dropped one is
    dropped silently, of a followed one left to CrawlSpider. ``Link``s of dropped links
    are made only to compare a link with another of its URL."""

    def __init__(self) -> None:
        self.kept: dict[str, list[Link]] = {}
        self.dropped: dict[str, list[tuple[Any, LinkExtractor]]] = {}

    def record(self, kept: list[Link], dropped: list[Any], extractor: LinkExtractor) -> None:
        """Remember a rule's links: ``kept`` followed, ``dropped`` set aside by
        ``extractor``."""
        for link in kept:
            self.kept.setdefault(link.url, []).append(link)
        for source in dropped:
            self.dropped.setdefault(_url_of(source), []).append((source, extractor))

    def dropped_before(self, link: Link) -> bool:
        """True if an earlier rule dropped a link equal to ``link``."""
        earlier = self.dropped.get(link.url, ())
        return any(extractor.link_of(source) == link for source, extractor in earlier)

    def dropped_alike(self, source: Any, extractor: LinkExtractor) -> bool:
        """True if an earlier rule dropped the link ``extractor`` set aside as ``source``
        (its URL and element: the same element makes the same ``Link``)."""
        earlier = self.dropped.get(_url_of(source))
        if not earlier:
            return False
        if any(other == source for other, _ in earlier):
            return True
        link = extractor.link_of(source)
        return any(other.link_of(them) == link for them, other in earlier)

    def kept_alike(self, source: Any, extractor: LinkExtractor) -> Link | None:
        """The ``Link`` of ``source`` if an earlier rule followed one equal to it."""
        earlier = self.kept.get(_url_of(source))
        if not earlier:
            return None
        link = extractor.link_of(source)
        return link if link in earlier else None


def _url_of(source: Any) -> str:
    """The URL of a link the memoized extractor set aside (a ``Link`` or its URL and
    element)."""
    return source.url if isinstance(source, Link) else source[0]  # type: ignore[no-any-return]


class CrawlSpiderLinks:
    """See the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        #: The crawl's services, once the spider is open (extensions are built before
        #: they can be asked for).
        self.services: CrawlServices | None = None
        self.spider: CrawlSpider | None = None
        self.recheck: LearnedRuleRecheck | None = None
        #: Per page (several rules), the links earlier rules gave, each with whether it
        #: was dropped: CrawlSpider follows a link once per page however many rules
        #: extract it, so a later rule's copy is dropped silently, or left to CrawlSpider.
        self._earlier: WeakKeyDictionary[Response, dict[Link, bool]] = WeakKeyDictionary()
        #: The same with the memoized extractors (:class:`PageLinks`).
        self._pages: WeakKeyDictionary[Response, PageLinks] = WeakKeyDictionary()
        self._several = False
        #: True if every rule's extractor is the memoized one: their pages' links are then
        #: compared in :class:`PageLinks`, not as ``Link``s.
        self._all_memoized = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        extension = cls(crawler)
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        return extension

    def spider_opened(self, spider: Spider) -> None:
        """Give the spider's rules their extractors (see the module docstring)."""
        if not isinstance(spider, CrawlSpider):
            return
        rules = crawl_spider_rules(spider)
        if not rules:
            return
        self.spider = spider
        self.services = services_of(self.crawler)
        self.recheck = self.crawler.get_spider_middleware(LearnedRuleRecheck)
        self._several = len(rules) > 1
        owner = self if drops_early(spider, rules) else None
        fast: dict[int, Any] = {}  # per extractor: rules may share one
        for index, rule in enumerate(rules):
            original = rule.link_extractor
            if id(original) not in fast:
                fast[id(original)] = fast_extractor(original)
            rule.link_extractor = RuleLinks(original, fast[id(original)], owner, index)  # type: ignore[assignment]
        memoized = sum(
            1 for rule in rules if rule.link_extractor.extractor is not rule.link_extractor.original
        )  # type: ignore[attr-defined]
        self._all_memoized = memoized == len(rules)
        logger.info(
            "%s: %d of %d rules with the memoized LinkExtractor; links certainly seen %s",
            type(spider).__name__,
            memoized,
            len(rules),
            "dropped before their requests are built"
            if owner is not None
            else "built as requests (a rule's process_links/process_request or the "
            "spider's own link following could see them)",
        )

    def new_links(self, response: Response, index: int, extractor: Any) -> list[Link]:
        """The links of ``response`` rule ``index``'s ``extractor`` gives, less those
        certainly seen, counted and reported as dropped; all of them when the seen-links
        middleware does not serve the spider or learned rules may sample them. With the
        memoized extractor (for every rule, when there are several), a link dropped gets
        no text, no ``Link``, unless ``request_dropped`` has a receiver (or, with several
        rules, another rule's link of the page has its URL)."""
        services = self.services
        if services is None or services.seen_links is None:
            return extractor.extract_links(response)  # type: ignore[no-any-return]
        if self.recheck is not None and self.recheck.sampling():
            return extractor.extract_links(response)  # type: ignore[no-any-return]
        if isinstance(extractor, LinkExtractor):
            if not self._several:
                return self._new_links_alone(index, extractor, response)
            if self._all_memoized:
                return self._new_links_among(index, extractor, response)
        links: list[Link] = extractor.extract_links(response)
        if not links:
            return links
        frontier = services.frontier
        keyer = frontier.keyer
        earlier = self._earlier.setdefault(response, {}) if self._several else None
        kept: list[Link] = []
        dropped: list[tuple[Link, str]] = []
        for link in links:
            if earlier is not None:
                was_dropped = earlier.get(link)
                if was_dropped is not None:
                    if not was_dropped:
                        kept.append(link)  # CrawlSpider skips it: followed already
                    continue
            key = link_key(keyer, link.url)
            if key is not None and frontier.seen_link(link.url, key):
                dropped.append((link, key))
            else:
                kept.append(link)
        if earlier is not None:
            earlier.update(dict.fromkeys(kept, False))
            earlier.update((link, True) for link, _ in dropped)
        self._report(
            index, [(link.url, key) for link, key in dropped], [link for link, _ in dropped]
        )
        return kept

    def _new_links_alone(
        self, index: int, extractor: LinkExtractor, response: Response
    ) -> list[Link]:
        """:meth:`new_links` of the spider's one rule, its extractor the memoized one."""
        frontier = self.services.frontier  # type: ignore[union-attr]
        keyer = frontier.keyer

        def seen(url: str) -> tuple[str, str] | None:
            key = link_key(keyer, url)
            return (url, key) if key is not None and frontier.seen_link(url, key) else None

        kept, dropped = extractor.extract_links_except(response, seen)  # type: ignore[arg-type]
        self._report(
            index, [pair for pair, _ in dropped], (extractor.link_of(link) for _, link in dropped)
        )
        return kept

    def _new_links_among(
        self, index: int, extractor: LinkExtractor, response: Response
    ) -> list[Link]:
        """:meth:`new_links` of rule ``index`` of several, its extractor the memoized one:
        a link dropped gets no ``Link`` unless a link of the page by another rule had its
        URL (:class:`PageLinks`)."""
        frontier = self.services.frontier  # type: ignore[union-attr]
        keyer = frontier.keyer
        page = self._pages.get(response)
        if page is None:
            page = self._pages[response] = PageLinks()

        def seen(url: str) -> tuple[str, str] | None:
            key = link_key(keyer, url)
            return (url, key) if key is not None and frontier.seen_link(url, key) else None

        found, aside = extractor.extract_links_except(response, seen)  # type: ignore[arg-type]
        kept = [link for link in found if not page.dropped_before(link)]
        dropped: list[tuple[tuple[str, str], Any]] = []
        for pair, source in aside:
            if page.dropped_alike(source, extractor):
                continue
            link = page.kept_alike(source, extractor)
            if link is not None:
                kept.append(link)  # CrawlSpider skips it: followed already
            else:
                dropped.append((pair, source))
        # Recorded for the next rules only: CrawlSpider follows a rule's own repeats
        # (``unique=False``) as often as they come.
        page.record(kept, [source for _, source in dropped], extractor)
        self._report(
            index, [pair for pair, _ in dropped], (extractor.link_of(link) for _, link in dropped)
        )
        return kept

    def _report(self, index: int, dropped: list[tuple[str, str]], links: Iterable[Link]) -> None:
        """Count rule ``index``'s ``dropped`` links (URL, key) as duplicates and send
        ``request_dropped`` for the requests Scrapy would have built for their ``links``."""
        if not dropped:
            return
        self.services.frontier.keyer.duplicates(dropped)  # type: ignore[union-attr]
        spider = self.spider
        assert spider is not None
        send_request_dropped(
            self.crawler, (crawl_spider_request(spider, index, link) for link in links)
        )
