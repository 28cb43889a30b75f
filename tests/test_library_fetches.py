"""What Scrapy or a library would fetch on its own, outside the SSRF guard, is off or goes
through the guard: the Public Suffix List of Scrapy's cookie handling, robots.txt of a
redirect target."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.handler_spies import HANDLERS, SPY_ALLOW_ENV
from tests.httpserver import Page, TestServer, html
from tests.redirect_server import crawl_site, spy_hosts


def guarded_crawl(
    start_url: str, tmp_path: Path, extra_env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """A crawl from ``start_url`` whose every connection attempt the http11 spy logs to
    ``tmp_path/spy.log`` (it reaches only the hosts ``extra_env``'s ``SPY_ALLOW`` names)."""
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    spy_log = tmp_path / "spy.log"
    return crawl_site(start_url, store, spy_log, handlers=HANDLERS["http11"], extra_env=extra_env)


def test_cookie_handling_never_fetches_the_public_suffix_list(tmp_path: Path) -> None:
    """A response setting a cookie with a ``Domain`` makes Scrapy's cookie middleware ask
    tldextract whether the domain is a public suffix; tldextract built with its defaults
    fetched the list from publicsuffix.org (and cached it under ``$TLDEXTRACT_CACHE``)."""
    cookie = Page(html("/next").body, headers={"Set-Cookie": "sid=1; Domain=localhost; Path=/"})
    cache = tmp_path / "tldextract-cache"
    with TestServer({"/": cookie, "/next": html()}) as site:
        result = guarded_crawl(
            f"http://localhost:{site.port}/",
            tmp_path,
            {"TLDEXTRACT_CACHE": str(cache), SPY_ALLOW_ENV: "localhost"},
        )
        hits = site.paths()
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
        result = guarded_crawl(f"{site.url}/", tmp_path, {SPY_ALLOW_ENV: "127.0.0.1,localhost"})
        hits = site.paths()
    log = (tmp_path / "spy.log").read_text()
    assert f"localhost\thttp://localhost:{site.port}/robots.txt" in log  # asked for, and
    assert hits.count("/robots.txt") == 1  # only the start host's reached the server
    assert "/page" not in hits
    assert set(spy_hosts(tmp_path / "spy.log")) == {"127.0.0.1", "localhost"}
    assert "SSRF guard refused http://169.254.169.254/latest/meta-data/ (metadata)" in (
        result.stderr
    )
