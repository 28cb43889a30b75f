"""Short links that redirect to other short links (``t.co`` -> ``bit.ly`` -> page) are
followed within the hop cap, and every host of the crawl's shortener list (a user-added one
included) stays out of the redirect map; against local shorteners (``t.co``, ``bit.ly`` and
``go.example`` mapped to loopback servers)."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from bloom_frontier.pipelines.reader import StoreReader
from bloom_frontier.pipelines.records import FETCHED, LOOP, TOO_MANY_HOPS
from tests.httpserver import TestServer, html, redirect
from tests.redirect_server import scrapy
from tests.shortener_server import HANDLERS, HOST_MAP_ENV

LINKS = (
    "http://t.co/hop",  # -> bit.ly/next -> /page
    "http://go.example/x",  # a user-added shortener -> bit.ly/other -> /other
    "http://t.co/loop",  # -> bit.ly/back -> t.co/loop
    "http://t.co/long",  # -> bit.ly/l2 -> t.co/l3 -> bit.ly/l4 -> /far: over the cap of 3
)


def test_shortener_to_shortener_chains_are_followed_and_never_map_entries(tmp_path: Path) -> None:
    site = TestServer({"/": html(*LINKS), "/page": html(), "/other": html(), "/far": html()})
    t_co = TestServer(
        {
            "/hop": redirect("http://bit.ly/next", 301),
            "/loop": redirect("http://bit.ly/back", 301),
            "/long": redirect("http://bit.ly/l2", 301),
            "/l3": redirect("http://bit.ly/l4", 301),
        }
    )
    bit_ly = TestServer(
        {
            "/next": redirect(f"{site.url}/page", 301),
            "/other": redirect(f"{site.url}/other", 302),
            "/back": redirect("http://t.co/loop", 301),
            "/l2": redirect("http://t.co/l3", 301),
            "/l4": redirect(f"{site.url}/far", 301),
        }
    )
    go = TestServer({"/x": redirect("http://bit.ly/other", 301)})
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "STORE_URL"}}
    env["SPY_LOG"] = str(tmp_path / "spy.log")
    with site, t_co, bit_ly, go:
        ports = {"t.co": t_co.port, "bit.ly": bit_ly.port, "go.example": go.port}
        env[HOST_MAP_ENV] = json.dumps(ports)
        result = scrapy(
            "crawl", "site", "-a", f"start_url={site.url}/",
            "-s", f"STORE_URL={store_url}", "-s", f"DOWNLOAD_HANDLERS={HANDLERS}",
            "-s", "SHORTENER_HOSTS=go.example", "-s", "REDIRECT_MAX_HOPS=3",
            "-s", "SHORTENER_DELAY=0",
            env=env,
        )  # fmt: skip
        site_hits, short_hits = site.paths(), t_co.paths() + bit_ly.paths() + go.paths()
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]

    # Each short link asked once; the pages at the end of the chains fetched once, the one
    # beyond the hop cap never.
    assert sorted(short_hits) == sorted(
        ["/hop", "/loop", "/long", "/l3", "/next", "/other", "/back", "/l2", "/x"]
    )
    assert site_hits.count("/page") == 1 and site_hits.count("/other") == 1
    assert "/far" not in site_hits

    store = StoreReader.from_url(store_url)
    chains = {chain.start_url: chain for chain in store.chains()}
    store.close()
    hop = chains["http://t.co/hop"]
    assert (hop.outcome, hop.final_url) == (FETCHED, f"{site.url}/page")
    assert [(h.source_url, h.target_url) for h in hop.hops] == [
        ("http://t.co/hop", "http://bit.ly/next"),
        ("http://bit.ly/next", f"{site.url}/page"),
    ]
    assert chains["http://go.example/x"].final_url == f"{site.url}/other"
    assert chains["http://t.co/loop"].outcome == LOOP
    assert chains["http://t.co/long"].outcome == TOO_MANY_HOPS

    # In the map the short links lead to their pages but are never entries, the user's
    # SHORTENER_HOSTS included.
    rows = [json.loads(line) for line in redirects(store_url, "jsonl").splitlines()]
    by_source = {row["source"]: row for row in rows}
    assert by_source["http://t.co/hop"]["target"] == f"{site.url}/page"
    assert {by_source[url]["skip"] for url in ("http://t.co/hop", "http://go.example/x")} == {
        "shortener"
    }
    assert by_source["http://bit.ly/next"]["skip"] == "shortener"
    bulk = list(csv.DictReader(io.StringIO(redirects(store_url, "bulk"))))
    assert not [row for row in bulk if not row["source"].startswith(site.url)]


def redirects(store_url: str, fmt: str) -> str:
    result = scrapy(
        "redirects", "-s", f"STORE_URL={store_url}", "-s", "SHORTENER_HOSTS=go.example",
        "--format", fmt,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
