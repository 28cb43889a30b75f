"""``LearnedRuleRecheck``: fetch a sample of the URLs an applied learned rule merged.

Once a rule drops a parameter, its variants are never fetched again, so nothing would ever
show the rule wrong. This spider middleware (placed above the link batch, so it sees every
link a page yields) sends a share ``CANON_LEARN_RECHECK`` of the links a learned rule
changed to the downloader anyway (each URL once), as a ``dont_filter`` copy marked for
re-checking; when its content differs from the page its key was merged into, the rule is
revoked
(:meth:`bloom_frontier.learning.extension.ParamRuleLearning`). The original link goes through the
batch as usual.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterable
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


def _names(key: str) -> set[str]:
    query = key.partition("?")[2]
    return {param.partition("=")[0].lower() for param in query.split("&")} if query else set()


class LearnedRuleRecheck:
    """See the module docstring."""

    def __init__(
        self, services: CrawlServices, rate: float, rng: random.Random | None = None
    ) -> None:
        self.services = services
        self.rate = rate
        self.rng = rng or random.Random()
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
        was merged into, the parameters dropped) if it is sampled among the links a learned
        rule changed, else None. By URL, so a spider that drops seen links before building
        their requests offers them too
        (:meth:`bloom_frontier.middlewares.linkbatch.SeenLinksMiddleware.requests_for`)."""
        learning = self.services.learner
        if learning is None or not learning.has_applied or self.rng.random() >= self.rate:
            return None
        try:
            learned = dedupe_key(url, learning.live.current())
            plain = dedupe_key(url, learning.live.without_learned())
        except InvalidURL:
            return None
        dropped = _names(plain) - _names(learned)
        if not dropped or plain in self._rechecked:
            return None
        if len(self._rechecked) >= MAX_REMEMBERED:
            self._rechecked.clear()
        self._rechecked.add(plain)
        return {"key": learned, "params": sorted(dropped)}
