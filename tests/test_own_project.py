"""The frontier in a Scrapy project of one's own, as the README tells a user to set it up.

The built wheel installed in a virtualenv outside the checkout (:mod:`tests.installed_wheel`),
``scrapy startproject`` in a temporary directory, a ``CrawlSpider`` with Scrapy's default
``LinkExtractor``, and the README's ``ADDONS = {...}`` line (plus a lower delay and a higher
per-domain concurrency than the template's: a local test site). The site has URL variants
(tracking parameters, fragments, dot segments, scheme-relative links), redirects, broken
links, canonical hints and a link off the site. What is asserted is what the server saw and
what the store holds.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
import redis

from bloom_frontier.pipelines.reader import StoreReader
from tests.httpserver import Page, TestServer, html, redirect
from tests.sitegen import LinkGraph
from tests.user_project import adopt

if TYPE_CHECKING:
    from tests.installed_wheel import Installed

pytest_plugins = ["tests.installed_wheel"]
PAGES = 40
#: Pages ``/p/<i>`` with ``i`` a multiple of this carry a ``rel=canonical`` to themselves.
CANONICAL_EVERY = 4


def make_project(installed: Installed, tmp: Path) -> Path:
    """``scrapy startproject myproject`` with the user's spider and the README's one line."""
    created = installed.run(installed.scrapy, "startproject", "myproject", cwd=tmp)
    assert created.returncode == 0, created.stdout + created.stderr
    adopt(tmp / "myproject", "mysite")
    return tmp / "myproject"


def site(port: int) -> dict[str, object]:
    """Routes of the messy site on ``127.0.0.1:port``: :class:`LinkGraph` pages (each
    linked plainly and with a tracking parameter, ``/moved/<i>`` redirects, ``/missing/<i>``
    404s), a root page of spelling variants, a redirect chain, canonical hints."""
    graph = LinkGraph(PAGES)

    def page(path: str) -> Page | None:
        found = graph.page(path)
        number = path.partition("?")[0].removeprefix("/p/")
        if found is not None and number.isdigit() and int(number) % CANONICAL_EVERY == 0:
            canonical = f'<link rel="canonical" href="/p/{number}">'
            found = Page(found.body.replace("<head>", f"<head>{canonical}", 1))
        return found

    return {
        "/": html(
            "/p/0",
            "/p/0?utm_source=newsletter&utm_medium=email",
            "/p/1#section-2",
            "/./p/2",
            f"//127.0.0.1:{port}/p/3",
            f"HTTP://127.0.0.1:{port}/p/4",
            "http://other.example/offsite",
            "/chain/1",
            "/",
        ),
        "/chain/1": redirect("/chain/2", 301),
        "/chain/2": redirect("/p/7?utm_campaign=chain", 302),
        "/*": page,
    }


def document(path: str) -> str:
    """The document a request path stands for: without tracking parameters."""
    parts = urlsplit(path)
    query = [(k, v) for k, v in parse_qsl(parts.query) if not k.startswith("utm_")]
    return parts.path + (f"?{urlencode(query)}" if query else "")


def fetches(server: TestServer) -> Counter[str]:
    return Counter(document(path) for path in server.paths() if path != "/robots.txt")


def run(installed: Installed, project: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    """``scrapy ARGS`` of the installed wheel, started in ``project``."""
    return installed.popen(
        installed.scrapy,
        *args,
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[str, str]:
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == 0, stderr[-4000:]
    assert "Traceback" not in stderr, stderr[-4000:]
    return stdout, stderr


def check_crawl(server: TestServer, store_url: str, logs: list[str]) -> float:
    """Every document fetched once, chains and hints in the store, offsite links counted;
    returns the duplicate fetch ratio."""
    hits = fetches(server)
    assert {f"/p/{i}" for i in range(PAGES)} <= set(hits)
    assert "other.example" not in "".join(hits)
    ratio = sum(hits.values()) / len(hits)
    assert ratio <= 1.02, hits.most_common(5)
    offsite = [int(n) for log in logs for n in re.findall(r"links off the site:\s+(\d+)", log)]
    assert sum(offsite) >= 1, logs[0][-3000:]
    store = StoreReader.from_url(store_url)
    try:
        chains = {urlsplit(chain.start_url).path: chain for chain in store.chains()}
        hints = list(store.hints())
    finally:
        store.close()
    assert [urlsplit(hop.target_url).path for hop in chains["/chain/1"].hops] == [
        "/chain/2",
        "/p/7",
    ]
    assert chains["/moved/0"].hops[0].status == 301
    hinted = {urlsplit(hint["page_url"]).path for hint in hints if hint["valid"]}
    assert {f"/p/{i}" for i in range(0, PAGES, CANONICAL_EVERY)} <= hinted
    return ratio


@pytest.fixture
def project(installed: Installed, tmp_path: Path) -> Path:
    return make_project(installed, tmp_path)


def test_a_startproject_project_with_the_addons_line(
    installed: Installed, project: Path, tmp_path: Path
) -> None:
    store_url = f"sqlite:///{tmp_path / 'records.sqlite'}"
    server = TestServer({})
    server.routes.update(site(server.port))
    with server:
        _, log = finish(
            run(
                installed,
                project,
                *("crawl", "mysite", "-s", f"STORE_URL={store_url}"),
                SITE_URL=server.url,
            )
        )
        ratio = check_crawl(server, store_url, [log])
    print(f"duplicate fetch ratio (embedded): {ratio:.3f}")
    assert fetches(server)["/"] == 1  # the start URL, though Scrapy marks it dont_filter
    assert "offsite/filtered" in log
    # A command of the frontier, in the user's project.
    stdout, _ = finish(
        run(installed, project, "redirects", "--format", "jsonl", "-s", f"STORE_URL={store_url}")
    )
    rows = [json.loads(line) for line in stdout.splitlines()]
    assert any(urlsplit(row["source"]).path == "/chain/1" for row in rows), stdout[:2000]


def test_the_same_project_shared_by_two_workers(
    installed: Installed, project: Path, redis_url: str, pg_url: str
) -> None:
    """Two workers share the frontier in Redis and, as the README says workers should, one
    PostgreSQL record store."""
    store_url = pg_url
    server = TestServer({}, delay=0.01)
    server.routes.update(site(server.port))
    command = ["crawl", "mysite", "-s", f"STORE_URL={store_url}", "-s", f"REDIS_URL={redis_url}"]
    with server:
        workers = [run(installed, project, *command, SITE_URL=server.url) for _ in range(2)]
        logs = [finish(worker)[1] for worker in workers]
        ratio = check_crawl(server, store_url, logs)
    print(f"duplicate fetch ratio (2 workers): {ratio:.3f}")
    assert fetches(server)["/"] == 1  # the start URL, though both workers start from it
    with redis.Redis.from_url(redis_url) as client:
        assert client.exists("{mysite}:seen")  # the crawl went through the shared frontier
        stored = b"".join(client.dump(key) or b"" for key in client.scan_iter(match="{mysite}:*"))
    assert b"other.example" not in stored  # offsite links were never queued nor failed
