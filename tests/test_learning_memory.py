"""The learner's memory is bounded (``CANON_LEARN_MEMORY``) and forgetting can only delay a
proposal: never make one that unbounded memory would not have made."""

from __future__ import annotations

import random

import pytest
from scrapy.utils.test import get_crawler

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.content.fingerprint import ERROR, OK, SOFT_404
from bloom_frontier.defaults import CANON_LEARN_MEMORY
from bloom_frontier.learning.evidence import Page, ParamEvidence
from bloom_frontier.learning.extension import ParamRuleLearning
from bloom_frontier.spiders.site import SiteSpider


def page(url: str, content: str, kind: str = OK, status: int = 200) -> Page:
    return Page(url, dedupe_key(url), content, kind, status)


def pairs(host: str, section: str, n: int, param: str = "from=nav") -> list[Page]:
    """``n`` documents of ``host`` under ``/section/``, each also fetched with ``param``."""
    out = []
    for i in range(n):
        url = f"https://{host}/{section}/{i}"
        out += [page(url, f"doc {url}"), page(f"{url}?{param}", f"doc {url}")]
    return out


def names(evidence: ParamEvidence, hosts: list[str], params: list[str]) -> set[str]:
    return {
        f"{p.scope}?{p.param}"
        for host in hosts
        for param in params
        for p in evidence.proposals(host, param)
    }


def feed(evidence: ParamEvidence, pages: list[Page]) -> None:
    for p in pages:
        evidence.observe(p)


def other_hosts(n: int) -> list[Page]:
    return [page(f"https://h{i}.org/x/{j}", f"h{i} {j}") for i in range(n) for j in range(5)]


def test_memory_stays_bounded_and_counts_what_it_forgot() -> None:
    evidence = ParamEvidence(min_pairs=3, max_pages=40)
    feed(evidence, other_hosts(40))
    assert 35 <= evidence.remembered <= 40  # whole hosts of 5 pages are forgotten
    assert evidence.forgotten_pages == 200 - evidence.remembered


def test_evidence_that_does_not_fit_is_a_proposal_delayed() -> None:
    stream = pairs("e.org", "a", 3) + pairs("e.org", "b", 1)
    roomy = ParamEvidence(min_pairs=3, max_pages=100)
    feed(roomy, stream)
    assert names(roomy, ["e.org"], ["from"]) == {"e.org?from"}
    # Eight pages of e.org do not fit in five: forgotten before they prove anything.
    tight = ParamEvidence(min_pairs=3, max_pages=5)
    feed(tight, stream)
    assert names(tight, ["e.org"], ["from"]) == set()


def test_a_counter_example_forgotten_still_vetoes_where_it_applied() -> None:
    counter = [page("https://e.org/a/9", "nine"), page("https://e.org/a/9?from=nav", "x")]
    later = pairs("e.org", "a", 3) + pairs("e.org", "b", 3)
    evidence = ParamEvidence(min_pairs=3, max_pages=30)
    feed(evidence, counter)
    feed(evidence, other_hosts(10))  # e.org's /a/, fed least recently, is forgotten
    assert evidence.page(dedupe_key("https://e.org/a/9")) is None
    feed(evidence, later)
    # Not for the host nor /a/, where the counter-example was; /b/ is learned, as unbounded
    # memory learns it.
    assert names(evidence, ["e.org"], ["from"]) == {"e.org/b/*?from"}
    unbounded = ParamEvidence(min_pairs=3)
    feed(unbounded, counter + later)
    assert names(unbounded, ["e.org"], ["from"]) == {"e.org/b/*?from"}
    # A parameter the forgotten pages never carried is learned for the host as before.
    feed(evidence, pairs("e.org", "c", 2, "src=x") + pairs("e.org", "d", 2, "src=x"))
    assert names(evidence, ["e.org"], ["src"]) == {"e.org?src"}


def test_forgetting_one_section_keeps_learning_in_the_others() -> None:
    """One big site: the sections crawled first are forgotten, later ones still learn."""
    evidence = ParamEvidence(min_pairs=3, max_pages=12)
    feed(evidence, pairs("e.org", "old", 5) + pairs("e.org", "new", 3))
    assert evidence.forgotten_pages == 10
    assert names(evidence, ["e.org"], ["from"]) == {"e.org/new/*?from"}


def test_a_generic_page_whose_copies_were_forgotten_proves_nothing() -> None:
    """The same "please log in" page on many URLs: its copies on a forgotten host must not
    make its copies elsewhere look like one document."""
    evidence = ParamEvidence(min_pairs=3, max_pages=12)
    feed(evidence, [page("https://login.org/p", "login wall")])
    feed(evidence, other_hosts(3))  # login.org forgotten
    wall = [page("https://e.org/w/0", "login wall"), page("https://e.org/w/0?from=x", "login wall")]
    feed(evidence, wall + pairs("e.org", "a", 1) + pairs("e.org", "b", 1))
    unbounded = ParamEvidence(min_pairs=3)
    feed(unbounded, [page("https://login.org/p", "login wall"), *wall])
    feed(unbounded, pairs("e.org", "a", 1) + pairs("e.org", "b", 1))
    assert names(unbounded, ["e.org"], ["from"]) == set()
    assert names(evidence, ["e.org"], ["from"]) == set()


def covered(proposal: str, by: set[str]) -> bool:
    """True if a proposal in ``by`` for the same parameter reaches at least as far."""
    scope, _, param = proposal.partition("?")
    host = scope.partition("/")[0]
    return any(
        other.partition("?")[2] == param
        and (other.partition("?")[0] == host or scope.startswith(other.partition("?")[0][:-1]))
        for other in by
    )


PARAMS = ["from", "id", "ref"]


def random_crawl(rng: random.Random, length: int) -> list[Page]:
    """Pages of a few hosts where ``from`` changes nothing, ``id`` always matters and
    ``ref`` matters on some paths only; with generic pages, errors and soft-404s."""
    pages = []
    for _ in range(length):
        host = rng.choice(["a.org", "b.org", "c.org", "d.org"])
        section, doc = rng.choice(["s", "t", "u"]), rng.randrange(6)
        path = f"/{section}/{doc}"
        params, content = [], f"{host}{path}"
        for name, values in (("from", 3), ("id", 2), ("ref", 2)):
            if rng.random() < 0.4:
                value = rng.randrange(values)
                params.append(f"{name}={value}")
                if name == "id" or (name == "ref" and section == "u"):
                    content += f" {name}{value}"
        kind, status = OK, 200
        roll = rng.random()
        if roll < 0.05:
            content = "generic wall"
        elif roll < 0.08:
            kind, status = ERROR, 404
        elif roll < 0.1:
            kind = SOFT_404
        url = f"https://{host}{path}" + (f"?{'&'.join(params)}" if params else "")
        pages.append(page(url, content, kind, status))
    return pages


@pytest.mark.parametrize("seed", range(40))
def test_forgetting_never_proposes_what_unbounded_memory_would_not(seed: int) -> None:
    rng = random.Random(seed)
    bounded = ParamEvidence(min_pairs=2, max_pages=rng.choice([3, 20, 120, 200]))
    unbounded = ParamEvidence(min_pairs=2)
    hosts, params = ["a.org", "b.org", "c.org", "d.org"], PARAMS
    for p in random_crawl(rng, 400):
        bounded.observe(p)
        unbounded.observe(p)
        proposed = names(bounded, hosts, params)
        reference = names(unbounded, hosts, params)
        assert all(covered(name, reference) for name in proposed), (proposed, reference)
    assert bounded.remembered <= bounded.max_pages


def test_the_random_crawls_do_teach_something() -> None:
    """The comparison above is not vacuous: on these crawls both learners propose ``from``
    (the bounded one at 200 pages too), ``ref`` only away from /u/ and never ``id``."""
    learned: dict[int, set[str]] = {}
    for max_pages in (None, 200):
        proposals: set[str] = set()
        for seed in range(40):
            evidence = ParamEvidence(min_pairs=2, max_pages=max_pages or 10**6)
            for p in random_crawl(random.Random(seed), 400):
                evidence.observe(p)
            proposals |= names(evidence, ["a.org", "b.org", "c.org", "d.org"], PARAMS)
        assert {name.partition("?")[2] for name in proposals} <= {"from", "ref"}
        assert not [
            name
            for name in proposals
            if name.endswith("?ref") and "/s/" not in name and "/t/" not in name
        ]
        learned[max_pages or 0] = {name for name in proposals if name.endswith("?from")}
    assert learned[0] and learned[200]


def test_the_setting_bounds_a_crawls_learner() -> None:
    addon = {"ADDONS": {"bloom_frontier.Addon": 0}}
    crawler = get_crawler(SiteSpider, {**addon, "CANON_LEARN_MEMORY": 7})
    assert ParamRuleLearning.from_crawler(crawler).evidence.max_pages == 7
    assert ParamRuleLearning.from_crawler(get_crawler(SiteSpider, addon)).evidence.max_pages == (
        CANON_LEARN_MEMORY
    )
