"""``LearnedRuleRecheck``: fetch a sample of the URLs an applied learned rule merged.

Once a rule drops a parameter, its variants are never fetched again, so nothing would ever
show the rule wrong. This spider middleware (placed above the link batch, so it sees every
link a page yields) tells the learner of each link a learned rule changed; the learner
(:class:`MergedLinks`, :meth:`bloom_frontier.learning.extension.ParamRuleLearning.wants_recheck`)
remembers it, bounded, under the key it was merged into, and picks the links to fetch anyway
(each URL once, as a ``dont_filter`` copy marked for re-checking), **stratified over the
rule's pattern**, once the page they were merged into is fetched:

* a link merged into a page of a shape (:func:`bloom_frontier.learning.evidence.page_shape`)
  no comparison covered is always re-checked: a parameter neutral on one-item lists may sort
  longer ones;
* a link merged into a page whose path no comparison covered is re-checked while the rule's
  credit lasts: one at first, then for each link merged ``CANON_LEARN_RECHECK`` or, while
  the rule is young, more (``RECHECK_TRUST`` in the extension: about sqrt(4 n) of n paths
  get compared), spent on paths not yet sampled only, so sampling goes on through the crawl
  and covers the pattern;
* links of paths already compared are not re-checked.

When a re-check's content differs from the page its key was merged into, the rule is revoked
and every link it merged that is remembered is queued again (``learn/requeued``). The
original link goes through the batch as usual.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.exceptions import NotConfigured

from bloom_frontier.canonical import InvalidURL, dedupe_key
from bloom_frontier.meta import LEARN_RECHECK_META
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from bloom_frontier.services import CrawlServices


#: Re-checked URLs remembered (to re-check each once); forgotten all at once when full.
MAX_REMEMBERED = 100_000
#: Links a learned rule merged that are remembered (to re-check and to queue again when the
#: rule is revoked); the oldest are forgotten past it (``learn/merged_forgotten``).
MAX_MERGED = 100_000


def names_of(key: str) -> set[str]:
    """The parameter names of a key's query, lower-case."""
    query = key.partition("?")[2]
    return {param.partition("=")[0].lower() for param in query.split("&")} if query else set()


class MergedLinks:
    """Links learned rules merged, by the key they were merged into: URL -> the parameters
    the rules dropped. Bounded by ``max_links``, the oldest keys forgotten first."""

    def __init__(self, max_links: int = MAX_MERGED) -> None:
        self.max_links = max_links
        self._by_key: OrderedDict[str, dict[str, tuple[str, ...]]] = OrderedDict()
        self.count = 0
        self.forgotten = 0

    def add(self, key: str, url: str, names: tuple[str, ...]) -> bool:
        """Remember ``url`` merged into ``key`` by dropping ``names``; False if known."""
        links = self._by_key.setdefault(key, {})
        if url in links:
            return False
        links[url] = names
        self.count += 1
        while self.count > self.max_links:
            _, oldest = self._by_key.popitem(last=False)
            self.count -= len(oldest)
            self.forgotten += len(oldest)
        return True

    def of(self, key: str) -> dict[str, tuple[str, ...]]:
        """The links remembered as merged into ``key``."""
        return self._by_key.get(key, {})

    def take(self, merged_by: Callable[[str, tuple[str, ...]], bool]) -> list[str]:
        """Forget and return the links for which ``merged_by(key, names)`` is true (a
        revoked rule's: they are queued again)."""
        taken = []
        for key in list(self._by_key):
            links = self._by_key[key]
            for url, names in list(links.items()):
                if merged_by(key, names):
                    taken.append(url)
                    del links[url]
            if not links:
                del self._by_key[key]
        self.count -= len(taken)
        return taken


class LearnedRuleRecheck:
    """See the module docstring."""

    def __init__(self, services: CrawlServices, rate: float) -> None:
        self.services = services
        self.rate = rate
        self._rechecked: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        rate = crawler.settings.getfloat("CANON_LEARN_RECHECK")
        if rate <= 0 or crawler.settings.get("CANON_LEARN") == "off":
            raise NotConfigured
        return cls(services_of(crawler), rate)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterable[Any]:
        for output in result:
            yield output
            recheck = self.recheck(output)
            if recheck is not None:
                yield recheck

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        async for output in result:
            yield output
            recheck = self.recheck(output)
            if recheck is not None:
                yield recheck

    def recheck(self, output: Any) -> Request | None:
        """A re-check copy of ``output`` if it is a link sampled among those a learned rule
        changed, else None."""
        if not isinstance(output, Request) or output.dont_filter:
            return None
        sampled = self.sample(output.url)
        if sampled is None:
            return None
        return output.replace(dont_filter=True, meta={**output.meta, LEARN_RECHECK_META: sampled})

    def sampling(self) -> bool:
        """True if :meth:`sample` may pick links now (learned rules are applied): a spider
        offering a page's links asks once per page, not once per link."""
        learning = self.services.learner
        return learning is not None and learning.has_applied

    def sample(self, url: str) -> dict[str, Any] | None:
        """What a re-check of the link ``url`` carries in ``meta[LEARN_RECHECK_META]`` (the key it
        was merged into, the parameters dropped) if it is picked among the links a learned
        rule changed (see the module docstring), else None. By URL, so a spider that drops
        seen links before building their requests offers them too
        (:meth:`bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware.requests_for`)."""
        learning = self.services.learner
        if learning is None or not learning.has_applied:
            return None
        try:
            learned = dedupe_key(url, learning.live.current())
            plain = dedupe_key(url, learning.live.without_learned())
        except InvalidURL:
            return None
        dropped = tuple(sorted(names_of(plain) - names_of(learned)))
        if not dropped or plain in self._rechecked or learning.evidence.page(plain) is not None:
            return None  # no rule changed it, re-checked already, or fetched as itself
        if not learning.merged(learned, url, dropped, self.rate):
            return None
        return self.picked(plain, learned, dropped)

    def was_rechecked(self, plain: str) -> bool:
        """True if the URL keyed ``plain`` without learned rules was fetched for a re-check
        (its content reached the spider: a revocation need not queue it again)."""
        return plain in self._rechecked

    def picked(self, plain: str, learned: str, dropped: tuple[str, ...]) -> dict[str, Any] | None:
        """The re-check's meta for a link picked (keyed ``plain`` without learned rules),
        None if it was re-checked already; remembered so it is re-checked once."""
        if plain in self._rechecked:
            return None
        if len(self._rechecked) >= MAX_REMEMBERED:
            self._rechecked.clear()
        self._rechecked.add(plain)
        return {"key": learned, "params": list(dropped)}
