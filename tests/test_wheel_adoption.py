"""The built wheel, used as a user uses it: installed in a virtualenv of its own outside the
checkout (:mod:`tests.installed_wheel`), run from a ``scrapy startproject crawler`` project
with its own root-level ``pipelines.py`` and ``middlewares.py``, with no ``PYTHONPATH`` and
nothing of the checkout on ``sys.path``.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import tomllib
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

from tests.httpserver import TestServer, html, redirect
from tests.user_project import adopt

if TYPE_CHECKING:
    from tests.installed_wheel import Installed

#: The session's installed wheel, the fixture ``installed`` (imported by pytest, so that its
#: assertions are rewritten).
pytest_plugins = ["tests.installed_wheel"]
ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"

#: The user's own components, at the project's root, named as the issue's users named theirs.
USER_PIPELINES = '''
import json


class MarkerPipeline:
    """Appends each item to items.jsonl in the project directory."""

    def open_spider(self, spider):
        self.file = open("items.jsonl", "a", encoding="utf-8")

    def close_spider(self, spider):
        self.file.close()

    def process_item(self, item, spider):
        self.file.write(json.dumps(dict(item)) + "\\n")
        return item
'''
USER_MIDDLEWARES = '''
class CountingDownloaderMiddleware:
    """Appends each response's URL to responses.txt and counts it in the stats."""

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.stats)

    def __init__(self, stats):
        self.stats = stats

    def process_response(self, request, response, spider):
        self.stats.inc_value("mine/responses")
        with open("responses.txt", "a", encoding="utf-8") as file:
            file.write(response.url + "\\n")
        return response
'''
#: Appended to the template's settings.py: the user's components, enabled.
USER_SETTINGS = """
ITEM_PIPELINES = {"pipelines.MarkerPipeline": 300}
DOWNLOADER_MIDDLEWARES = {"middlewares.CountingDownloaderMiddleware": 543}
"""
PAGES = 12
#: The site's pages, by path: each links to others plainly, with a tracking parameter and
#: with a fragment; the home page links to one through a redirect.
PAGES_BY_PATH = {
    "/": html("/p/0", "/p/0?utm_source=mail", "/old", "/"),
    **{
        f"/p/{n}": html(
            "/", f"/p/{(n + 1) % PAGES}", f"/p/{(n + 5) % PAGES}?utm_campaign=x", f"/p/{n}#top"
        )
        for n in range(PAGES)
    },
}
SITE = {
    "/old": redirect("/p/1", 301),
    # Any query string names the same page (the server ignores it, as sites do utm_*).
    "/*": lambda path: PAGES_BY_PATH.get(path.partition("?")[0]),
}
DOCUMENTS = {"/", "/old", *(f"/p/{n}" for n in range(PAGES))}


def source_files() -> dict[str, Path]:
    """Every file the wheel must hold, by its path in the wheel: each file under the folders
    that ``[tool.setuptools.package-dir]`` maps, modules and data alike."""
    mapping = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-dir"]
    files = {}
    for package, folder in mapping.items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                relative = path.relative_to(ROOT / folder).as_posix()
                files[f"{package.replace('.', '/')}/{relative}"] = path
    return files


def test_the_wheel_holds_one_import_package_with_every_file(installed: Installed) -> None:
    """Exactly the files of the package's folders, under ``bloom_frontier/``: a module or a
    data file (Lua script, JSON, host list, migration) that is not packaged fails here."""
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        (dist_info,) = {name.split("/")[0] for name in names if ".dist-info/" in name}
        top_level = wheel.read(f"{dist_info}/top_level.txt").decode().split()
        record = {line.split(",")[0] for line in wheel.read(f"{dist_info}/RECORD").decode().split()}
    assert top_level == ["bloom_frontier"]
    assert record == names
    packaged = {name for name in names if not name.startswith(f"{dist_info}/")}
    expected = source_files()
    assert sorted(set(expected) - packaged) == []  # in the checkout, not in the wheel
    assert sorted(packaged - set(expected)) == []  # in the wheel, not in the checkout
    for name in ("bloom_frontier/pipelines/migrations/script.py.mako",):
        assert name in packaged
    assert any(name.endswith(".lua") for name in packaged)
    assert any(name.startswith("bloom_frontier/pipelines/migrations/versions/") for name in names)


PROBE = """
import importlib.metadata, importlib.util, json, sys
import bloom_frontier
files = importlib.metadata.files("bloom-frontier")
print(json.dumps({
    "found": {name: importlib.util.find_spec(name) is not None for name in sys.argv[1:]},
    "package": bloom_frontier.__file__,
    "missing": [str(f) for f in files if not f.locate().exists()],
    "addon": bloom_frontier.Addon.__module__,
    "path": sys.path,
}))
"""


def test_installed_it_adds_only_bloom_frontier(installed: Installed, tmp_path: Path) -> None:
    result = installed.run(
        installed.python, "-c", PROBE, "crawler", "middlewares", "pipelines", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout)
    assert probe["found"] == {"crawler": False, "middlewares": False, "pipelines": False}
    assert probe["package"].startswith(str(installed.venv))
    assert probe["missing"] == []
    assert probe["addon"] == "bloom_frontier.addon"
    assert not [entry for entry in probe["path"] if entry.startswith(str(ROOT))]


def make_project(installed: Installed, where: Path) -> Path:
    """``scrapy startproject crawler`` with the user's spider, root-level pipelines.py and
    middlewares.py enabled in settings.py, and the README's ADDONS line."""
    created = installed.run(installed.scrapy, "startproject", "crawler", cwd=where)
    assert created.returncode == 0, created.stdout + created.stderr
    project = where / "crawler"
    (project / "pipelines.py").write_text(USER_PIPELINES, encoding="utf-8")
    (project / "middlewares.py").write_text(USER_MIDDLEWARES, encoding="utf-8")
    adopt(project, "mine", extra=USER_SETTINGS)
    return project


@dataclass(frozen=True)
class Crawl:
    project: Path
    result: subprocess.CompletedProcess[str]
    fetched: Counter[str]
    site_url: str


@pytest.fixture(scope="module")
def crawl(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    """``scrapy crawl mine`` in the user's project, embedded (the store: crawl.sqlite in the
    project directory), of a local site."""
    project = make_project(installed, tmp_path_factory.mktemp("user"))
    with TestServer(SITE) as site:
        result = installed.run(installed.scrapy, "crawl", "mine", cwd=project, SITE_URL=site.url)
        fetched = Counter(path for path in site.paths() if path != "/robots.txt")
    return Crawl(project, result, fetched, site.url)


def test_the_users_project_crawls_each_page_once(crawl: Crawl) -> None:
    assert crawl.result.returncode == 0, crawl.result.stderr[-4000:]
    assert "Traceback" not in crawl.result.stderr, crawl.result.stderr[-4000:]
    documents = Counter(path.partition("?")[0] for path in crawl.fetched.elements())
    assert set(documents) == DOCUMENTS
    assert max(documents.values()) == 1, documents.most_common(3)


def test_the_users_pipeline_and_middleware_ran(crawl: Crawl) -> None:
    assert crawl.result.returncode == 0, crawl.result.stderr[-4000:]
    items = [json.loads(line) for line in (crawl.project / "items.jsonl").read_text().splitlines()]
    # One item per page the rule followed (CrawlSpider parses the start page for links only).
    scraped = Counter(path_of(item["url"]) for item in items)
    assert scraped == Counter(f"/p/{n}" for n in range(PAGES))
    # Every response reached the user's middleware, robots.txt's too; the redirect's is
    # followed below it (as Scrapy's RedirectMiddleware, order 600, does).
    responses = (crawl.project / "responses.txt").read_text().split()
    downloads = Counter(path for path in crawl.fetched.elements() if path != "/old")
    assert Counter(path_of(url, query=True) for url in responses) == downloads + Counter(
        ["/robots.txt"]
    )


def path_of(url: str, query: bool = False) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if query and parts.query else parts.path


def stored(store: Path, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(store) as connection:
        return connection.execute(query).fetchall()


def test_the_record_store_is_in_the_project_with_the_pages(crawl: Crawl) -> None:
    assert crawl.result.returncode == 0, crawl.result.stderr[-4000:]
    store = crawl.project / "crawl.sqlite"
    assert store.is_file()
    pages = Counter(path_of(url) for (url,) in stored(store, "SELECT final_url FROM pages"))
    assert pages == Counter(DOCUMENTS - {"/old"})


def package_commands(installed: Installed, cwd: Path) -> list[str]:
    """The ``scrapy`` commands the installed distribution declares."""
    probe = (
        "import importlib.metadata as m; print(' '.join(e.name for e in"
        " m.distribution('bloom-frontier').entry_points if e.group == 'scrapy.commands'))"
    )
    result = installed.run(installed.python, "-c", probe, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_the_packages_commands_run_in_the_users_project(installed: Installed, crawl: Crawl) -> None:
    commands = package_commands(installed, crawl.project)
    assert {"redirects", "frontier", "canonicals", "seed", "canon"} <= set(commands)
    listed = installed.run(installed.scrapy, "-h", cwd=crawl.project)
    assert listed.returncode == 0, listed.stderr
    for command in commands:
        assert re.search(rf"^  {re.escape(command)} ", listed.stdout, re.MULTILINE), command
        helped = installed.run(installed.scrapy, command, "--help", cwd=crawl.project)
        assert helped.returncode == 0, f"scrapy {command} --help: {helped.stderr[-2000:]}"
        assert "Traceback" not in helped.stderr, helped.stderr
    redirects = installed.run(installed.scrapy, "redirects", "--format", "jsonl", cwd=crawl.project)
    assert redirects.returncode == 0, redirects.stderr[-3000:]
    rows = [json.loads(line) for line in redirects.stdout.splitlines()]
    assert [(row["source"], row["target"]) for row in rows] == [
        (f"{crawl.site_url}/old", f"{crawl.site_url}/p/1")
    ]


#: Brings a store down to the schema of the release before migrations, with the installed
#: package's Alembic scripts: the baseline's tables, its rows kept, no ``alembic_version``.
DOWNGRADE = """
import sys
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

config = Config()
config.set_main_option("script_location", "bloom_frontier.pipelines:migrations")
print(ScriptDirectory.from_config(config).dir)
print(ScriptDirectory.from_config(config).get_current_head())
engine = sa.create_engine(sys.argv[1])
with engine.begin() as connection:
    config.attributes["connection"] = connection
    command.downgrade(config, "0001_baseline")
    connection.exec_driver_sql("DROP TABLE alembic_version")
"""


def test_a_store_from_before_migrations_upgrades_with_the_installed_scripts(
    installed: Installed, crawl: Crawl, tmp_path: Path
) -> None:
    assert crawl.result.returncode == 0, crawl.result.stderr[-4000:]
    old = crawl.project / "old.sqlite"
    shutil.copy(crawl.project / "crawl.sqlite", old)
    downgraded = installed.run(
        installed.python, "-c", DOWNGRADE, f"sqlite:///{old}", cwd=old.parent
    )
    assert downgraded.returncode == 0, downgraded.stderr[-3000:]
    scripts, head = downgraded.stdout.split()
    assert scripts.startswith(str(installed.venv))  # not the checkout's
    tables = {name for (name,) in stored(old, "SELECT name FROM sqlite_master")}
    assert "alembic_version" not in tables and "pages" in tables
    pages = stored(old, "SELECT fetch_url FROM pages ORDER BY fetch_url")

    # What the user does next: a command of the package opens the old store.
    redirects = installed.run(
        installed.scrapy, "redirects", "-s", f"STORE_URL=sqlite:///{old}", cwd=crawl.project
    )
    assert redirects.returncode == 0, redirects.stderr[-3000:]
    assert f"{crawl.site_url}/old" in redirects.stdout
    assert stored(old, "SELECT version_num FROM alembic_version") == [(head,)]
    assert stored(old, "SELECT fetch_url FROM pages ORDER BY fetch_url") == pages


def test_the_users_project_shares_its_frontier_in_redis(
    installed: Installed, tmp_path: Path, redis_url: str
) -> None:
    """With REDIS_URL the installed package runs its Lua scripts (package data) in Redis:
    the crawl fetches each page once, and ``scrapy frontier`` reads the finished crawl."""
    project = make_project(installed, tmp_path)
    shared = ("-s", f"REDIS_URL={redis_url}")
    with TestServer(SITE) as site:
        result = installed.run(
            installed.scrapy, "crawl", "mine", *shared, cwd=project, SITE_URL=site.url
        )
        fetched = Counter(path for path in site.paths() if path != "/robots.txt")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    documents = Counter(path.partition("?")[0] for path in fetched.elements())
    assert documents == Counter(DOCUMENTS)
    status = installed.run(
        installed.scrapy, "frontier", "mine", "--json", *shared, cwd=project, SITE_URL=site.url
    )
    assert status.returncode == 0, status.stderr[-3000:]
    reading = json.loads(status.stdout.splitlines()[0])
    assert (reading["queued"], reading["leased"], reading["seen_keys"]) == (0, 0, len(DOCUMENTS))
