"""``ParamRuleLearning``: learn parameter drop rules from content while the crawl runs.

``CANON_LEARN`` says what happens when content proves a parameter changes nothing
(:mod:`bloom_frontier.learning.evidence`):

* ``"propose"`` (default): the rule is recorded in the store (``param_rules``, state
  ``proposed``, with its evidence) for review with ``scrapy audit-rules``, which can apply
  it (``--apply``); the next crawl keys with it;
* ``"apply"``: it also joins the crawl's active learned rules at once (the shared state,
  :mod:`bloom_frontier.learning.state`), so every worker keys with it from its next batch;
* ``"off"``: nothing is learned.

Rules applied earlier (state ``applied`` in the store) are loaded into the shared state when
a worker opens. A counter-example found later, by the crawl or by the stratified re-check
(:mod:`bloom_frontier.learning.recheck`), revokes a proposed or applied rule for good: recorded with
the counter-example, removed from the active rules, logged as a warning, and the links it
merged that are remembered are queued again. Stats:
``learn/proposed``, ``learn/applied``, ``learn/revoked``, ``learn/rechecked``,
``learn/recheck_confirmed``, ``learn/recheck_unmatched`` (no page the URL was merged into is
remembered to compare with), ``learn/requeued`` (links a revoked rule had merged, queued
again), ``learn/merged_forgotten`` (merged links past the memory of
:class:`~bloom_frontier.learning.recheck.MergedLinks`: a revocation cannot queue them again),
``learn/forgotten_pages`` (``CANON_LEARN_MEMORY``).

Each page's shape (:func:`~bloom_frontier.learning.evidence.page_shape`) is counted from its
body when it arrives, so evidence is judged by the kind of page it came from.

Each worker learns from the pages it fetched itself; the rules it proposes or applies, and
revocations, are shared with all.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit
from weakref import WeakKeyDictionary

from scrapy import Request, signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.http.request import NO_CALLBACK

from bloom_frontier.canonical import InvalidURL, dedupe_key
from bloom_frontier.content.constants import OK
from bloom_frontier.content.extension import content_fingerprinted
from bloom_frontier.defaults import CANON_LEARN_MEMORY
from bloom_frontier.frontier.keys import carried_key, key_host
from bloom_frontier.learning.evidence import (
    CounterExample,
    Page,
    ParamEvidence,
    Proposal,
    number_stratum,
    page_shape,
    split_key,
    without_param,
)
from bloom_frontier.learning.gate import carries_learned_names, mark_fetched
from bloom_frontier.learning.recheck import MAX_MERGED, LearnedRuleRecheck, MergedLinks, names_of
from bloom_frontier.learning.state import (
    Learned,
    LiveRules,
    MemoryRuleState,
    RedisRuleState,
    RuleState,
    applied_rules,
    normalized,
)
from bloom_frontier.meta import LEARN_RECHECK_META
from bloom_frontier.pipelines.records import (
    APPLIED,
    PROPOSED,
    REVOKED,
    ContentRecord,
    PageRecord,
    ParamRule,
    now,
)
from bloom_frontier.services import services_of

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

MODES = ("off", "propose", "apply")
#: Paths compared at which a rule's re-check of links to paths not yet compared falls to
#: half of them: each link merged adds ``max(CANON_LEARN_RECHECK, T / (T + paths compared))``
#: to the rule's credit, so a young rule is checked often and one confirmed over many paths
#: rarely (about sqrt(2 T n) of n paths compared), never less than the rate asked.
RECHECK_TRUST = 2
#: Seconds the spider is kept open, at most, for a re-check fetched to be judged.
RECHECK_WAIT = 30.0
#: Values of a parameter re-checked on a page shape no evidence covered.
SHAPE_VALUES = 3
#: Shapes whose re-checked values are remembered at most (then forgotten at once).
MAX_PENDING_SHAPES = 10_000


def covers(scope: str, host: str, path: str) -> bool:
    """True if a learned scope (``host`` or ``host/prefix/*``) covers ``host`` and ``path``."""
    scope_host, slash, prefix = scope.partition("/")
    if scope_host != host:
        return False
    return not slash or path.startswith("/" + prefix.removesuffix("*"))


class ParamRuleLearning:
    """See the module docstring. Made by :class:`bloom_frontier.services.CrawlServices`
    (:attr:`~bloom_frontier.services.CrawlServices.learner`), whose frontier it keys and
    whose recorder keeps its rules."""

    def __init__(
        self, crawler: Crawler, mode: str, min_pairs: int, max_pages: int = CANON_LEARN_MEMORY
    ) -> None:
        self.crawler = crawler
        self.mode = mode
        self.evidence = ParamEvidence(min_pairs, max_pages)
        self.known: dict[tuple[str, str], ParamRule] = {}
        self.state: RuleState = MemoryRuleState()
        self.live = LiveRules(crawler.settings, self.state, on_change=self._rules_changed)
        self.merged_links = MergedLinks()
        #: Keys under the rules in force -> the key of the variant fetched for each (see
        #: :meth:`_stands_for`), the oldest forgotten past ``MAX_MERGED``.
        self._stand_ins: OrderedDict[str, str] = OrderedDict()
        #: Keys (without learned rules) of the requests the gate dropped, not queued again
        #: since (see :meth:`_requeue`); forgotten all at once past ``MAX_MERGED``.
        self._dropped_at_lease: set[str] = set()
        #: Per (host, parameter): re-checks of paths not yet compared it may still make.
        self._credit: dict[tuple[str, str], float] = {}
        #: Per (host, parameter, shape no evidence covered): the values re-checked there.
        self._shape_values: dict[tuple[str, str, tuple[int, ...]], set[str | None]] = {}
        #: (host, parameter, numbered path stratum) re-checked (see :meth:`_picks`).
        self._strata_checked: set[tuple[str, str, str]] = set()
        #: (host, parameter) of the rules applied before this crawl (see :meth:`merged`).
        self._trusted: set[tuple[str, str]] = set()
        self._shapes: WeakKeyDictionary[Request, tuple[int, ...]] = WeakKeyDictionary()
        #: Pages fetched (re-checks, and any while learned rules act), not yet observed,
        #: with when they arrived.
        self._judging: WeakKeyDictionary[Request, float] = WeakKeyDictionary()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        mode = settings.get("CANON_LEARN")
        if mode not in MODES:
            raise ValueError(f"CANON_LEARN must be one of {MODES}, not {mode!r}")
        if mode == "off":
            raise NotConfigured
        learning = cls(
            crawler,
            mode,
            settings.getint("CANON_LEARN_MIN_PAIRS"),
            settings.getint("CANON_LEARN_MEMORY"),
        )
        crawler.signals.connect(learning.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(learning.observe, signal=content_fingerprinted)
        crawler.signals.connect(learning.response_received, signal=signals.response_received)
        crawler.signals.connect(learning.spider_idle, signal=signals.spider_idle)
        return learning

    # --- the shared rules --------------------------------------------------------------

    def spider_opened(self, **_: Any) -> None:
        """Load the rules recorded, publish the applied ones, key with them."""
        services = services_of(self.crawler)
        frontier = services.frontier
        client = getattr(frontier, "client", None)
        if client is not None:  # the shared frontier: the rules live beside it in Redis
            self.state = RedisRuleState(
                client,
                frontier.keys.prefix,  # type: ignore[attr-defined]
                getattr(frontier, "background", None),  # version reads off the loop
            )
            self.live.state = self.state
        for rule in services.recorder.param_rules():
            self.known[rule.scope, rule.param] = rule
        applied = applied_rules(self.known.values())
        # Proven in an earlier crawl (and maybe reviewed): re-checked at the rate asked.
        self._trusted = {(scope.partition("/")[0], n) for scope, ns in applied.items() for n in ns}
        if applied:
            self._change_rules(lambda learned: _merged(learned, applied))
        self.live.key_version = frontier.keyer.rules.version  # the seen filter's prefix
        self.live.reload()
        frontier.keyer.use_rules(self.live)  # type: ignore[attr-defined]

    def _change_rules(self, change: Callable[[Learned], Learned]) -> None:
        """Apply ``change`` to the shared learned rules (compare-and-set, retried)."""
        while True:
            version, learned = self.state.load()
            new = normalized(change(learned))
            if new == normalized(learned) or self.state.publish(version, new):
                return

    def _rules_changed(self) -> None:
        logger.info(
            "Keying with learned rules version %d (%s): %s",
            self.live.version,
            self.live.full_version,
            self.live.learned or "none",
        )

    @property
    def has_applied(self) -> bool:
        return bool(self.live.learned)

    # --- learning ----------------------------------------------------------------------

    def response_received(self, response: Response, request: Request, **_: Any) -> None:
        """Count the page's shape while its body is at hand (byte counts, no parsing)."""
        if request.callback is not NO_CALLBACK:
            self._shapes[request] = page_shape(response.body)
            if self.mode == "apply" or self.has_applied or request.meta.get(LEARN_RECHECK_META):
                self._judging[request] = time.monotonic()

    def spider_idle(self, **_: Any) -> None:
        """Not closed while a page fetched is still being fingerprinted (in a thread) where
        learned rules act: a re-check may revoke a rule and queue the links it merged, and
        the last pages' links merged before they were observed are sampled only once they
        are; how fast the thread runs must not decide what is fetched (bounded by
        :data:`RECHECK_WAIT`)."""
        now = time.monotonic()
        if any(now - since < RECHECK_WAIT for since in self._judging.values()):
            raise DontCloseSpider

    def observe(self, page: PageRecord, content: ContentRecord, request: Request, **_: Any) -> None:
        """Compare a freshly fingerprinted page with the pages it differs from by one
        parameter; propose, apply or revoke rules accordingly."""
        try:
            key = self._plain_key(page.final_url, request)
        except InvalidURL:
            return
        shape = self._shapes.pop(request, ())
        self._judging.pop(request, None)
        fetched = Page(page.final_url, key, content.exact, content.kind, page.status, shape)
        recheck = request.meta.get(LEARN_RECHECK_META)
        if recheck and (key != recheck["key"] or self.evidence.page(key) is not None):
            self._recheck(fetched, recheck)
            return
        if recheck:  # the page variants stood for: compared with each of them, as evidence
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value("learn/rechecked")
        merged = self._merged_key(fetched)
        if merged is not None:  # fetched while a rule merging it was applied
            mark_fetched(services_of(self.crawler).frontier, [merged], also_seen=True)
            self._stands_for(merged, fetched)
        touched, counters = self.evidence.observe(fetched)
        if self.evidence.forgotten_pages:
            assert self.crawler.stats is not None
            self.crawler.stats.set_value("learn/forgotten_pages", self.evidence.forgotten_pages)
        for counter in counters:
            self._revoke_covering(counter)
        for host, name in sorted(touched):
            rule = self.known.get((host, name))
            if rule is not None and rule.state != REVOKED:
                continue  # a rule for the whole host: nothing wider to propose
            for proposal in self.evidence.proposals(host, name):
                self._propose(proposal)
        self._recheck_merged_into(fetched)
        self._fetched_for_another(fetched)

    def _fetched_for_another(self, fetched: Page) -> None:
        """``fetched`` stands, under a learned rule, for a key of its own (its URL without the
        parameters dropped): remember that URL as merged, so a revocation queues it."""
        if not self.live.learned:
            return
        try:
            learned = dedupe_key(fetched.url, self.live.current())
        except InvalidURL:
            return
        dropped = tuple(sorted(names_of(fetched.key) - names_of(learned)))
        if dropped and learned != fetched.key:
            self.merged_links.add(learned, learned.partition("|")[2], dropped)

    # --- the stratified re-check (bloom_frontier.learning.recheck) ---------------------

    def merged(self, key: str, url: str, dropped: tuple[str, ...], rate: float) -> bool:
        """Remember the link ``url`` a learned rule merged into ``key`` (dropping
        ``dropped``); True if it is to be re-checked now (the page of ``key`` is known and
        its shape or path is a stratum not yet compared, see the re-check's docstring).
        A rule learned in this crawl earns credit for re-checks by :data:`RECHECK_TRUST` for
        each page links are merged into (not each link: a site linking a page's variants
        from every page would buy a re-check of most paths); one applied before it (proven
        by a whole crawl, or reviewed) at ``rate`` a link only."""
        new_page = not self.merged_links.of(key)
        if not self.merged_links.add(key, url, dropped):
            return False
        parts = split_key(key)
        if parts is None:
            return False
        for name in dropped:
            young = (parts[0], name) not in self._trusted
            compared = self.evidence.compared_paths(parts[0], name) if young else 0
            extra = RECHECK_TRUST / (RECHECK_TRUST + compared) if young and new_page else 0.0
            credit = self._credit.get((parts[0], name), 1.0 if young else 0.0)
            self._credit[parts[0], name] = credit + max(rate, extra)
        if self.merged_links.forgotten:
            assert self.crawler.stats is not None
            self.crawler.stats.set_value("learn/merged_forgotten", self.merged_links.forgotten)
        merged_into = self._page_for(key, dropped)
        return merged_into is not None and self._picks(merged_into, url, dropped)

    def _page_for(self, key: str, names: Iterable[str]) -> Page | None:
        """The page fetched that stands for ``key`` under the learned rules: fetched with
        ``key`` itself, else one differing from it by one of ``names`` alone, else the
        variant whose fetch marked ``key`` fetched (:meth:`_stands_for`), if remembered."""
        found = self.evidence.merged_into(key, list(names))
        if found is None and (stand_in := self._stand_ins.get(key)) is not None:
            found = self.evidence.page(stand_in)
        return found

    def _stands_for(self, key: str, page: Page) -> None:
        """``page`` (a variant) was fetched for ``key``, its key under the rules in force:
        a link keyed ``key`` is dropped as fetched, so it is compared with ``page``."""
        self._stand_ins[key] = page.key
        self._stand_ins.move_to_end(key)
        if len(self._stand_ins) > MAX_MERGED:
            self._stand_ins.popitem(last=False)

    def _recheck_middleware(self) -> LearnedRuleRecheck | None:
        """The crawl's re-check middleware (None before the engine exists, or without it)."""
        try:
            return self.crawler.get_spider_middleware(LearnedRuleRecheck)
        except RuntimeError:  # no engine yet: a crawler made without a crawl
            return None

    def dropped_queued(self, url: str, key: str) -> None:
        """A queued request for ``url`` was dropped because learned rules key it ``key``,
        already seen (:mod:`bloom_frontier.learning.gate`): remembered as merged, so a
        revocation queues it again, and re-checked if in a stratum to sample."""
        try:
            plain = dedupe_key(url, self.live.without_learned())
        except InvalidURL:
            return
        dropped = tuple(sorted(names_of(plain) - names_of(key)))
        stand_in = self._page_for(key, ())
        if not dropped and stand_in is not None:  # ``url`` is the page variants stood for
            names = self.evidence.family_names(key) or names_of(stand_in.key) - names_of(plain)
            dropped = tuple(sorted(names))
        if dropped:  # admitted under ``plain``: a revocation must bypass the seen filter
            if len(self._dropped_at_lease) >= MAX_MERGED:
                self._dropped_at_lease.clear()
            self._dropped_at_lease.add(plain)
        recheck = self._recheck_middleware()
        if not dropped or recheck is None or self.evidence.page(plain) is not None:
            if dropped:
                self.merged_links.add(key, url, dropped)
            return
        if self.merged(key, url, dropped, recheck.rate):
            self._crawl_recheck(recheck, plain, url, key, dropped)

    def _picks(self, merged_into: Page, url: str, dropped: tuple[str, ...]) -> bool:
        """True if the link ``url`` merged into ``merged_into`` by dropping ``dropped`` is in
        a stratum to re-check now: a shape no evidence covered (always, for up to
        :data:`SHAPE_VALUES` values of the parameter: one value neutral there does not
        prove another), a numbered path's stratum none covered (once each, for a rule
        learned in this crawl: a parameter neutral until page N), a path none covered
        (while the credit lasts)."""
        parts = split_key(merged_into.key)
        if merged_into.kind != OK or parts is None:
            return False
        host = parts[0]
        values = {name.lower(): value for name, value in parse_qsl(urlsplit(url).query)}
        for name in dropped:
            path_done, stratum_done, shape_done = self.evidence.compared(host, name, merged_into)
            stratum = (host, name, number_stratum(parts[1]) or "")
            young = (host, name) not in self._trusted  # one proven by a crawl: its rate only
            if young and not stratum_done and stratum not in self._strata_checked:
                if len(self._strata_checked) >= MAX_PENDING_SHAPES:
                    self._strata_checked.clear()
                self._strata_checked.add(stratum)
                return True
            if not shape_done:
                checked = self._shape_values.setdefault((host, name, merged_into.shape), set())
                if len(checked) < SHAPE_VALUES and values.get(name) not in checked:
                    if len(self._shape_values) >= MAX_PENDING_SHAPES:
                        self._shape_values.clear()
                    checked.add(values.get(name))
                    return True
            if not path_done and self._credit.get((host, name), 0.0) >= 1:
                self._credit[host, name] -= 1
                return True
        return False

    def _recheck_merged_into(self, fetched: Page) -> None:
        """``fetched`` is a page links were merged into before it was fetched: re-check one
        of them if they are in a stratum to sample."""
        for url, names in list(self.merged_links.of(fetched.key).items()):
            if self._send_recheck(fetched, url, names):
                return

    def _send_recheck(self, merged_into: Page, url: str, names: tuple[str, ...]) -> bool:
        """Fetch the link ``url`` merged into ``merged_into`` anyway, marked for a re-check,
        if it was not fetched as itself nor re-checked and is in a stratum to sample."""
        recheck = self._recheck_middleware()
        try:
            plain = dedupe_key(url, self.live.without_learned())
        except InvalidURL:
            return False
        if recheck is None or self.evidence.page(plain) is not None:
            return False  # no re-check asked, or fetched as itself: compared already
        if not self._picks(merged_into, url, names):
            return False
        return self._crawl_recheck(recheck, plain, url, merged_into.key, names)

    def _crawl_recheck(
        self, recheck: LearnedRuleRecheck, plain: str, url: str, key: str, names: tuple[str, ...]
    ) -> bool:
        """Queue the re-check of ``url`` (keyed ``plain``) merged into ``key``, unless it was
        re-checked already."""
        meta = recheck.picked(plain, key, names)
        if meta is None:
            return False
        request = self._request_for(url)
        self._crawl(
            request.replace(dont_filter=True, meta={**request.meta, LEARN_RECHECK_META: meta})
        )
        return True

    def _request_for(self, url: str) -> Request:
        """A request for a link, as the spider builds them (its ``request_for``) if it
        says how."""
        request_for = getattr(self.crawler.spider, "request_for", None)
        return request_for(url) if callable(request_for) else Request(url)

    def _crawl(self, request: Request) -> None:
        assert self.crawler.engine is not None
        self.crawler.engine.crawl(request)

    def _plain_key(self, url: str, request: Request) -> str:
        """The key of the fetched ``url`` without the learned rules: evidence is about the
        parameters as written, or a page merged by a wrong rule would be blamed on another
        parameter. The key the request carries when it is that one (no learned rule touches
        its host), so a page is not keyed twice; else made anew."""
        plain = self.live.without_learned()
        if url == request.url and request.method == "GET":
            carried = carried_key(request, plain)
            if carried is not None and not self.live.touches(key_host(carried)):
                return carried
        return dedupe_key(url, plain)

    def _recheck(self, fetched: Page, recheck: dict[str, Any]) -> None:
        """A URL an applied rule merged, fetched anyway: same content as its key's page?"""
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value("learn/rechecked")
        merged = self._page_for(recheck["key"], recheck["params"])
        parts = split_key(recheck["key"])
        if merged is None or parts is None:
            stats.inc_value("learn/recheck_unmatched")  # no page it merged is remembered
            return
        if merged.kind != OK or fetched.kind != OK:
            return
        if merged.exact == fetched.exact:
            stats.inc_value("learn/recheck_confirmed")
            for name in recheck["params"]:
                self.evidence.confirm(parts[0], name, merged)
            return
        host, path, _ = parts
        for name in recheck["params"]:
            counter = CounterExample(host, name, path, merged.url, fetched.url, "re-check differs")
            self.evidence.add_counter(counter)
            self._revoke_covering(counter)

    def _propose(self, proposal: Proposal) -> None:
        existing = self.known.get((proposal.scope, proposal.param))
        if existing is not None:  # proposed (keep the larger evidence), applied or revoked
            if existing.state == PROPOSED and len(proposal.evidence) > len(existing.evidence):
                self._record(existing, evidence=proposal.evidence)
            return
        host_rule = self.known.get((proposal.scope.partition("/")[0], proposal.param))
        if host_rule is not None and host_rule.state != REVOKED:
            return  # a rule for the whole host covers it
        state = APPLIED if self.mode == "apply" else PROPOSED
        rule = ParamRule(proposal.scope, proposal.param, state, proposal.evidence)
        if state == APPLIED:
            self._change_rules(lambda learned: _merged(learned, {rule.scope: [rule.param]}))
            self.live.current()
            self._mark_fetched_merged(rule)
        self._record(rule, rules_version=self.live.full_version if state == APPLIED else None)
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(f"learn/{state}")
        logger.info(
            "Learned: %s carries no content (%d URL pairs, e.g. %s = %s): %s",
            rule.name,
            len(rule.evidence),
            *rule.evidence[0],
            state,
        )

    def _mark_fetched_merged(self, rule: ParamRule) -> None:
        """Mark seen, and fetched (:mod:`bloom_frontier.learning.gate`), the key under the rules
        in force of each remembered page the new ``rule`` merges: ``/a`` once ``/a?p=1`` was
        fetched and ``p`` is learned. A link to ``/a`` found later is a duplicate, and one
        queued already is dropped when it leaves the queue."""
        host = rule.scope.partition("/")[0]
        keys = []
        for page in self.evidence.pages_of(host):
            parts = split_key(page.key)
            if parts is None or not covers(rule.scope, host, parts[1]):
                continue
            if without_param(page.key, rule.param) != page.key:  # it carries the parameter
                merged = self._merged_key(page)
                if merged is not None:
                    keys.append(merged)
                    self._stands_for(merged, page)
        if keys:
            mark_fetched(services_of(self.crawler).frontier, keys, also_seen=True)

    def _merged_key(self, page: Page) -> str | None:
        """The key of a fetched ``page`` under the rules in force, if the learned rules
        change it (None otherwise, or if it cannot be keyed)."""
        live = self.live
        if not carries_learned_names(page.url, live.learned) or not live.touches(
            key_host(page.key)
        ):
            return None
        try:
            merged = dedupe_key(page.url, live.current())
        except InvalidURL:
            return None
        return merged if merged != page.key else None

    def _revoke_covering(self, counter: CounterExample) -> None:
        for (scope, param), rule in list(self.known.items()):
            if (
                param == counter.param
                and rule.state != REVOKED
                and covers(scope, counter.host, counter.path)
            ):
                was_applied = rule.state == APPLIED
                self._record(rule, state=REVOKED, counter_example=counter.as_json())
                requeued = 0
                if was_applied:
                    self._change_rules(lambda learned, rule=rule: _without(learned, rule))
                    self.live.current()
                    requeued = self._requeue(rule)
                assert self.crawler.stats is not None
                self.crawler.stats.inc_value("learn/revoked")
                logger.warning(
                    "Revoked learned rule %s: %s and %s differ (%s)%s",
                    rule.name,
                    counter.url_a,
                    counter.url_b,
                    counter.reason,
                    f"; {requeued} links it merged queued again" if was_applied else "",
                )

    def _requeue(self, rule: ParamRule) -> int:
        """Queue again the links the revoked ``rule`` merged (keyed now without it, so each
        is fetched unless its own key was seen). One the gate dropped when it left the queue
        was admitted under its own key before: that key is seen, so it is queued again as a
        ``dont_filter`` copy, once (no other copy of it was admitted)."""

        def merged_by(key: str, names: tuple[str, ...]) -> bool:
            parts = split_key(key)
            return rule.param in names and parts is not None and covers(rule.scope, *parts[:2])

        plain = self.live.without_learned()
        recheck = self._recheck_middleware()
        urls = {}
        for url in self.merged_links.take(merged_by):
            key = dedupe_key(url, plain)
            fetched = recheck is not None and recheck.was_rechecked(key)
            if not fetched and self.evidence.page(key) is None:  # not fetched as itself
                urls.setdefault(key, url)
        for key, url in urls.items():
            request = self._request_for(url)
            if key in self._dropped_at_lease:
                self._dropped_at_lease.discard(key)
                request = request.replace(dont_filter=True)
            self._crawl(request)
        if urls:
            assert self.crawler.stats is not None
            self.crawler.stats.inc_value("learn/requeued", len(urls))
        return len(urls)

    def _record(self, rule: ParamRule, **changes: Any) -> None:
        updated = replace(rule, **changes, updated_at=now())
        self.known[rule.scope, rule.param] = updated
        services_of(self.crawler).recorder.param_rule(updated)


def _merged(learned: Learned, more: Learned) -> Learned:
    result = {scope: list(names) for scope, names in learned.items()}
    for scope, names in more.items():
        result.setdefault(scope, []).extend(names)
    return result


def _without(learned: Learned, rule: ParamRule) -> Learned:
    return {
        scope: [name for name in names if not (scope == rule.scope and name == rule.param)]
        for scope, names in learned.items()
    }
