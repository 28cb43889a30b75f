"""Learning keys a page again only when a learned rule may change its key: otherwise it
reuses the key the request carries (issue 8: each URL keyed once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

import bloom_frontier.frontier.keys
import bloom_frontier.learning.extension
from bloom_frontier.canonical import dedupe_key
from bloom_frontier.content.fingerprint import OK
from bloom_frontier.frontier.keys import carry_key
from bloom_frontier.learning.evidence import CounterExample, Page, Proposal
from bloom_frontier.learning.extension import ParamRuleLearning
from bloom_frontier.learning.gate import LearnedRuleGate
from bloom_frontier.learning.recheck import LearnedRuleRecheck
from bloom_frontier.learning.state import LiveRules, MemoryRuleState
from bloom_frontier.pipelines.records import APPLIED, REVOKED, ContentRecord, PageRecord, ParamRule
from bloom_frontier.services import services_of
from bloom_frontier.spiders.site import SiteSpider

ADDONS = {"bloom_frontier.Addon": 0}


def live_with(learned: dict[str, list[str]]) -> LiveRules:
    state = MemoryRuleState()
    assert state.publish(0, learned)
    live = LiveRules(Settings(), state)
    live.current()
    return live


def test_a_learned_rule_touches_its_host_and_subdomains_only() -> None:
    live = live_with({"e.org/docs/*": ["from"]})
    assert live.touches("e.org") and live.touches("www.e.org")
    assert not live.touches("ee.org") and not live.touches("org") and not live.touches(None)
    assert not live_with({}).touches("e.org")


def keyed_by(module: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs ``module`` keys from now on (its ``dedupe_key`` wrapped)."""
    keyed: list[str] = []
    original = module.dedupe_key

    def counted(url: str, *args: Any) -> str:
        keyed.append(url)
        return original(url, *args)

    monkeypatch.setattr(module, "dedupe_key", counted)
    return keyed


@pytest.fixture
def learning(monkeypatch: pytest.MonkeyPatch) -> tuple[ParamRuleLearning, list[str]]:
    """A learner whose own keying is counted (URLs it keys)."""
    keyed = keyed_by(bloom_frontier.learning.extension, monkeypatch)
    learner = ParamRuleLearning(get_crawler(SiteSpider), "apply", 3)
    learner.live.current()
    return learner, keyed


def carrying(url: str) -> Request:
    request = Request(url)
    carry_key(request, dedupe_key(url))
    return request


def test_evidence_keys_reuse_the_carried_key_when_no_learned_rule_applies(
    learning: tuple[ParamRuleLearning, list[str]],
) -> None:
    learner, keyed = learning
    url = "https://e.org/a?from=nav&utm_source=x"
    assert learner._plain_key(url, carrying(url)) == dedupe_key(url)
    assert keyed == []
    # A rule learned for another host changes nothing here: still the carried key.
    learner._change_rules(lambda learned: {"other.org": ["from"]})
    learner.live.current()
    assert learner._plain_key(url, carrying(url)) == dedupe_key(url)
    assert keyed == []
    # A URL other than the request's (or no key carried) is keyed: once.
    assert learner._plain_key("https://e.org/b", carrying(url)) == dedupe_key("https://e.org/b")
    assert learner._plain_key(url, Request(url)) == dedupe_key(url)
    assert keyed == ["https://e.org/b", url]


def test_on_a_host_with_a_learned_rule_evidence_keys_keep_the_parameter(
    learning: tuple[ParamRuleLearning, list[str]],
) -> None:
    learner, keyed = learning
    learner._change_rules(lambda learned: {"e.org": ["from"]})
    rules = learner.live.current()
    url = "https://e.org/a?from=nav"
    request = Request(url)
    carry_key(request, dedupe_key(url, rules))  # as the frontier keyed it: without from
    assert request.meta["dedupe_key"].endswith("e.org/a")
    # Evidence is about the parameters as written: keyed again, without the learned rule.
    key = learner._plain_key(url, request)
    assert key == dedupe_key(url, learner.live.without_learned()) and key.endswith("?from=nav")
    assert keyed == [url]


def test_the_gate_keys_again_only_requests_of_hosts_a_learned_rule_touches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keyed = keyed_by(bloom_frontier.frontier.keys, monkeypatch)
    spider_crawler = get_crawler(SiteSpider, {"ADDONS": ADDONS})
    learner = services_of(spider_crawler).learner
    assert learner is not None
    gate = LearnedRuleGate.from_crawler(spider_crawler)
    learner.live.current()  # keys keep the prefix the crawl started with
    services_of(spider_crawler).frontier.keyer.use_rules(learner.live)  # as spider_opened does
    learner._change_rules(lambda learned: {"other.org": ["from"]})
    # No rule touches e.org: the carried key stands, nothing is keyed again.
    gate.process_request(carrying("https://e.org/a?x=1"))
    assert keyed == []
    # Nor on other.org for a URL without the learned parameter: its key cannot change.
    gate.process_request(carrying("https://other.org/a?x=1"))
    assert keyed == []
    # With it, the request is keyed under the rules in force, and without the learned ones
    # (the key it may have been fetched under before the rule).
    gate.process_request(carrying("https://other.org/b?x=1&from=nav"))
    assert keyed == ["https://other.org/b?x=1&from=nav"] * 2


def test_a_recheck_compares_with_the_variant_fetched_when_the_bare_url_was_not(
    tmp_path: Path,
) -> None:
    """Only ``/a?from=nav`` was fetched before ``from`` was applied; the re-check fetches
    ``/a?from=footer`` (merged into ``/a`` too): different content revokes the rule."""
    spider_crawler = get_crawler(
        SiteSpider, {"ADDONS": ADDONS, "STORE_URL": f"sqlite:///{tmp_path / 's.db'}"}
    )
    learner = services_of(spider_crawler).learner
    assert learner is not None
    plain = learner.live.current()
    nav = "https://e.org/a?from=nav"
    learner.evidence.observe(Page(nav, dedupe_key(nav, plain), "the article", OK, 200))
    rule = ParamRule("e.org", "from", APPLIED, ((nav, "https://e.org/b?from=nav"),))
    learner.known["e.org", "from"] = rule
    learner._change_rules(lambda learned: {"e.org": ["from"]})
    merged_key = dedupe_key(nav, learner.live.current())
    footer = "https://e.org/a?from=footer"
    fetched = Page(footer, dedupe_key(footer, plain), "another text", OK, 200)
    learner._recheck(fetched, {"key": merged_key, "params": ["from"]})
    assert learner.known["e.org", "from"].state == REVOKED
    assert learner.known["e.org", "from"].counter_example == {
        "url_a": nav,
        "url_b": footer,
        "reason": "re-check differs",
    }
    assert learner.live.learned == {}


class Queued:
    """Stands in for the crawl's engine and re-check middleware: what the learner queues."""

    def __init__(self, learner: ParamRuleLearning, recheck: bool = True) -> None:
        self.requests: list[Request] = []
        middleware = LearnedRuleRecheck(services_of(learner.crawler), 1.0) if recheck else None
        learner._crawl = self.requests.append  # type: ignore[method-assign]
        learner._recheck_middleware = lambda: middleware  # type: ignore[method-assign]


def fetched(learner: ParamRuleLearning, request: Request, text: str) -> None:
    """``request``'s page fetched with ``text`` as its content, as the crawl reports it."""
    url = request.url
    page = PageRecord(url, url, dedupe_key(url, learner.live.without_learned()), 200)
    learner.observe(page, ContentRecord(text, None, "n2", OK), request)


def learner_with_rule(tmp_path: Path, param: str, *pages: tuple[str, str]) -> ParamRuleLearning:
    """A learner that fetched ``pages`` (URL, content), then applied a host rule for ``param``
    on e.org, as a crawl learning it does."""
    spider_crawler = get_crawler(
        SiteSpider,
        {
            "ADDONS": ADDONS,
            "STORE_URL": f"sqlite:///{tmp_path / 's.db'}",
            "CANON_LEARN": "apply",
        },
    )
    learner = services_of(spider_crawler).learner
    assert learner is not None
    plain = learner.live.current()
    services_of(spider_crawler).frontier.keyer.use_rules(learner.live)
    for url, text in pages:
        learner.evidence.observe(Page(url, dedupe_key(url, plain), text, OK, 200))
    learner._propose(Proposal("e.org", param, (("https://e.org/x", "https://e.org/x?p=1"),)))
    assert learner.known["e.org", param].state == APPLIED
    return learner


def test_a_page_dropped_as_fetched_by_its_variants_is_compared_with_each_of_them(
    tmp_path: Path,
) -> None:
    """``/a?src=footer`` and ``/a?from=nav`` were fetched before ``from`` was learned, ``/a``
    was queued: the gate drops it as fetched (its variants stood for it). It is re-checked,
    and compared with every variant: ``from=nav`` says more, so the rule is revoked."""
    learner = learner_with_rule(
        tmp_path,
        "from",
        ("https://e.org/a?src=footer", "the article"),
        ("https://e.org/a?from=nav", "the article, shared by nav"),
    )
    queued = Queued(learner)
    bare = "https://e.org/a"
    learner.dropped_queued(bare, dedupe_key(bare, learner.live.current()))
    (recheck,) = queued.requests
    assert recheck.url == bare and recheck.dont_filter
    fetched(learner, recheck, "the article")
    assert learner.known["e.org", "from"].state == REVOKED
    assert learner.live.learned == {}


def test_a_queued_variant_dropped_at_lease_is_queued_again_past_the_seen_filter(
    tmp_path: Path,
) -> None:
    """``/b?from=nav`` was admitted (its key seen) before ``from`` was learned and dropped
    when it left the queue; ``/c?from=nav`` was merged when it was linked. When ``from`` is
    found wrong, both are queued again: the first as a ``dont_filter`` copy (its own key is
    seen, the filter would drop it), the second as a plain request."""
    learner = learner_with_rule(
        tmp_path, "from", ("https://e.org/b", "b"), ("https://e.org/c", "c")
    )
    queued = Queued(learner, recheck=False)
    b, c = "https://e.org/b?from=nav", "https://e.org/c?from=nav"
    learner.dropped_queued(b, dedupe_key(b, learner.live.current()))
    learner.merged(dedupe_key(c, learner.live.current()), c, ("from",), 0.0)
    assert queued.requests == []
    learner._revoke_covering(CounterExample("e.org", "from", "/a", "https://e.org/a", "x", "test"))
    assert learner.known["e.org", "from"].state == REVOKED
    assert {request.url: request.dont_filter for request in queued.requests} == {b: True, c: False}


def test_a_link_below_the_numbered_pages_compared_is_re_checked_whatever_the_credit(
    tmp_path: Path,
) -> None:
    """``ref`` was compared on news 9-40 and learned; its credit is spent. A link merged
    into news 3 is in a number stratum no comparison covered (a parameter neutral until
    page N): re-checked; another link of that stratum, or one among the pages compared, not."""
    pages = [(f"https://e.org/news/{n}", f"news {n}") for n in range(1, 41)]
    learner = learner_with_rule(tmp_path, "ref", *pages)
    plain = learner.live.without_learned()
    for n in range(9, 41):  # the variants fetched before the rule: the same content
        url = f"https://e.org/news/{n}?ref=mail"
        learner.evidence.observe(Page(url, dedupe_key(url, plain), f"news {n}", OK, 200))
    learner._credit["e.org", "ref"] = -100.0  # spent: only the strata pick

    def picked(n: int) -> bool:
        return learner.merged(key_of(learner, n), f"https://e.org/news/{n}?ref=x", ("ref",), 0.0)

    # 9-15 share a stratum with 4-8; 1-3 is one none compared.
    assert [picked(n) for n in (20, 12, 6, 3, 2)] == [False, False, False, True, False]


def key_of(learner: ParamRuleLearning, n: int) -> str:
    return dedupe_key(f"https://e.org/news/{n}", learner.live.current())
