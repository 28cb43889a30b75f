"""Stored requests are untrusted: whatever a writer to the crawl's Redis keys puts in a
request's ``meta``, the SSRF guard judges the URL that will be fetched, and the keys that
change how a request is fetched count only as far as the crawl's settings allow.

Real crawls (``scrapy crawl site`` on a shared frontier in RedisBloom) with the download
handler behind a spy (:mod:`tests.handler_spies`) that logs every host it is asked to reach
and refuses all but the crawl's own, before any socket exists.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import redis

from bloom_frontier.canonical.rules import dedupe_key
from bloom_frontier.frontier.redis import quarantine
from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.pipelines.reader import StoreReader
from tests.handler_spies import HANDLERS, SPY_ALLOW_ENV
from tests.httpserver import Page, TestServer, html
from tests.redirect_server import ROOT, SPY_LOG_ENV, scrapy, spy_hosts
from tests.test_quarantine import inject

#: The private literals a stored request aimed at (issue 24, item 3): every one reached
#: its address through the aiohttp handler when the guard trusted the carried key.
PRIVATE_LITERALS = (
    "[::1]",
    "169.254.169.254",
    "10.0.0.1",
    "127.0.0.1",
    "[fd00::1]",
    "0.0.0.0",
    "[::ffff:127.0.0.1]",
)
KEYS = FrontierKeys.for_prefix("{site}")


def shared_crawl(
    start_url: str, redis_url: str, tmp: Path, handler: str, *options: str
) -> tuple[str, list[str]]:
    """``scrapy crawl site`` on the shared frontier with the ``handler`` spy; its log and
    the hosts the spy was asked for. It must end cleanly: exit 0, no traceback through the
    project's code (Scrapy logs a download error, such as a size refusal, with one)."""
    spy_log = tmp / f"spy-{handler}.log"
    env = {key: value for key, value in os.environ.items() if key not in {"REDIS_URL"}}
    env.update({SPY_LOG_ENV: str(spy_log), SPY_ALLOW_ENV: "localhost"})
    result = scrapy(
        "crawl", "site", "-a", f"start_url={start_url}",
        "-s", f"REDIS_URL={redis_url}",
        "-s", f"STORE_URL=sqlite:///{tmp / 'store.sqlite'}",
        "-s", f"DOWNLOAD_HANDLERS={HANDLERS[handler]}",
        *options,
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    ours = [f'File "{ROOT / package}' for package in ("crawler", "middlewares", "pipelines")]
    assert not any(frame in result.stderr for frame in ours), result.stderr[-4000:]
    return result.stderr, spy_hosts(spy_log)


@pytest.mark.parametrize("handler", ["http11", "aiohttp"])
def test_a_stored_key_naming_the_start_host_does_not_pass_a_private_url(
    handler: str, redis_url: str, tmp_path: Path
) -> None:
    with TestServer({"/": html("/a")}) as site, redis.Redis.from_url(redis_url) as client:
        start = f"http://localhost:{site.port}/"
        for i, literal in enumerate(PRIVATE_LITERALS):
            url = f"http://{literal}:{site.port}/secret{i}"
            # The key and the URL it was "computed for" name the start host's page.
            own = f"{start}page{i}"
            meta = {"dedupe_key": dedupe_key(own), "dedupe_key_url": url}
            payload = {"url": url, "callback": "parse", "meta": meta}
            inject(client, KEYS, json.dumps(payload).encode(), score=-10)
        _, hosts = shared_crawl(start, redis_url, tmp_path, handler)
        hits = site.paths()
    assert "localhost" in hosts, "the spy saw nothing: it is not installed"
    assert set(hosts) == {"localhost"}, hosts
    assert not [path for path in hits if path.startswith("/secret")]
    store = StoreReader.from_url(f"sqlite:///{tmp_path / 'store.sqlite'}")
    blocked = {c.start_url: c.reason for c in store.chains() if c.outcome == "blocked"}
    store.close()
    assert len(blocked) == len(PRIVATE_LITERALS), blocked
    reasons = {"loopback", "metadata", "private", "unique-local", "unspecified"}
    assert set(blocked.values()) <= reasons


#: Stored requests no worker writes, each with the reason it is quarantined for (each ended
#: in a traceback in the crawl's log when it was decoded as it stood).
POISONED = {
    "/helper": ({"callback": "is_short_link"}, "not a callback of spider 'site'"),
    "/chain": ({"callback": "parse", "meta": {"redirect_chain": 1}}, "redirect chain"),
    "/bind": (
        {"callback": "parse", "meta": {"bindaddress": ["127.0.0.1"]}},
        "meta 'bindaddress' must be a host or a [host, port] pair",
    ),
}


def test_stored_meta_counts_only_as_far_as_the_settings_allow(
    redis_url: str, tmp_path: Path
) -> None:
    """robots.txt is obeyed and the size limit holds for a stored request that asks to skip
    them; poisoned entries are quarantined with their reason, no traceback in the log."""
    routes = {
        "/": html(),
        "/robots.txt": Page("User-agent: *\nDisallow: /private\n", content_type="text/plain"),
        "/private": html(title="robots.txt disallows it"),
        "/big": html(title="x" * 20_000),
        "/own": html(),
    }
    with TestServer(routes) as site, redis.Redis.from_url(redis_url) as client:
        start = f"http://localhost:{site.port}/"
        stored = {
            "/private": {"dont_obey_robotstxt": True},
            "/big": {"download_maxsize": 0, "download_warnsize": 0},
            "/own": {"category": {"id": 7}},
        }
        for path, meta in stored.items():
            payload = {"url": f"{start[:-1]}{path}", "callback": "parse", "meta": meta}
            inject(client, KEYS, json.dumps(payload).encode(), score=-10)
        poisons = {}
        for path, (fields, reason) in POISONED.items():
            payload = json.dumps({"url": f"{start[:-1]}{path}", **fields}).encode()
            poisons[inject(client, KEYS, payload, score=-10)] = reason
        log, _ = shared_crawl(
            start, redis_url, tmp_path, "http11", "-s", "DOWNLOAD_MAXSIZE=10000",
            "-s", "LOG_LEVEL=DEBUG",
        )  # fmt: skip
        hits = site.paths()
        records = {r["id"]: r["reason"] for r in quarantine.records(client, KEYS)}
    store = StoreReader.from_url(f"sqlite:///{tmp_path / 'store.sqlite'}")
    pages = {page["fetch_url"].removeprefix(start[:-1]) for page in store.pages()}
    store.close()
    assert "/private" not in hits
    assert "/big" not in pages  # refused for its size: not a page of the crawl
    assert {"/", "/own"} <= pages
    assert not {"/helper", "/chain", "/bind"} & set(hits)
    assert set(records) == set(poisons)
    for request_id, reason in poisons.items():
        assert reason in records[request_id]
    for key in ("dont_obey_robotstxt", "download_maxsize", "download_warnsize"):
        assert f"'frontier/stored_meta_dropped/{key}': 1" in log
        assert log.count(f"asks for meta {key}=") == 1


def test_a_900_kb_url_is_logged_cut_not_whole(redis_url: str, tmp_path: Path) -> None:
    """Stored requests with URLs of 900 KB (under FRONTIER_MAX_REQUEST_BYTES): the guard
    refuses them and says so, each line carrying the start of the URL and how much was cut
    (they were logged whole, twice each: by the guard and as failed for good)."""
    with TestServer({"/": html()}) as site, redis.Redis.from_url(redis_url) as client:
        start = f"http://localhost:{site.port}/"
        for url in (start + "a" * 900_000, "http://10.0.0.1/" + "b" * 900_000):
            payload = {"url": url, "callback": "parse"}
            inject(client, KEYS, json.dumps(payload).encode(), score=-10)
        log, _ = shared_crawl(start, redis_url, tmp_path, "http11")
    longest = max(log.splitlines(), key=len)
    assert len(longest) < 2000, longest[:300]
    cut = [line for line in log.splitlines() if "... (+" in line and "SSRF guard refused" in line]
    assert len(cut) >= 2, log[-3000:]
