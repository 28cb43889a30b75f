"""Each URL is keyed once: the key travels in ``request.meta`` from the frontier to the
redirect and canonical-hint middlewares and the SSRF guard, which read it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from scrapy import Request

from crawler.canonical import dedupe_key
from crawler.frontier import META_KEY
from crawler.frontier.keys import carried_key, key_host, url_key
from middlewares.ssrf import normalized_host
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
    assert key == dedupe_key(request.url) and request.meta[META_KEY] == key
    assert carried_key(request) == key
    assert carried_key(request.replace(url="https://example.com/b")) is None


@pytest.mark.parametrize(
    "url", ["https://Bücher.Example.:8080/a?b=1", "http://[::FFFF:1.2.3.4]/", "http://0x7f.1/"]
)
def test_key_host_is_the_hosts_stage_1_spelling(url: str) -> None:
    assert key_host(dedupe_key(url)) == normalized_host(url)
