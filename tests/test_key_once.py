"""Each URL is keyed once: the key travels in ``request.meta`` from the frontier to the
redirect and canonical-hint middlewares and the SSRF guard, which read it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from scrapy import Request
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.canonical.rules import DEFAULT_RULES
from bloom_frontier.frontier import keys
from bloom_frontier.frontier.keys import RequestKeyer, carried_key, key_host, url_key
from bloom_frontier.meta import DEDUPE_KEY_META
from bloom_frontier.ssrf import normalized_host
from tests.httpserver import TestServer, html, redirect

ROOT = Path(__file__).resolve().parent.parent

#: Every URL linked once: whatever keying costs here is overhead, not duplicates.
SITE = {
    "/": html("/a", "/b", "/moved"),
    "/a": html("/c?utm_source=feed"),
    "/b": html(head='<link rel="canonical" href="/b-canonical">'),
    "/moved": redirect("/d"),
    "/c": html(),
    "/d": html(),
    "/b-canonical": html(),
}


@pytest.mark.parametrize("shared", [False, True], ids=["embedded", "shared"])
def test_at_most_two_canonicalizations_per_admitted_url(
    tmp_path: Path, shared: bool, request: pytest.FixtureRequest
) -> None:
    redis_url = request.getfixturevalue("redis_url") if shared else ""
    with TestServer(SITE) as server:
        result = subprocess.run(
            [sys.executable, "-m", "tests.key_counting", f"{server.url}/",
             f"sqlite:///{tmp_path / 'store.sqlite'}", redis_url],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        hits = Counter(path for path in server.paths() if path != "/robots.txt")
    assert result.returncode == 0, result.stderr[-3000:]
    calls = json.loads(result.stdout.splitlines()[-1])
    assert set(hits) == {*SITE, "/c?utm_source=feed"} - {"/c"}
    assert max(hits.values()) == 1
    # /, /a, /b, /moved, /c?utm_source=feed, /d (the redirect target), /b-canonical
    assert calls["admitted"] == 7
    # Parameter-rule learning is on (CANON_LEARN="propose"): with no learned rule active it
    # reuses the key each request carries instead of keying the fetched page again.
    assert calls["learn_key"] == 0, calls
    assert calls["canonicalize"] <= 2 * calls["admitted"], calls
    assert calls["dedupe_key"] <= calls["admitted"], calls


def test_a_key_is_carried_for_its_url_only() -> None:
    request = Request("https://example.com/a?utm_source=x")
    key = url_key(request, request.url)
    assert key == dedupe_key(request.url) and request.meta[DEDUPE_KEY_META] == key
    assert carried_key(request) == key
    assert carried_key(request.replace(url="https://example.com/b")) is None


def test_a_urls_key_is_memoized_until_the_rules_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """A navigation link repeated on every page is keyed once; learned rules (or another
    version) key it again; the memo is bounded."""
    keyed: list[str] = []

    def counting(url: str, rules: object) -> str:
        keyed.append(url)
        return dedupe_key(url, rules)  # type: ignore[arg-type]

    monkeypatch.setattr(keys, "dedupe_key", counting)
    keyer = RequestKeyer(MemoryStatsCollector(get_crawler()))
    url = "https://example.com/nav?ref=top"
    first = keyer.key_of(Request(url))
    assert keyer.key_of(Request(url)) == keyer.link_key(url) == first == dedupe_key(url)
    assert keyed == [url]
    # A link keyed by URL gets the key of the request Scrapy would make for it.
    assert keyer.link_key("https://example.com/café") == dedupe_key("https://example.com/caf%C3%A9")
    learned = DEFAULT_RULES.with_host_rules({"example.com": {"strip": ["ref"]}})
    # Learned rules as the learning extension's LiveRules gives them: version 1, on the host.
    live = SimpleNamespace(current=lambda: learned, version=1, touches=lambda host: True)
    keyer.use_rules(live)  # type: ignore[arg-type]
    assert keyer.key_of(Request(url)) == dedupe_key(url, learned) != first
    assert keyed.count(url) == 2
    monkeypatch.setattr(keys, "KEY_MEMO_SIZE", 2)
    for page in ("a", "b", "c", "a"):
        keyer.link_key(f"https://example.com/{page}")
    assert keyed[-4:] == [f"https://example.com/{page}" for page in ("a", "b", "c", "a")]


@pytest.mark.parametrize(
    "url", ["https://Bücher.Example.:8080/a?b=1", "http://[::FFFF:1.2.3.4]/", "http://0x7f.1/"]
)
def test_key_host_is_the_hosts_stage_1_spelling(url: str) -> None:
    assert key_host(dedupe_key(url)) == normalized_host(url)
