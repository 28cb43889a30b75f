"""Parameter rules proven by content: evidence, counter-examples, generic pages, scopes."""

from __future__ import annotations

import redis
from scrapy.settings import Settings

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.content.fingerprint import ERROR, OK, SOFT_404
from bloom_frontier.learning.evidence import Page, ParamEvidence, path_prefixes, without_param
from bloom_frontier.learning.state import (
    LiveRules,
    MemoryRuleState,
    RedisRuleState,
    combined_host_rules,
)


def page(url: str, content: str, kind: str = OK, status: int = 200) -> Page:
    return Page(url, dedupe_key(url), content, kind, status)


def feed(evidence: ParamEvidence, *pages: Page) -> list[str]:
    """Feed pages; return the proposals' ``scope?param`` names after the last one."""
    touched: set[tuple[str, str]] = set()
    for p in pages:
        touched |= evidence.observe(p)[0]
    return sorted(
        f"{proposal.scope}?{proposal.param}"
        for host, name in touched
        for proposal in evidence.proposals(host, name)
    )


def pairs(path: str, n: int, param: str = "from=nav") -> list[Page]:
    out = []
    for i in range(n):
        out += [page(f"https://e.org{path}{i}", f"doc{path}{i}")]
        out += [page(f"https://e.org{path}{i}?{param}", f"doc{path}{i}")]
    return out


def test_three_equal_pairs_propose_a_rule_as_wide_as_their_evidence() -> None:
    evidence = ParamEvidence(min_pairs=3)
    assert feed(evidence, *pairs("/a/", 2)) == []
    # All under /a/: nothing is known about the rest of the host.
    assert feed(evidence, *pairs("/a/", 3)) == ["e.org/a/*?from"]
    (proposal,) = evidence.proposals("e.org", "from")
    assert proposal.evidence[0] == ("https://e.org/a/0", "https://e.org/a/0?from=nav")
    # Evidence from a second section of the site makes it a rule for the host.
    assert feed(evidence, *pairs("/b/", 1)) == ["e.org?from"]


def test_one_counter_example_vetoes_the_parameter() -> None:
    evidence = ParamEvidence(min_pairs=3)
    differing = [page("https://e.org/a/9", "x"), page("https://e.org/a/9?from=nav", "y")]
    assert feed(evidence, *differing, *pairs("/a/", 5)) == []


def test_a_parameter_that_matters_on_one_path_is_learned_only_where_it_does_not() -> None:
    evidence = ParamEvidence(min_pairs=3)
    products = []
    for i in range(3):
        products += [
            page(f"https://e.org/products/{i}", f"en{i}"),
            page(f"https://e.org/products/{i}?lang=de", f"de{i}"),
        ]
    found = feed(evidence, *products, *pairs("/articles/", 3, "lang=de"))
    assert found == ["e.org/articles/*?lang"]


def test_error_pages_empty_pages_and_soft_404s_prove_nothing() -> None:
    evidence = ParamEvidence(min_pairs=2)
    junk = []
    for i, kind in enumerate((ERROR, SOFT_404, "empty")):
        junk += [
            page(f"https://e.org/x/{i}", "same", kind, 404 if kind == ERROR else 200),
            page(f"https://e.org/x/{i}?from=nav", "same", kind, 404 if kind == ERROR else 200),
        ]
    assert feed(evidence, *junk) == []


def test_a_generic_page_shared_by_several_documents_proves_nothing() -> None:
    """A 200 "no results" page for every query is equal to itself with ?from=: no proof."""
    evidence = ParamEvidence(min_pairs=3)
    searches = []
    for q in "abcd":
        searches += [
            page(f"https://e.org/search?q={q}", "no results"),
            page(f"https://e.org/search?q={q}&from=nav", "no results"),
        ]
    assert feed(evidence, *searches) == []


def test_a_4xx_answer_to_a_variant_is_a_counter_example() -> None:
    evidence = ParamEvidence(min_pairs=3)
    gone = [
        page("https://e.org/a/7", "doc7"),
        page("https://e.org/a/7?from=nav", "gone", ERROR, 404),
    ]
    assert feed(evidence, *gone, *pairs("/a/", 4)) == []
    (counter,) = evidence.counters("e.org", "from")
    assert counter.reason == "status differs"


def test_helpers() -> None:
    assert without_param("r2|https://e.org/a?FROM=1&x=2", "from") == "r2|https://e.org/a?x=2"
    assert path_prefixes("/a.html") == []


def test_live_rules_follow_the_shared_version_and_keep_the_key_prefix() -> None:
    state = MemoryRuleState()
    live = LiveRules(Settings({"CANON_HOST_RULES": {"e.org": {"strip": ["sid"]}}}), state)
    url = "https://e.org/p?sid=1&from=nav&x=1"
    start = live.current()
    assert start.version.startswith("r2+")
    assert dedupe_key(url, start) == f"{start.version}|https://e.org/p?from=nav&x=1"
    assert state.publish(0, {"e.org": ["from"]})
    assert not state.publish(0, {"e.org": ["src"]})  # a stale writer loses the race
    after = live.current()
    # Same prefix (seen keys stay seen), the learned drop on top of the user's rule.
    assert dedupe_key(url, after) == f"{start.version}|https://e.org/p?x=1"
    assert live.full_version not in (start.version, "r2")
    assert dedupe_key(url, live.without_learned()) == dedupe_key(url, start)


def test_learned_rules_add_to_the_user_rules() -> None:
    assert combined_host_rules(
        {"e.org": {"strip": ["a"]}}, {"e.org": ["b"], "f.org/x/*": ["c"]}
    ) == {
        "e.org": {"strip": ["a", "b"]},
        "f.org/x/*": {"strip": ["c"]},
    }


def test_redis_state_is_shared_by_workers(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    first, second = RedisRuleState(client, "{t}"), RedisRuleState(client, "{t}")
    worker = LiveRules(Settings(), second)
    stale = worker.current()
    assert first.publish(0, {"e.org": ["from"]})
    assert not second.publish(0, {"e.org": ["src"]})
    # The worker on the older version reloads before its next batch.
    assert worker.current() is not stale
    assert dedupe_key("https://e.org/a?from=x", worker.current()).endswith("https://e.org/a")
    assert second.load() == (1, {"e.org": ["from"]})
    client.close()
