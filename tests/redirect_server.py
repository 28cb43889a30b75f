"""A local site of redirects and rel=canonical hints, and a download handler that proves what
the crawler tried to connect to.

:func:`redirect_site` returns :class:`tests.httpserver.TestServer` routes: chains of every
redirect status with relative and absolute ``Location``, loops (plain, self, through a
tracking-parameter variant), an endless spiral, redirects to private and metadata addresses
in several spellings (which must never be connected to), a name that resolves to loopback,
soft-404 redirects, refreshes, and pages with valid, cross-site, homepage, paginated,
conflicting and ``Link``-header canonicals.

:class:`SpyDownloadHandler` sits where Scrapy opens connections: it appends every host it is
asked to reach to the file named by ``$SPY_LOG`` and refuses (without any socket) anything that
is not this machine's loopback, so even a broken guard cannot send a packet elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.http import Response
from twisted.internet.error import ConnectionRefusedError

from bloom_frontier.pipelines.reader import StoredChain, StoreReader
from tests.httpserver import Page, Route, TestServer, html, redirect

#: Hosts the spy lets through to the real handler.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})
SPY_LOG_ENV = "SPY_LOG"

#: Redirects to addresses the crawler must refuse: path -> Location.
PRIVATE_REDIRECTS = {
    "/out/metadata": (302, "http://169.254.169.254/latest/meta-data/"),
    "/out/ten": (307, "http://10.0.0.1/admin/"),
    "/out/decimal": (302, "http://2852039166/latest/meta-data/"),
    "/out/hex": (301, "http://0xA9.0xFE.0xA9.0xFE/latest/"),
    "/out/mapped": (308, "http://[::ffff:a9fe:a9fe]/latest/"),
    "/out/ula": (302, "http://[fd00::1]/internal"),
    "/out/two": (301, "/out/two/next"),
    "/out/two/next": (302, "http://169.254.169.254/latest/meta-data/iam/"),
}
#: Redirect chains that end on a page: path -> (status, Location).
CHAINS = {
    "/r/301": (301, "/final/301"),
    "/r/302": (302, "{origin}/final/302"),
    "/r/303": (303, "../final/303"),
    "/r/307": (307, "final-307"),
    "/r/308": (308, "//127.0.0.1:{port}/final/308"),
    "/chain/1": (301, "/chain/2"),
    "/chain/2": (302, "/chain/3?utm_source=chain"),
    "/chain/3": (307, "/final/chain"),
    "/same": (301, "/same?utm_source=self"),
    "/to-linked": (301, "/linked"),
    "/moved-home": (301, "/"),
    "/members": (302, "/login?next=/members"),
    "/bad-location": (302, "javascript:alert(1)"),
    "/dead-end": (302, "http://127.0.0.1:1/gone"),  # loopback port 1: connection refused
    "/to-custom": (301, "/custom?sid=2"),  # the same page as /custom?sid=1 if sid is stripped
    "/out/dns": (302, "http://localhost:{port}/secret"),
}
LOOPS = {
    "/loop/a": (302, "/loop/b"),
    "/loop/b": (302, "/loop/a"),
    "/loop/self": (301, "/loop/self"),
    "/loop/variant/b": (302, "/loop/variant/a?utm_source=loop"),
    "/loop/variant/a": (302, "/loop/variant/b"),
}
SPIRAL = "/spiral/"


def _canonical_page(*hrefs: str, base: str = "", body_link: str = "") -> Page:
    head = "".join(f'<link rel="canonical" href="{href}">' for href in hrefs)
    if base:
        head += f'<base href="{base}">'
    body = f'<link rel="canonical" href="{body_link}">' if body_link else ""
    return Page(f"<html><head>{head}</head><body>{body}<p>canonical test</p></body></html>")


def redirect_site(port: int) -> dict[str, Route]:
    """The routes of the test site served on ``127.0.0.1:port``."""
    origin = f"http://127.0.0.1:{port}"

    def fill(location: str) -> str:
        return location.format(origin=origin, port=port)

    routes: dict[str, Route] = {}
    for path, (status, location) in {**CHAINS, **LOOPS, **PRIVATE_REDIRECTS}.items():
        routes[path] = redirect(fill(location), status)
    # The server matches paths with their query: the tracking variants answer like the path.
    routes["/chain/3?utm_source=chain"] = routes["/chain/3"]
    routes["/loop/variant/a?utm_source=loop"] = routes["/loop/variant/a"]
    for path in ("/final/301", "/final/302", "/final/303", "/r/final-307", "/final/308"):
        routes[path] = html(title=path)
    routes.update(
        {
            "/final/chain": html(),
            "/same?utm_source=self": html(title="same"),
            "/linked": html(),
            "/custom?sid=1": html(),
            "/custom?sid=2": html(),
            "/login?next=/members": html(title="login"),
            "/final/refresh": html(),
            "/final/meta": html(),
            "/secret": html(title="must never be fetched"),
            "/refresh-header": Page("<html></html>", headers={"Refresh": "0; url=/final/refresh"}),
            "/meta-refresh": html(head='<meta http-equiv="refresh" content="0; url=/final/meta">'),
            "/canon/self": _canonical_page("/canon/self"),
            "/canon/equivalent": _canonical_page("/canon/equivalent?utm_source=feed"),
            "/canon/relative": _canonical_page("target", base="/canon/base/"),
            "/canon/base/target": html(),
            "/canon/cross": _canonical_page("https://example.org/canon/cross"),
            "/canon/home": _canonical_page(f"{origin}/"),
            "/canon/conflict": _canonical_page("/canon/self", "/canon/relative"),
            "/canon/file": _canonical_page("file:///usr/share/doc/python3/index.html"),
            "/canon/page?page=2": _canonical_page("/canon/page"),
            "/canon/page": html(),
            "/canon/body": _canonical_page(body_link="/canon/self"),
            "/canon/header": Page(
                "<html><head></head><body></body></html>",
                headers={"Link": f'<{origin}/canon/header-target>; rel="canonical"'},
            ),
            "/canon/header-target": html(),
        }
    )
    starts = [
        *(path for path in CHAINS if path not in {"/chain/2", "/chain/3"}),
        "/loop/a",
        "/loop/self",
        "/loop/variant/b",
        f"{SPIRAL}1",
        *(path for path in PRIVATE_REDIRECTS if path != "/out/two/next"),
        "/linked",
        "/custom?sid=1",
        "/refresh-header",
        "/meta-refresh",
        *(path for path in routes if path.startswith("/canon/") and "target" not in path),
    ]
    routes["/"] = html(*dict.fromkeys(starts))

    def spiral(path: str) -> Page | None:
        if path.startswith(SPIRAL):
            return redirect(f"{path}/x", 302)
        return None

    routes["/*"] = spiral
    return routes


class SpyDownloadHandler(HTTP11DownloadHandler):
    """Scrapy's HTTP handler behind a log of every host asked for; non-loopback hosts are
    refused here, before any socket exists."""

    async def download_request(self, request: Request) -> Response:
        host = urlsplit(request.url).hostname or ""
        with open(os.environ[SPY_LOG_ENV], "a", encoding="utf-8") as log:
            log.write(f"{host}\t{request.url}\n")
        if host not in LOOPBACK_HOSTS:
            raise ConnectionRefusedError(f"test spy: {host} is not loopback")
        return await super().download_request(request)


def spy_hosts(path: Path) -> list[str]:
    """The hosts the spy was asked to reach, in order."""
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as log:
        return [line.split("\t", 1)[0] for line in log if line.strip()]


ROOT = Path(__file__).resolve().parent.parent
SCRAPY = [sys.executable, "-m", "scrapy.cmdline"]
SPY_HANDLERS = json.dumps(
    {scheme: f"{__name__}.SpyDownloadHandler" for scheme in ("http", "https")}
)


def scrapy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``scrapy ARGS`` in the project, as a user would."""
    return subprocess.run(
        [*SCRAPY, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def crawl_site(
    start_url: str,
    store_url: str,
    spy_log: Path,
    *options: str,
    redis_url: str | None = None,
    clean_log: bool = True,
    handlers: str = SPY_HANDLERS,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``scrapy crawl site`` from ``start_url`` into ``store_url``, with every connection
    attempt logged by :class:`SpyDownloadHandler` (or the spies ``handlers`` names, e.g.
    :data:`tests.handler_spies.HANDLERS`), ``extra_env`` added to its environment; the crawl
    must succeed (and, with ``clean_log``, log no traceback through the project's code)."""
    env = {key: value for key, value in os.environ.items() if key not in {"REDIS_URL", "STORE_URL"}}
    env[SPY_LOG_ENV] = str(spy_log)
    env.update(extra_env or {})
    if redis_url:
        env["REDIS_URL"] = redis_url
    result = scrapy(
        "crawl", "site", "-a", f"start_url={start_url}",
        "-s", f"STORE_URL={store_url}",
        "-s", f"DOWNLOAD_HANDLERS={handlers}",
        *options,
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    if clean_log:  # download errors are logged with tracebacks; none may come from our code
        ours = [f'File "{ROOT / package}' for package in ("crawler", "middlewares", "pipelines")]
        assert not any(frame in result.stderr for frame in ours), result.stderr[-4000:]
    return result


def command_rows(name: str, store_url: str, *args: str) -> list[dict[str, Any]]:
    """The JSON lines ``scrapy NAME`` prints for the store."""
    result = scrapy(name, "-s", f"STORE_URL={store_url}", *args)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


@dataclass
class Crawl:
    """A finished crawl of the redirect site: the server's hits and the store's records."""

    server: TestServer
    store_url: str
    spy_log: Path
    chains: dict[str, StoredChain]  # by start path
    pages: dict[str, dict]  # by fetch path
    hits: Counter[str]

    def path(self, url: str | None) -> str | None:
        prefix = self.server.url
        return url[len(prefix) :] if url and url.startswith(prefix) else url


def run_crawl(
    tmp: Path,
    *options: str,
    redis_url: str | None = None,
    store_url: str | None = None,
    clean_log: bool = True,
) -> Crawl:
    """Crawl :func:`redirect_site` into ``store_url`` (default: a SQLite file under ``tmp``);
    what the server and the store saw."""
    server = TestServer({})
    server.routes.update(redirect_site(server.port))
    store_url = store_url or f"sqlite:///{tmp / 'store.sqlite'}"
    with server:
        crawl_site(
            f"{server.url}/",
            store_url,
            tmp / "spy.log",
            *options,
            redis_url=redis_url,
            clean_log=clean_log,
        )
    store = StoreReader.from_url(store_url)
    crawl = Crawl(server, store_url, tmp / "spy.log", {}, {}, Counter(server.paths()))
    crawl.chains = {crawl.path(c.start_url): c for c in store.chains()}  # type: ignore[misc]
    crawl.pages = {crawl.path(p["fetch_url"]): p for p in store.pages()}  # type: ignore[misc]
    store.close()
    return crawl
