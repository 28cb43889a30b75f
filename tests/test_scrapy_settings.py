"""Scrapy's own settings, honoured or refused at start, never silently ignored: real crawls
of a local site (``scrapy crawl`` in a subprocess, as a user runs it).

- ``REDIRECT_MAX_TIMES`` counts redirects followed, as in Scrapy, on top of the chain cap
  ``REDIRECT_MAX_HOPS``;
- a ``REQUEST_FINGERPRINTER_CLASS`` that tells apart two requests for one URL (by a
  header) would be merged by the frontier's URL keys: the crawl refuses to start, naming it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.httpserver import TestServer, html
from tests.redirect_server import run_crawl, scrapy


def test_redirect_max_times_counts_the_redirects_followed(tmp_path: Path) -> None:
    """``REDIRECT_MAX_TIMES=1``: one redirect followed, as Scrapy's middleware would; the next
    hop is recorded and the chain ends as too-many-hops (REDIRECT_MAX_HOPS stays 10)."""
    crawl = run_crawl(tmp_path, "-s", "REDIRECT_MAX_TIMES=1")
    chain = crawl.chains["/chain/1"]  # /chain/1 -> /chain/2 -> /chain/3?utm... -> /final/chain
    assert chain.outcome == "too-many-hops"
    assert [crawl.path(hop.source_url) for hop in chain.hops] == ["/chain/1", "/chain/2"]
    assert crawl.hits["/chain/2"] == 1
    assert crawl.hits["/chain/3?utm_source=chain"] == 0
    assert crawl.hits["/final/chain"] == 0
    assert crawl.chains["/r/301"].outcome == "fetched"  # one redirect: within the cap
    assert len(crawl.chains["/spiral/1"].hops) == 2


def crawl_site(
    server: TestServer, tmp_path: Path, *options: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "STORE_URL"}}
    return scrapy(
        "crawl",
        "site",
        "-a",
        f"start_url={server.url}/",
        "-s",
        f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}",
        *options,
        env=env,
    )


SITE = {"/": html("/a", "/b"), "/a": html("/b"), "/b": html()}


def test_a_fingerprinter_that_tells_apart_one_url_is_refused_at_start(tmp_path: Path) -> None:
    with TestServer(SITE) as server:
        done = crawl_site(
            server,
            tmp_path,
            "-s",
            "REQUEST_FINGERPRINTER_CLASS=tests.fingerprinters.VariantFingerprinter",
        )
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "REQUEST_FINGERPRINTER_CLASS = 'tests.fingerprinters.VariantFingerprinter'" in lines[0]
    assert "tells apart requests for the same URL by a header" in lines[0]
    assert server.paths() == []  # refused before the engine started


def test_a_fingerprinter_that_merges_more_than_the_keys_crawls(tmp_path: Path) -> None:
    """A case-folding fingerprinter tells nothing apart beyond the URL: the keys decide, as
    before, and the crawl runs."""
    with TestServer(SITE) as server:
        done = crawl_site(
            server,
            tmp_path,
            "-s",
            "REQUEST_FINGERPRINTER_CLASS=tests.fingerprinters.CaseFoldingFingerprinter",
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(set(server.paths())) == ["/", "/a", "/b", "/robots.txt"]
    assert all(server.paths().count(path) == 1 for path in ("/", "/a", "/b"))
