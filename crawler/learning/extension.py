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
a worker opens. A counter-example found later, by the crawl or by the sampled re-check
(:mod:`bloom_frontier.learning.recheck`), revokes a proposed or applied rule for good: recorded with
the counter-example, removed from the active rules, logged as a warning. Stats:
``learn/proposed``, ``learn/applied``, ``learn/revoked``, ``learn/rechecked``,
``learn/recheck_confirmed``, ``learn/recheck_unmatched`` (no page the URL was merged into is
remembered to compare with), ``learn/forgotten_pages`` (``CANON_LEARN_MEMORY``).

Each worker learns from the pages it fetched itself; the rules it proposes or applies, and
revocations, are shared with all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

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
    split_key,
)
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

    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

MODES = ("off", "propose", "apply")


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

    def observe(self, page: PageRecord, content: ContentRecord, request: Request, **_: Any) -> None:
        """Compare a freshly fingerprinted page with the pages it differs from by one
        parameter; propose, apply or revoke rules accordingly."""
        try:
            key = self._plain_key(page.final_url, request)
        except InvalidURL:
            return
        fetched = Page(page.final_url, key, content.exact, content.kind, page.status)
        recheck = request.meta.get(LEARN_RECHECK_META)
        if recheck:
            self._recheck(fetched, recheck)
            return
        touched, counters = self.evidence.observe(fetched)
        if self.evidence.forgotten_pages:
            assert self.crawler.stats is not None
            self.crawler.stats.set_value("learn/forgotten_pages", self.evidence.forgotten_pages)
        for counter in counters:
            self._revoke_covering(counter)
        for host, name in sorted(touched):
            for proposal in self.evidence.proposals(host, name):
                self._propose(proposal)

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
        merged = self.evidence.merged_into(recheck["key"], recheck["params"])
        parts = split_key(recheck["key"])
        if merged is None or parts is None:
            stats.inc_value("learn/recheck_unmatched")  # no page it merged is remembered
            return
        if merged.kind != OK or fetched.kind != OK:
            return
        if merged.exact == fetched.exact:
            stats.inc_value("learn/recheck_confirmed")
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

    def _revoke_covering(self, counter: CounterExample) -> None:
        for (scope, param), rule in list(self.known.items()):
            if (
                param == counter.param
                and rule.state != REVOKED
                and covers(scope, counter.host, counter.path)
            ):
                was_applied = rule.state == APPLIED
                self._record(rule, state=REVOKED, counter_example=counter.as_json())
                if was_applied:
                    self._change_rules(lambda learned, rule=rule: _without(learned, rule))
                    self.live.current()
                assert self.crawler.stats is not None
                self.crawler.stats.inc_value("learn/revoked")
                logger.warning(
                    "Revoked learned rule %s: %s and %s differ (%s)%s",
                    rule.name,
                    counter.url_a,
                    counter.url_b,
                    counter.reason,
                    "; URLs it merged were not fetched" if was_applied else "",
                )

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
