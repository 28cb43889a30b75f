"""Rules act as soon as they are proven: a URL is never fetched twice because its key
changed between two moments of the crawl (a rule learned, a filter rebuilt), in real crawls
of a local site, embedded and shared.

What was fetched is read from the server's own log.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from bloom_frontier.pipelines.records import APPLIED
from tests.httpserver import Page, TestServer
from tests.learnsite import _page
from tests.test_learning_crawl import crawl, rules_in

#: The stat a queued request dropped when it is taken from the queue is counted under.
DROPPED = "learn/dropped_queued"


class ItemSite:
    """Lists and tags (``/list/N``, ``/tag/N``) link to themselves with ``view=c``, which
    changes nothing, and to items ``/item/I?view=c&xq=I`` (``xq`` matters, ``view`` does
    not; ``/item/I?xq=I`` itself is never linked). Each item is linked from one list and
    one tag, reached at different moments of the crawl: before ``view`` is learned and
    after."""

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
        match = re.fullmatch(r"/(list|tag|item)/(\d+)", parts.path)
        if match is None:
            return None
        section, number = match.group(1), int(match.group(2))
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
        return _page(f"{section.title()} {number}", text, links)

    def server(self) -> TestServer:
        return TestServer({"/*": self.page})


def fetched_twice(paths: list[str]) -> dict[str, int]:
    """URLs the server answered more than once."""
    return {path: n for path, n in Counter(paths).items() if n > 1}


def stat(log: str, name: str) -> int:
    match = re.search(rf"'{re.escape(name)}': (\d+)", log)
    return int(match.group(1)) if match else 0


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
    assert rules_in(f"sqlite:///{tmp_path / 'store.sqlite'}").get("127.0.0.1?view") == APPLIED
    assert_each_item_fetched_once(site, paths, log)
    assert stat(log, DROPPED) > 0, log[-3000:]
