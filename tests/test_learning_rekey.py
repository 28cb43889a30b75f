"""Rules act as soon as they are proven: a URL is never fetched twice because its key
changed between two moments of the crawl (a rule learned, a filter rebuilt), in real crawls
of a local site, embedded and shared.

What was fetched is read from the server's own log.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.test import get_crawler

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.content.fingerprint import OK
from bloom_frontier.learning.evidence import Page as LearnedPage
from bloom_frontier.learning.evidence import Proposal
from bloom_frontier.learning.gate import LearnedRuleGate
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import APPLIED
from bloom_frontier.services import services_of
from bloom_frontier.spiders.site import SiteSpider
from tests.httpserver import Page, TestServer, redirect
from tests.learnsite import _page
from tests.test_learning_crawl import crawl, rules_in, scrapy

ADDONS = {"bloom_frontier.Addon": 0}
#: The stat a queued request dropped when it is taken from the queue is counted under.
DROPPED = "learn/dropped_queued"


class ItemSite:
    """Lists and tags (``/list/N``, ``/tag/N``) link to themselves with ``view=c``, which
    changes nothing, and to items ``/item/I?view=c&xq=I`` (``xq`` matters, ``view`` does
    not; ``/item/I?xq=I`` itself is never linked). Each item is linked from one list and
    one tag, reached at different moments of the crawl: before ``view`` is learned and
    after. Lists link to ``/go/N``, a redirect to ``/dest/N?view=c``, which tags link to."""

    def __init__(self, sections: int = 12) -> None:
        self.sections = sections
        self.items = 2 * sections

    def item_url(self, i: int) -> str:
        return f"/item/{i}?view=c&xq={i}"

    def items_of(self, section: str, j: int) -> list[int]:
        n = self.sections
        if section == "list":
            return [j, j + n]
        return [i for i in range(self.items) if (i * 5 + 3) % n == j]

    def page(self, path: str) -> Page | None:
        parts = urlsplit(path)
        params = dict(parse_qsl(parts.query))
        if parts.path == "/":
            links = [f"/{s}/{j}" for s in ("list", "tag") for j in range(self.sections)]
            return _page("Index", "Lists and tags.", links)
        match = re.fullmatch(r"/(list|tag|item|go|dest)/(\d+)", parts.path)
        if match is None:
            return None
        section, number = match.group(1), int(match.group(2))
        if section == "go":
            return redirect(f"/dest/{number}?view=c")
        if section == "dest":
            return _page(f"Destination {number}", f"Destination {number}. " * 20, [])
        if section == "item":
            if number >= self.items or params.get("xq") is None:
                return None
            text = f"Item {number} in variant {params['xq']}: " + "lorem ipsum " * 20
            return _page(f"Item {number}", text, ["/"])
        if number >= self.sections:
            return None
        text = f"{section.title()} {number}: " + " ".join(
            f"entry {k} of {section} {number}." for k in range(20)
        )
        links = [f"/{section}/{number}?view=c"]
        links += [self.item_url(i) for i in self.items_of(section, number)]
        # A redirect to a page with the neutral parameter, and a link to it.
        links.append(f"/go/{number}" if section == "list" else f"/dest/{number}?view=c")
        return _page(f"{section.title()} {number}", text, links)

    def server(self) -> TestServer:
        return TestServer({"/*": self.page})


def fetched_twice(paths: list[str]) -> dict[str, int]:
    """URLs the server answered more than once."""
    return {path: n for path, n in Counter(paths).items() if n > 1}


def stat(log: str, name: str) -> int:
    match = re.search(rf"'{re.escape(name)}': (\d+)", log)
    return int(match.group(1)) if match else 0


def learned_view(store: str) -> list[str]:
    """The applied learned rules that drop ``view`` (on the host, or on a path pattern of
    it: how far a rule reaches is the evidence's call, tests/test_learning_safety.py)."""
    return [
        rule
        for rule, state in rules_in(store).items()
        if rule.endswith("?view") and state == APPLIED
    ]


def assert_each_item_fetched_once(site: ItemSite, paths: list[str], log: str) -> None:
    items = Counter(path for path in paths if path.startswith("/item/"))
    assert items == Counter({site.item_url(i): 1 for i in range(site.items)}), log[-3000:]
    assert fetched_twice(paths) == {}, log[-3000:]


@pytest.mark.parametrize("shared", [False, True], ids=["embedded", "shared"])
def test_a_url_fetched_before_a_rule_was_learned_is_not_fetched_again_after(
    tmp_path: Path, shared: bool, request: pytest.FixtureRequest
) -> None:
    """``/item/I?view=c&xq=I`` is fetched under its full key before ``view`` is learned,
    then linked again and admitted under ``/item/I?xq=I``: dropped when it leaves the queue."""
    site = ItemSite()
    settings = ["CANON_LEARN=apply", "CANON_LEARN_RECHECK=0"]
    if shared:
        settings.append(f"REDIS_URL={request.getfixturevalue('redis_url')}")
    paths, log = crawl(site, f"sqlite:///{tmp_path / 'store.sqlite'}", *settings)
    assert learned_view(f"sqlite:///{tmp_path / 'store.sqlite'}"), log[-3000:]
    assert_each_item_fetched_once(site, paths, log)
    assert stat(log, DROPPED) > 0, log[-3000:]


class RefSite:
    """``/`` links to ``/p/I?ref=1``, then to ``/p/I?ref=2`` (fetched first, depth-first):
    ``ref`` changes nothing (the rule change under test strips it)."""

    def __init__(self, pages: int = 10) -> None:
        self.pages = pages

    def page(self, path: str) -> Page | None:
        parts = urlsplit(path)
        if parts.path == "/":
            links = [f"/p/{i}?ref={r}" for r in (1, 2) for i in range(self.pages)]
            return _page("Index", "All pages.", links)
        match = re.fullmatch(r"/p/(\d+)", parts.path)
        if match is None or int(match.group(1)) >= self.pages:
            return None
        return _page(f"Page {match.group(1)}", f"Page {match.group(1)}: " + "text " * 30, [])

    def server(self) -> TestServer:
        return TestServer({"/*": self.page})


STRIP_REF = json.dumps({"127.0.0.1": {"strip": ["ref"]}})


@pytest.mark.parametrize("shared", [False, True], ids=["embedded", "shared"])
def test_after_rebuild_filter_queued_variants_of_fetched_pages_are_not_fetched(
    tmp_path: Path, shared: bool, request: pytest.FixtureRequest
) -> None:
    """A crawl stopped with variants queued; ``rebuild-filter --allow-merges`` makes ``ref``
    a tracking parameter; the resumed crawl fetches no variant of a page fetched before,
    and every page once (of two variants both queued, one)."""
    site = RefSite()
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    frontier = (
        f"REDIS_URL={request.getfixturevalue('redis_url')}"
        if shared
        else f"JOBDIR={tmp_path / 'job'}"
    )
    common = ["-s", f"STORE_URL={store}", "-s", frontier, "-s", "CANON_LEARN=off"]
    with site.server() as server:
        first = scrapy(
            "crawl", "site", "-a", f"start_url={server.url}/", *common,
            "-s", "CONCURRENT_REQUESTS=1", "-s", "CLOSESPIDER_PAGECOUNT=8",
        )  # fmt: skip
        assert first.returncode == 0, first.stderr[-3000:]
        before = [path for path in server.paths() if path.startswith("/p/")]
        rebuilt = scrapy(
            "rebuild-filter", "site", *common, "-s", f"CANON_HOST_RULES={STRIP_REF}",
            "--allow-merges",
        )  # fmt: skip
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr[-3000:]
        assert "requests wait in the queue" in rebuilt.stdout, rebuilt.stdout
        resumed = scrapy(
            "crawl", "site", "-a", f"start_url={server.url}/", *common,
            "-s", f"CANON_HOST_RULES={STRIP_REF}",
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        after = [path for path in server.paths() if path.startswith("/p/")][len(before) :]
    fetched_before = {urlsplit(path).path for path in before}
    resumed_pages = Counter(urlsplit(path).path for path in after)
    assert fetched_before and len(fetched_before) < site.pages, before
    assert resumed_pages == Counter(
        {f"/p/{i}": 1 for i in range(site.pages) if f"/p/{i}" not in fetched_before}
    ), (before, after)
    assert stat(resumed.stderr, DROPPED) > 0, resumed.stderr[-3000:]


def test_redirect_targets_are_keyed_with_the_learned_rules_like_the_links(tmp_path: Path) -> None:
    """With ``view`` learned (applied in the store), the redirect target ``/dest/N?view=c``
    is recorded under the key its link gets, ``/dest/N``, and fetched once."""
    site = ItemSite()
    path = tmp_path / "store.sqlite"
    store = f"sqlite:///{path}"
    crawl(site, store, "CANON_LEARN=apply", "CANON_LEARN_RECHECK=0")
    assert learned_view(store)
    with sqlite3.connect(path) as database:
        database.execute("DELETE FROM url_aliases")  # what the next crawl records, alone
        # The rule on the whole host, /dest/ included (this site's evidence proves it for
        # /list/* and /tag/* only: tests/test_learning_safety.py says why it stops there).
        (rule_id,) = database.execute(
            "SELECT id FROM param_rules WHERE param = 'view' AND state = ?", (APPLIED,)
        ).fetchone()
        database.execute("DELETE FROM param_rules WHERE param = 'view' AND id != ?", (rule_id,))
        database.execute("UPDATE param_rules SET scope = '127.0.0.1' WHERE id = ?", (rule_id,))
    assert rules_in(store).get("127.0.0.1?view") == APPLIED
    paths, log = crawl(site, store, "CANON_LEARN_RECHECK=0")  # keys with the applied rule
    reader = StoreReader.from_url(store)
    aliases = {alias["url"]: alias["key"] for alias in reader.url_aliases()}
    reader.close()
    targets = {url: key for url, key in aliases.items() if "/dest/" in url}
    assert len(targets) == site.sections, (sorted(aliases), log[-3000:])
    for url, key in targets.items():
        assert key == "r2|" + url.removesuffix("?view=c"), (url, key)
    dest = Counter(urlsplit(p).path for p in paths if p.startswith("/dest/"))
    assert dest == Counter({f"/dest/{j}": 1 for j in range(site.sections)}), paths


def test_a_rule_applied_makes_the_bare_url_of_a_page_fetched_with_it_a_duplicate(
    tmp_path: Path,
) -> None:
    """``/a`` was queued, then ``/a?p=1`` fetched, then ``p`` learned: ``/a`` is dropped
    when it leaves the queue, and a link to ``/a?p=2`` found now is a duplicate."""
    crawler = get_crawler(
        SiteSpider,
        {"ADDONS": ADDONS, "CANON_LEARN": "apply", "STORE_URL": f"sqlite:///{tmp_path / 's.db'}"},
    )
    services = services_of(crawler)
    learner, frontier = services.learner, services.frontier
    assert learner is not None
    learner.live.current()
    frontier.keyer.use_rules(learner.live)  # as spider_opened does
    gate = LearnedRuleGate.from_crawler(crawler)
    bare = Request("https://e.org/a")
    assert frontier.admit(None, [bare]) == [bare]
    fetched = "https://e.org/a?p=1"
    plain = learner.live.without_learned()
    learner.evidence.observe(LearnedPage(fetched, dedupe_key(fetched, plain), "the text", OK, 200))
    learner._propose(Proposal("e.org", "p", ((fetched, "https://e.org/b?p=1"),)))
    assert learner.live.learned == {"e.org": ["p"]}
    with pytest.raises(IgnoreRequest):
        gate.process_request(bare)
    assert crawler.stats.get_value(DROPPED) == 1
    assert frontier.admit(None, [Request("https://e.org/a?p=2")]) == []
    # Another page of the host, never fetched, goes on.
    other = Request("https://e.org/c")
    assert frontier.admit(None, [other]) == [other]
    gate.process_request(other)
