"""``LearnedRuleGate``: a request taken from the queue is keyed again under the rules in
force, so a URL is never fetched twice because its key changed between two moments of the
crawl.

A link is keyed when its page is handled; rules may change before its request leaves the
queue: a rule learned (``CANON_LEARN="apply"``), or the seen filter rebuilt under new rules
(``scrapy rebuild-filter``: the requests queued before it carry keys of the old version).
This downloader middleware, before anything is downloaded, keys again each request whose
carried key may no longer be its key: one carrying another version prefix than the crawl's,
or one of a host a learned rule touches (any other request keeps the key the frontier made
and it carries, keyed nothing). Then:

* its key under the rules in force differs and is already seen (another URL the new rules
  merge with it was admitted): dropped;
* on a host a learned rule touches, its key under the rules in force and its keys under
  the crawl's earlier learned rules (the URL without some of the learned parameters, down
  to none of them dropped) are probed for a *fetch mark*: one found means this URL, or one
  equal to it under those rules, was fetched before (``/a?view=c&x=1`` fetched before
  ``view`` was learned, linked again after; ``/a`` queued when ``/a?view=c`` was fetched):
  dropped;
* otherwise its new key is marked seen and it goes on.

A fetch mark is ``fetched|<key>`` in the seen filter (:func:`mark_fetched`; shared: added
from the frontier's thread, off the loop): the key each request with a query goes on under
while learning applies rules, and, when a rule is applied, the key under it of each page the
learner remembers it merges (:mod:`bloom_frontier.learning.extension`). Admission marks
cannot serve here: a request admitted under an earlier key may itself be dropped when it
leaves the queue (its new key taken by a later copy), and the later copy must then be
fetched. On a shared frontier the probe and the mark of a re-keyed request are Redis calls
made on the loop, only for requests of hosts a learned rule touches.

A dropped request is counted (``learn/dropped_queued``), its lease released (shared
frontier), ``request_dropped`` sent. Re-check fetches (:mod:`bloom_frontier.learning.recheck`)
and ``dont_filter`` requests pass. Before it marks or drops under learned rules, it reloads
them (one Redis read when shared): the version a worker last read may be a second old, and
a rule revoked since must not drop a page. The reload and the mark are two calls, not one
atomic step as the admission's version check is (:mod:`bloom_frontier.frontier.redis.admission`):
a revocation landing between them (a few milliseconds) is not caught.
"""

from __future__ import annotations

from itertools import combinations
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from scrapy.exceptions import IgnoreRequest
from scrapy.http.request import NO_CALLBACK

from bloom_frontier.canonical import InvalidURL
from bloom_frontier.frontier.keys import carry_key, key_host, request_key, send_request_dropped
from bloom_frontier.learning.evidence import without_param
from bloom_frontier.meta import DEDUPE_KEY_META, LEARN_RECHECK_META
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Request
    from scrapy.crawler import Crawler

    from bloom_frontier.frontier import Frontier
    from bloom_frontier.frontier.keys import RequestKeyer
    from bloom_frontier.learning.state import Learned
    from bloom_frontier.services import CrawlServices

#: What a fetch mark's key starts with (see the module docstring).
FETCHED_MARK = "fetched|"
#: At most this many learned parameters of one URL have their earlier keys probed (2^n - 1
#: keys); a URL with more gets only the key without any learned rule probed.
MAX_PROBED_PARAMS = 4


def _names(key: str) -> set[str]:
    """The parameter names in a key's query, as the rules match them (lower-case)."""
    query = key.partition("?")[2]
    return {part.partition("=")[0].lower() for part in query.split("&") if part}


def carries_learned_names(url: str, learned: Learned) -> bool:
    """True if ``url``'s query names a parameter some learned rule drops (anywhere): only
    then may the learned rules change its key.

    >>> carries_learned_names("http://e.org/a?x=1&Fr%6Fm=2", {"e.org": ["from"]})
    True
    >>> carries_learned_names("http://e.org/a?x=1", {"e.org": ["from"]})
    False
    """
    query = urlsplit(url).query
    if not query or not learned:
        return False
    names = {name for scoped in learned.values() for name in scoped}
    return any(unquote(part.partition("=")[0]).lower() in names for part in query.split("&"))


def earlier_keys(plain: str, current: str) -> list[str]:
    """The keys a GET URL whose key is ``plain`` without learned rules and ``current``
    with them had under rules dropping only some of those parameters: ``plain`` itself and
    each key without a proper subset of them (``current`` excluded).

    >>> earlier_keys("r2|http://e.org/a?v=1&w=2&x=3", "r2|http://e.org/a?x=3")
    ['r2|http://e.org/a?v=1&w=2&x=3', 'r2|http://e.org/a?w=2&x=3', 'r2|http://e.org/a?v=1&x=3']
    """
    learned = sorted(_names(plain) - _names(current))
    if len(learned) > MAX_PROBED_PARAMS:
        return [plain]
    keys = []
    for size in range(len(learned)):
        for dropped in combinations(learned, size):
            key = plain
            for name in dropped:
                key = without_param(key, name)
            keys.append(key)
    return keys


def mark_fetched(frontier: Frontier, keys: list[str], also_seen: bool = False) -> None:
    """Add the fetch marks of ``keys`` (and, ``also_seen``, the keys themselves) to the
    frontier's seen filter, off the loop on a shared frontier (its thread for Redis)."""
    marks = [FETCHED_MARK + key for key in keys] + (keys if also_seen else [])
    seen = frontier.seen  # type: ignore[attr-defined]
    background = getattr(frontier, "background", None)
    if background is None:
        seen.add_many(marks)
    else:
        background.run(seen.add_many, marks).addErrback(lambda _: None)


class LearnedRuleGate:
    """See the module docstring."""

    def __init__(self, crawler: Crawler, services: CrawlServices) -> None:
        self.crawler = crawler
        self.services = services

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler, services_of(crawler))

    def process_request(self, request: Request) -> None:
        carried = request.meta.get(DEDUPE_KEY_META)
        if (
            not isinstance(carried, str)
            or request.dont_filter
            or request.callback is NO_CALLBACK
            or request.meta.get(LEARN_RECHECK_META)
        ):
            return
        frontier = self.services.frontier
        keyer = frontier.keyer
        live = keyer.live
        touched = live is not None and live.touches(key_host(carried))
        current = carried.startswith(keyer.current_rules().version + "|")
        if not touched and current:  # no rule changed its key
            if self._marking() and "?" in request.url:
                mark_fetched(frontier, [carried])
            return
        new, earlier = carried, []
        rekey = live is not None and touched and carries_learned_names(request.url, live.learned)
        try:
            if rekey or not current:
                new, earlier = self._keys(keyer, request)
            if rekey and (new != carried or earlier):
                assert live is not None  # about to mark or drop: not under a rule revoked
                version = live.version  # a moment ago
                live.latest()
                if live.version != version:
                    new, earlier = self._keys(keyer, request)
        except InvalidURL:
            return
        seen = frontier.seen  # type: ignore[attr-defined]
        probes = [new, *(key for key in earlier if key != carried)]  # not its own mark
        if touched and any(seen.contains_many([FETCHED_MARK + key for key in probes])):
            self._drop(request, new, "fetched already under this or an earlier key")
        if new != carried:
            carry_key(request, new)
            if not seen.add_many([new])[0]:
                self._drop(request, new, "already seen")
        if self._marking() and "?" in request.url:
            mark_fetched(frontier, [new])

    def _marking(self) -> bool:
        """True if fetch marks are kept: learned rules may change keys in this crawl."""
        learner = self.services.learner
        return learner is not None and (learner.mode == "apply" or learner.has_applied)

    @staticmethod
    def _keys(keyer: RequestKeyer, request: Request) -> tuple[str, list[str]]:
        """``request``'s key under the rules in force, and its keys under the crawl's
        earlier learned rules (:func:`earlier_keys`; none when no learned rule changes it)."""
        rules = keyer.current_rules()
        new = keyer.url_key(request.url, rules) if request.method == "GET" else None
        new = new or request_key(request, rules)
        live = keyer.live
        if live is None or "?" not in request.url:
            return new, []
        plain = request_key(request, live.without_learned())
        if plain == new:
            return new, []
        return new, earlier_keys(plain, new) if request.method == "GET" else [plain]

    def _drop(self, request: Request, key: str, why: str) -> None:
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value("learn/dropped_queued")
        if (learning := self.services.learner) is not None:
            learning.dropped_queued(request.url, key)  # queued again if the rule is revoked
        self.services.frontier.admit(request, [])  # releases its lease on a shared frontier
        send_request_dropped(self.crawler, [request])
        raise IgnoreRequest(f"{request.url} is {key} under the rules in force: {why}")
