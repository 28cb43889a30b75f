"""One table of defaults: components read their settings without a fallback of their own,
every setting they read is in ``crawler/defaults.py`` (or is Scrapy's), and the environment
is read when Scrapy builds the settings, not when a module is imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
import scrapy.settings.default_settings as scrapy_defaults
from scrapy.addons import AddonManager
from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings

import bloom_frontier.defaults as defaults
import bloom_frontier.settings as project_settings

ROOT = Path(__file__).resolve().parent.parent
COMPONENT_DIRS = ("crawler", "middlewares", "pipelines")
#: Methods of Scrapy's settings objects that read one setting by name.
GETTERS = {
    "get",
    "getbool",
    "getint",
    "getfloat",
    "getlist",
    "getdict",
    "getdictorlist",
    "getwithbase",
}


def settings_reads() -> Iterator[tuple[str, str, ast.Call | ast.Subscript]]:
    """(file:line, setting name, node) of every read of a named setting in the components:
    ``<...>settings.get*("NAME", ...)`` and ``<...>settings["NAME"]``."""
    for folder in COMPONENT_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    receiver, name = node.func.value, node.args[0] if node.args else None
                    if node.func.attr not in GETTERS:
                        continue
                elif isinstance(node, ast.Subscript):
                    receiver, name = node.value, node.slice
                else:
                    continue
                named = (isinstance(receiver, ast.Name) and receiver.id == "settings") or (
                    isinstance(receiver, ast.Attribute) and receiver.attr == "settings"
                )
                if named and isinstance(name, ast.Constant) and isinstance(name.value, str):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    yield where, name.value, node


def test_the_scan_sees_the_components_settings() -> None:
    """The scan below finds what it looks for (so that an empty result means something)."""
    names = {name for _, name, _ in settings_reads()}
    assert {"FRONTIER_LEASE_TTL", "STORE_BATCH_SIZE", "SSRF_ALLOWED_SCHEMES"} <= names


def test_no_component_reads_a_setting_with_a_fallback_of_its_own() -> None:
    """A fallback literal beside the defaults table is a second source of truth: the table's
    value reaches every crawl through the add-on, so a component reads the setting bare."""
    fallbacks = [
        f"{where}: {ast.unparse(node)}"
        for where, _, node in settings_reads()
        if isinstance(node, ast.Call) and (len(node.args) > 1 or node.keywords)
    ]
    assert fallbacks == []


def test_every_setting_a_component_reads_has_its_default_in_the_table() -> None:
    table = {name for name in dir(defaults) if name.isupper()}
    scrapys = {name for name in dir(scrapy_defaults) if name.isupper()}
    missing = sorted(
        f"{where}: {name}"
        for where, name, _ in settings_reads()
        if name not in table and name not in scrapys
    )
    assert missing == []


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The deployment knobs unset (the test sets the ones it needs)."""
    for name in (*defaults.environment_settings, *project_settings.Environment.names):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SCRAPY_SETTINGS_MODULE", "bloom_frontier.settings")
    return monkeypatch


def process_settings(**command_line: object) -> Settings:
    """The settings ``scrapy crawl`` starts its crawler process with (its ``-s`` options
    at their priority), built now."""
    settings = get_project_settings()
    settings.setdict(command_line, priority="cmdline")
    AddonManager.load_pre_crawler_settings(settings)
    return settings


def test_environment_set_after_import_reaches_the_settings(
    environment: pytest.MonkeyPatch,
) -> None:
    """docker-compose.yml's knobs (README, crawler/defaults.py), set after every module of
    the project was imported."""
    unset = process_settings()
    assert (unset["REDIS_URL"], unset["STORE_URL"]) == (None, None)
    assert unset.getint("CONCURRENT_REQUESTS") == project_settings.CONCURRENT_REQUESTS
    assert unset["LOG_LEVEL"] == "INFO"
    environment.setenv("REDIS_URL", "redis://redis:6379/0")
    environment.setenv("STORE_URL", "postgresql://postgres@postgres/crawler")
    environment.setenv("SSRF_ALLOWED_HOSTS", "intranet.example,,10.0.0.7")
    environment.setenv("SHORTENER_HOSTS", "sho.rt")
    environment.setenv("CONCURRENT_REQUESTS", "48")
    environment.setenv("LOG_LEVEL", "DEBUG")
    settings = process_settings()
    assert settings["REDIS_URL"] == "redis://redis:6379/0"
    assert settings["STORE_URL"] == "postgresql://postgres@postgres/crawler"
    assert settings.getlist("SSRF_ALLOWED_HOSTS") == ["intranet.example", "10.0.0.7"]
    assert settings.getlist("SHORTENER_HOSTS") == ["sho.rt"]
    assert settings.getint("CONCURRENT_REQUESTS") == 48
    assert settings["LOG_LEVEL"] == "DEBUG"


def test_the_command_line_wins_over_the_environment(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("REDIS_URL", "redis://redis:6379/0")
    environment.setenv("CONCURRENT_REQUESTS", "48")
    settings = process_settings(REDIS_URL="redis://other:6379/1", CONCURRENT_REQUESTS=4)
    assert settings["REDIS_URL"] == "redis://other:6379/1"
    assert settings.getint("CONCURRENT_REQUESTS") == 4


def test_a_projects_own_setting_wins_over_an_environment_default(
    environment: pytest.MonkeyPatch,
) -> None:
    """``REDIS_URL`` and the others are defaults of the add-on: a project that sets one in
    its settings keeps it, whatever the environment says."""
    environment.setenv("REDIS_URL", "redis://redis:6379/0")
    settings = Settings({"REDIS_URL": "redis://mine:6379/0"})
    assert defaults.with_defaults(settings)["REDIS_URL"] == "redis://mine:6379/0"
    assert defaults.with_defaults(Settings())["REDIS_URL"] == "redis://redis:6379/0"


def test_download_size_limits_suit_html_crawls_and_a_projects_own_win(
    environment: pytest.MonkeyPatch,
) -> None:
    """Scrapy's 1 GiB DOWNLOAD_MAXSIZE let a 1.1 MB gzip response inflate to 1.17 GB: the
    add-on's defaults are HTML-sized, below the project's own and the command line's."""
    settings = process_settings()
    AddonManager(crawler_stub(settings)).load_settings(settings)
    assert settings.getint("DOWNLOAD_MAXSIZE") == defaults.DOWNLOAD_MAXSIZE == 32 * 1024 * 1024
    assert settings.getint("DOWNLOAD_WARNSIZE") == defaults.DOWNLOAD_WARNSIZE == 8 * 1024 * 1024
    assert defaults.DOWNLOAD_MAXSIZE < scrapy_defaults.DOWNLOAD_MAXSIZE
    assert settings.getint("PAGE_MAX_LINKS") == defaults.PAGE_MAX_LINKS
    own = Settings({"DOWNLOAD_MAXSIZE": 1024})
    assert defaults.with_defaults(own).getint("DOWNLOAD_MAXSIZE") == 1024
    given = process_settings(DOWNLOAD_MAXSIZE=0)
    AddonManager(crawler_stub(given)).load_settings(given)
    assert given.getint("DOWNLOAD_MAXSIZE") == 0


def crawler_stub(settings: Settings) -> object:
    """What :class:`AddonManager` needs of a crawler to install the add-ons of ``settings``."""
    return type("Crawler", (), {"settings": settings})()
