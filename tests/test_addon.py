"""The add-on as a user meets it: a plain ``scrapy startproject`` project, run with the built
wheel installed outside the checkout (:mod:`tests.installed_wheel`), whose settings add only
the ``ADDONS`` line crawls a local site with each page fetched once and its redirects
recorded; the project's own settings win over the add-on's defaults and components; a
setting that would defeat the frontier stops the crawl with one clear line."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
import redis
from scrapy.addons import AddonManager
from scrapy.exceptions import UsageError
from scrapy.settings import Settings

import bloom_frontier.commands
from bloom_frontier.entry_points import LazyCommand
from tests.httpserver import TestServer, html, redirect
from tests.user_project import adopt

if TYPE_CHECKING:
    from tests.installed_wheel import Installed

pytest_plugins = ["tests.installed_wheel"]
ADDONS = {"bloom_frontier.Addon": 0}
#: A scheduler and a dupefilter of the project's own (not enabled unless a test says so).
OWN_COMPONENTS = """
from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import RFPDupeFilter


class OwnScheduler(BaseScheduler):
    def has_pending_requests(self):
        return False

    def enqueue_request(self, request):
        return True

    def next_request(self):
        return None


class OwnDupeFilter(RFPDupeFilter):
    pass
"""
PAGES = 8
#: Pages linked plainly, with a tracking parameter and a fragment; a two-hop redirect chain
#: to a page nothing else links to; every page hints itself as canonical.
PAGES_BY_PATH = {
    "/": html("/p/0", "/p/0?utm_source=mail", "/chain/1", "/"),
    "/end": html("/"),
    **{
        f"/p/{n}": html(
            "/", f"/p/{(n + 1) % PAGES}", f"/p/{(n + 3) % PAGES}?utm_campaign=x", f"/p/{n}#top",
            head=f'<link rel="canonical" href="/p/{n}">',
        )
        for n in range(PAGES)
    },
}  # fmt: skip
SITE = {
    "/chain/1": redirect("/chain/2", 301),
    "/chain/2": redirect("/end", 301),
    # A query string names the page without it (the server ignores utm_*, as sites do).
    "/*": lambda path: PAGES_BY_PATH.get(path.partition("?")[0]),
}
DOCUMENTS = {"/", "/end", "/chain/1", "/chain/2", *(f"/p/{n}" for n in range(PAGES))}


@dataclass(frozen=True)
class Project:
    """A user's project and the installed wheel its commands run with."""

    path: Path
    installed: Installed


@pytest.fixture(scope="module")
def project(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """``scrapy startproject plain``, its spider (and a module of components for the
    conflict tests), and the README's ADDONS line: no other setting."""
    where = tmp_path_factory.mktemp("project")
    created = installed.run(installed.scrapy, "startproject", "plain", cwd=where)
    assert created.returncode == 0, created.stdout + created.stderr
    project = where / "plain"
    (project / "plain" / "own.py").write_text(OWN_COMPONENTS, encoding="utf-8")
    adopt(project, "user", fast=False)
    return Project(project, installed)


def scrapy(
    project: Project, *args: str, settings: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``scrapy ARGS`` in ``project``, with ``settings`` (lines of Python) appended to its
    settings.py for this run only."""
    settings_file = project.path / "plain" / "settings.py"
    original = settings_file.read_text(encoding="utf-8")
    settings_file.write_text(original + settings, encoding="utf-8")
    try:
        installed = project.installed
        return installed.run(installed.scrapy, *args, cwd=project.path, timeout=180, **(env or {}))
    finally:
        settings_file.write_text(original, encoding="utf-8")


def crawl(
    project: Project, store: Path, settings: str = "", *args: str
) -> tuple[subprocess.CompletedProcess[str], Counter[str]]:
    """``scrapy crawl user`` of :data:`SITE` into the SQLite file ``store``; the result and
    the server's count of requests by path (query included), robots.txt aside. The
    template's one-second delay is lowered for the test's speed (``-s``)."""
    with TestServer(SITE) as site:
        result = scrapy(
            project, "crawl", "user", "-s", "DOWNLOAD_DELAY=0", "-s",
            "CONCURRENT_REQUESTS_PER_DOMAIN=8", "-s", f"STORE_URL=sqlite:///{store}", *args,
            settings=settings, env={"SITE_URL": site.url},
        )  # fmt: skip
        fetched = Counter(path for path in site.paths() if path != "/robots.txt")
    return result, fetched


def succeeded(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]


def path_of(url: object) -> str:
    return urlsplit(str(url)).path


def documents(fetched: Counter[str]) -> Counter[str]:
    return Counter(path.partition("?")[0] for path in fetched.elements())


def records(project: Project, store: Path, command: str) -> list[dict[str, object]]:
    """The rows ``scrapy COMMAND --format jsonl`` reads from ``store``."""
    result = scrapy(project, command, "--format", "jsonl", "-s", f"STORE_URL=sqlite:///{store}")
    succeeded(result)
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_the_addons_line_alone_fetches_each_page_once_and_records_redirects(
    project: Project, tmp_path: Path
) -> None:
    store = tmp_path / "records.sqlite"
    result, fetched = crawl(project, store)
    succeeded(result)
    assert documents(fetched) == Counter(DOCUMENTS)  # the start URL too, though dont_filter
    rows = records(project, store, "redirects")
    assert {path_of(row["source"]): path_of(row["target"]) for row in rows} == {
        "/chain/1": "/end",
        "/chain/2": "/end",
    }
    hints = records(project, store, "canonicals")
    assert {path_of(hint["page"]) for hint in hints if hint["valid"]} == {
        f"/p/{n}" for n in range(PAGES)
    }
    assert "links filtered as seen" in result.stderr  # the add-on's summary


def test_the_projects_own_setting_wins_over_the_addons_default(
    project: Project, tmp_path: Path
) -> None:
    """REDIRECT_MAX_HOPS (add-on default 10) set to 1 in settings.py: the chain's first hop
    is recorded, its target not fetched."""
    store = tmp_path / "records.sqlite"
    result, fetched = crawl(project, store, "\nREDIRECT_MAX_HOPS = 1\n")
    succeeded(result)
    assert documents(fetched) == Counter(DOCUMENTS - {"/chain/2", "/end"})
    (chain,) = records(project, store, "redirects")
    assert (path_of(chain["source"]), chain["outcome"]) == ("/chain/1", "too-many-hops"), chain


def test_the_addons_components_do_not_override_the_projects(
    project: Project, tmp_path: Path
) -> None:
    """The project switches one of the add-on's middlewares off in its own SPIDER_MIDDLEWARES:
    it stays off (no canonical hint recorded), and the rest of the add-on still works."""
    store = tmp_path / "records.sqlite"
    off = (
        "\nSPIDER_MIDDLEWARES = {"
        '"bloom_frontier.middlewares.canonical_hints.CanonicalHintsMiddleware": None}\n'
    )
    result, fetched = crawl(project, store, off)
    succeeded(result)
    assert documents(fetched) == Counter(DOCUMENTS)
    assert records(project, store, "canonicals") == []
    assert len(records(project, store, "redirects")) == 2


def test_redis_url_shares_the_frontier_in_redis(
    project: Project, tmp_path: Path, redis_url: str
) -> None:
    result, fetched = crawl(
        project, tmp_path / "records.sqlite", "", "-s", f"REDIS_URL={redis_url}"
    )
    succeeded(result)
    assert documents(fetched) == Counter(DOCUMENTS)
    with redis.Redis.from_url(redis_url) as client:
        assert client.exists("{user}:seen")


def test_the_dns_resolver_is_installed_in_the_process_settings() -> None:
    """What every crawler process (``CrawlerProcess``, ``CrawlerRunner``...) does with its
    settings before any crawler exists."""
    on = Settings({"ADDONS": ADDONS})
    AddonManager.load_pre_crawler_settings(on)
    assert on["TWISTED_DNS_RESOLVER"] == "bloom_frontier.ssrf.SSRFGuardResolver"
    assert on.getbool("SSRF_GUARD_ENABLED")
    off = Settings({"ADDONS": ADDONS, "SSRF_GUARD_ENABLED": False})
    AddonManager.load_pre_crawler_settings(off)
    assert off["TWISTED_DNS_RESOLVER"] == "scrapy.resolver.CachingThreadedResolver"


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ('DUPEFILTER_CLASS = "plain.own.OwnDupeFilter"', "DUPEFILTER_CLASS"),
        ('SCHEDULER = "plain.own.OwnScheduler"', "SCHEDULER"),
        (
            "DOWNLOADER_MIDDLEWARES = "
            '{"scrapy.downloadermiddlewares.redirect.RedirectMiddleware": 600}',
            "RedirectMiddleware",
        ),
    ],
)
def test_a_setting_that_defeats_the_frontier_stops_the_crawl(
    project: Project, tmp_path: Path, setting: str, named: str
) -> None:
    """The setting in the project's settings.py: one message naming it, no traceback,
    nothing fetched."""
    result, fetched = crawl(project, tmp_path / "records.sqlite", f"\n{setting}\n")
    assert result.returncode != 0
    messages = [line for line in result.stderr.splitlines() if "bloom-frontier cannot" in line]
    assert len(messages) == 1, result.stderr[-3000:]
    assert named in messages[0]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert fetched == Counter()


def test_entry_points_import_no_command_until_one_is_used() -> None:
    """Scrapy loads every ``scrapy.commands`` entry point on every run: loading ours must not
    import the commands (nor what they import)."""
    probe = (
        "import sys\n"
        "from importlib.metadata import entry_points\n"
        "names = [e.name for e in entry_points(group='scrapy.commands')"
        " if e.value.startswith('bloom_frontier.')]\n"
        "commands = [e.load()() for e in entry_points(group='scrapy.commands')"
        " if e.name in names]\n"
        "print(sorted(names))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('bloom_frontier.commands.', 'redis',"
        " 'sqlalchemy', 'bloom_frontier.pipelines'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    names, imported = result.stdout.splitlines()
    # Every command module of the project (crawler/commands/NAME.py) is an entry point.
    commands = pkgutil.iter_modules(bloom_frontier.commands.__path__)
    assert names == str(sorted(m.name.replace("_", "-") for m in commands if m.name[0] != "_"))
    assert imported == "[]"


def test_a_command_that_cannot_be_imported_says_why() -> None:
    class Broken(LazyCommand):
        target = "bloom_frontier.no_such_module:Command"

    command = Broken()
    assert "No module named 'bloom_frontier.no_such_module'" in command.short_desc()
    with pytest.raises(UsageError, match="unavailable"):
        command.run([], None)


def test_commands_read_the_defaults_table() -> None:
    """``scrapy redirects`` in a project that sets nothing reads STORE_URL's default (here
    the test's environment variable)."""

    class Redirects(LazyCommand):
        target = "bloom_frontier.commands.redirects:Command"

    command = Redirects()
    command.settings = Settings()
    assert command.settings.getint("REDIRECT_MAX_HOPS") == 10
    assert command.settings["FRONTIER_KEY_PREFIX"] == "{%(spider)s}"
