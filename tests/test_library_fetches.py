"""What Scrapy or a library would fetch on its own, outside the SSRF guard, is off or goes
through the guard: the Public Suffix List of Scrapy's cookie handling, robots.txt of a
redirect target."""

from __future__ import annotations

import os
from pathlib import Path

from tests.handler_spies import HANDLERS, SPY_ALLOW_ENV
from tests.httpserver import Page, TestServer, html
from tests.redirect_server import SPY_LOG_ENV, scrapy, spy_hosts


def test_cookie_handling_never_fetches_the_public_suffix_list(tmp_path: Path) -> None:
    """A response setting a cookie with a ``Domain`` makes Scrapy's cookie middleware ask
    tldextract whether the domain is a public suffix; tldextract built with its defaults
    fetched the list from publicsuffix.org (and cached it under ``$TLDEXTRACT_CACHE``)."""
    cookie = Page(html("/next").body, headers={"Set-Cookie": "sid=1; Domain=localhost; Path=/"})
    cache = tmp_path / "tldextract-cache"
    with TestServer({"/": cookie, "/next": html()}) as site:
        env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
        env.update(
            {
                "TLDEXTRACT_CACHE": str(cache),
                SPY_LOG_ENV: str(tmp_path / "spy.log"),
                SPY_ALLOW_ENV: "localhost",
            }
        )
        result = scrapy(
            "crawl", "site", "-a", f"start_url=http://localhost:{site.port}/",
            "-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}",
            "-s", f"DOWNLOAD_HANDLERS={HANDLERS['http11']}",
            env=env,
        )  # fmt: skip
        hits = site.paths()
    assert result.returncode == 0, result.stderr[-3000:]
    assert "/next" in hits  # the cookie was handled, the crawl went on
    assert set(spy_hosts(tmp_path / "spy.log")) == {"localhost"}
    assert "Public Suffix List" not in result.stderr
    cached = (
        sorted(str(path.relative_to(cache)) for path in cache.rglob("*")) if cache.exists() else []
    )
    assert cached == [], "tldextract fetched (or tried to fetch) the list and cached it"


def test_robots_txt_of_a_redirect_target_passes_the_guard(tmp_path: Path) -> None:
    """Scrapy's robots.txt middleware fetches the robots.txt of every new host, a redirect
    target's too, through the downloader middlewares: the guard judges it like any request.
    The start host's robots.txt redirects to the metadata address (never reached); a page
    redirects to ``localhost`` (a name: the request and its robots.txt pass the middleware,
    and the guard's resolver refuses both, loopback, before any connection)."""
    with TestServer({}) as site:
        site.routes.update(
            {
                "/": html("/to-name"),
                "/robots.txt": Page(
                    status=302, headers={"Location": "http://169.254.169.254/latest/meta-data/"}
                ),
                "/to-name": Page(
                    status=302, headers={"Location": f"http://localhost:{site.port}/page"}
                ),
                "/page": html(title="must never be fetched"),
            }
        )
        env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
        env.update({SPY_LOG_ENV: str(tmp_path / "spy.log"), SPY_ALLOW_ENV: "127.0.0.1,localhost"})
        result = scrapy(
            "crawl", "site", "-a", f"start_url={site.url}/",
            "-s", f"STORE_URL=sqlite:///{tmp_path / 'store.sqlite'}",
            "-s", f"DOWNLOAD_HANDLERS={HANDLERS['http11']}",
            env=env,
        )  # fmt: skip
        hits = site.paths()
    assert result.returncode == 0, result.stderr[-3000:]
    log = (tmp_path / "spy.log").read_text()
    assert f"localhost\thttp://localhost:{site.port}/robots.txt" in log  # asked for, and
    assert hits.count("/robots.txt") == 1  # only the start host's reached the server
    assert "/page" not in hits
    assert set(spy_hosts(tmp_path / "spy.log")) == {"127.0.0.1", "localhost"}
    assert "SSRF guard refused http://169.254.169.254/latest/meta-data/ (metadata)" in (
        result.stderr
    )
