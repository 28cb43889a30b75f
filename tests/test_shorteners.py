"""Shortener links: resolved to their target's key with one request that follows nothing,
through the SSRF guard, cached with the answer's time; against local shorteners (``bit.ly``
and ``t.co`` mapped to loopback servers)."""

from __future__ import annotations

import json
import os
import time
from itertools import pairwise
from pathlib import Path

import pytest
from scrapy.settings import Settings

from bloom_frontier.addon import BloomFrontierAddon
from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import BLOCKED, ERROR, OFFSITE, SEEN, ShortenerAnswer
from bloom_frontier.pipelines.writer import StoreWriter
from bloom_frontier.redis_client import redis_from_url
from bloom_frontier.shorteners import Shorteners, builtin_hosts
from tests.httpserver import TestServer, html, redirect
from tests.redirect_server import scrapy, spy_hosts
from tests.shortener_server import HANDLERS, HOST_MAP_ENV, HangingServer

SHORT_LINKS = (
    "http://bit.ly/known",  # -> /page, linked directly too: already seen
    "http://bit.ly/new",  # -> /other: fetched once, as the target's key
    "http://bit.ly/private",  # -> 10.0.0.1: blocked
    "http://bit.ly/away",  # -> another site: recorded, not fetched
    "http://t.co/down",  # a shortener that never answers
)


def test_builtin_list_has_the_usual_shorteners_and_not_identities() -> None:
    hosts = builtin_hosts()
    assert {"bit.ly", "t.co", "tinyurl.com", "goo.gl", "ow.ly", "buff.ly", "lnkd.in"} <= hosts
    assert "youtu.be" not in hosts
    assert Shorteners().host_of("https://youtu.be/kJQP7kiw5Fk") is None
    assert Shorteners().host_of("https://tinyurl.com/") is None  # the service's home page


def crawl(
    start_url: str, store_url: str, spy_log: Path, host_map: dict[str, int], redis_url: str | None
) -> float:
    """``scrapy crawl site`` with the shortener hosts mapped (on a shared frontier when
    ``redis_url``); seconds it took."""
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "STORE_URL"}}
    env.update({"SPY_LOG": str(spy_log), HOST_MAP_ENV: json.dumps(host_map)})
    if redis_url:
        env["REDIS_URL"] = redis_url
    began = time.monotonic()
    result = scrapy(
        "crawl", "site", "-a", f"start_url={start_url}",
        "-s", f"STORE_URL={store_url}", "-s", f"DOWNLOAD_HANDLERS={HANDLERS}",
        "-s", "SHORTENER_TIMEOUT=2", "-s", "SHORTENER_DELAY=0.2",
        env=env,
    )  # fmt: skip
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    return took


@pytest.fixture
def servers() -> tuple[TestServer, TestServer, HangingServer]:
    site = TestServer({"/": html("/page", *SHORT_LINKS), "/page": html(), "/other": html()})
    shortener = TestServer(
        {
            "/known": redirect(f"{site.url}/page", 301),
            "/new": redirect(f"{site.url}/other", 302),
            "/private": redirect("http://10.0.0.1/admin", 301),
            "/away": redirect("https://elsewhere.example/story", 301),
        }
    )
    return site, shortener, HangingServer()


@pytest.mark.parametrize("frontier", ["embedded", "shared"])
def test_short_links_resolved_once_guarded_and_cached(
    tmp_path: Path,
    servers: tuple[TestServer, TestServer, HangingServer],
    frontier: str,
    request: pytest.FixtureRequest,
) -> None:
    site, shortener, down = servers
    redis_url = request.getfixturevalue("redis_url") if frontier == "shared" else None
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    host_map = {"bit.ly": shortener.port, "t.co": down.port}
    with site, shortener, down:
        took = crawl(f"{site.url}/", store_url, tmp_path / "spy.log", host_map, redis_url)
        site_hits, short_hits = site.paths(), shortener.paths()
        short_times = sorted(hit.time for hit in shortener.hits)
        down_connections = len(down.connections)
        # A second crawl of the same site asks no shortener: the answers are cached.
        if redis_url:  # a new crawl of the same site, not the end of the first one
            with redis_from_url(redis_url) as client:
                client.flushall()
        crawl(f"{site.url}/", store_url, tmp_path / "spy2.log", host_map, redis_url)
        second_short_hits = shortener.paths()[len(short_hits) :]
        second_down_connections = len(down.connections) - down_connections

    # One request per short link, none for robots.txt, nothing retried, no target fetched
    # by the shortener request itself; the seen target is not fetched again, the new one once.
    assert sorted(short_hits) == ["/away", "/known", "/new", "/private"]
    assert site_hits.count("/page") == 1 and site_hits.count("/other") == 1
    assert down_connections == 1
    # Rate-limited per shortener host: SHORTENER_DELAY=0.2 apart (Scrapy randomizes a
    # worker's delay between 0.5x and 1.5x).
    gaps = [later - earlier for earlier, later in pairwise(short_times)]
    assert min(gaps) >= 0.09, gaps
    # The dead shortener cost one bounded wait (SHORTENER_TIMEOUT=2), not retries.
    assert took < 60
    assert second_short_hits == []
    assert second_down_connections == 1  # failures are not cached: asked again, once
    hosts = set(spy_hosts(tmp_path / "spy.log"))
    assert not hosts & {"10.0.0.1", "elsewhere.example"}, hosts

    store = StoreReader.from_url(store_url)
    chains = {chain.start_url: chain for chain in store.chains()}
    answers = {url: store.shortener_answer(url) for url in SHORT_LINKS}
    store.close()
    known = chains["http://bit.ly/known"]
    assert (known.outcome, known.hops[0].status) == (SEEN, 301)
    assert known.hops[0].target_url == f"{site.url}/page"
    assert chains["http://bit.ly/new"].final_url == f"{site.url}/other"
    assert chains["http://bit.ly/private"].outcome == BLOCKED
    assert chains["http://bit.ly/private"].reason == "private"
    away = chains["http://bit.ly/away"]
    assert (away.outcome, away.final_url) == (OFFSITE, "https://elsewhere.example/story")
    assert [hop.target_url for hop in away.hops] == ["https://elsewhere.example/story"]
    assert chains["http://t.co/down"].outcome == ERROR
    assert "Timeout" in (chains["http://t.co/down"].reason or "")

    assert answers["http://t.co/down"] is None
    cached = answers["http://bit.ly/private"]
    assert cached is not None and (cached.status, cached.location) == (
        301,
        "http://10.0.0.1/admin",
    )
    assert abs(cached.at - time.time()) < 300


def test_addon_gives_each_shortener_host_a_slot_and_keeps_the_users() -> None:
    settings = Settings({"SHORTENERS_ENABLED": True, "SHORTENER_DELAY": 2.5})
    settings.set("SHORTENER_HOSTS", ["go.example"])
    settings.set("DOWNLOAD_SLOTS", {"t.co": {"delay": 9}}, "project")
    BloomFrontierAddon().update_settings(settings)
    slots = settings.getdict("DOWNLOAD_SLOTS")
    assert slots["bit.ly"] == slots["go.example"] == {"delay": 2.5, "concurrency": 1}
    assert slots["t.co"] == {"delay": 9}


def test_cached_answer_is_read_buffered_or_stored(tmp_path: Path) -> None:
    """The crawl reads the cache through shortener_answer_later (off the loop during a
    crawl); buffered answers are found before their flush, written ones after it."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"

    def later(store: StoreWriter, short_url: str) -> ShortenerAnswer | None:
        results: list[ShortenerAnswer | None] = []
        store.shortener_answer_later(short_url).addCallback(results.append)
        return results[0]

    store = StoreWriter.from_url(url)
    store.add_shortener_answer(ShortenerAnswer("http://bit.ly/a", 301, "http://x.test/a"))
    buffered = later(store, "http://bit.ly/a")
    assert buffered is not None and buffered.location == "http://x.test/a"
    assert later(store, "http://bit.ly/b") is None
    store.close()
    reopened = StoreWriter.from_url(url)
    stored = later(reopened, "http://bit.ly/a")
    reopened.close()
    assert stored is not None and (stored.status, stored.location) == (301, "http://x.test/a")
