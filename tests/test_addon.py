"""The add-on: one ``ADDONS`` line installs the whole frontier, with defaults a project's own
settings override, and refuses settings that would defeat it."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from scrapy import Spider
from scrapy.addons import AddonManager
from scrapy.exceptions import UsageError
from scrapy.settings import Settings
from scrapy.utils.misc import load_object
from scrapy.utils.test import get_crawler

import bloom_frontier.commands
import bloom_frontier.defaults as defaults
from bloom_frontier.addon import DOWNLOADER_MIDDLEWARES, EXTENSIONS, SPIDER_MIDDLEWARES
from bloom_frontier.entry_points import LazyCommand

ROOT = Path(__file__).resolve().parent.parent
ADDONS = {"bloom_frontier.Addon": 0}
#: A shared crawl of a closed port (nothing listens at either address).
CLOSED_PORT_CRAWL = [
    sys.executable,
    "-m",
    "scrapy.cmdline",
    "crawl",
    "site",
    "-a",
    "start_url=http://127.0.0.1:1/",
    "-s",
    "REDIS_URL=redis://127.0.0.1:1/0",
]
DEFAULT_NAMES = sorted(name for name in dir(defaults) if name.isupper())


class UserSpider(Spider):
    name = "user"


def settings_of(**settings: object):
    return get_crawler(UserSpider, {"ADDONS": ADDONS, **settings}).settings


def enabled(settings, name: str) -> dict[type, int | None]:
    return {load_object(path): order for path, order in settings.getdict(name).items()}


def test_the_addons_line_installs_every_component_and_default() -> None:
    settings = settings_of()
    assert settings["DUPEFILTER_CLASS"] == "bloom_frontier.dupefilter.BloomDupeFilter"
    assert settings["SCHEDULER"] == "scrapy.core.scheduler.Scheduler"
    assert settings["SCHEDULER_DISK_QUEUE"].startswith("bloom_frontier.frontier.diskqueue.Json")
    for name, table in [
        ("SPIDER_MIDDLEWARES", SPIDER_MIDDLEWARES),
        ("DOWNLOADER_MIDDLEWARES", DOWNLOADER_MIDDLEWARES),
        ("EXTENSIONS", EXTENSIONS),
    ]:
        components = enabled(settings, name)
        for path, order in table.items():
            assert components[load_object(path)] == order, path
    downloader = enabled(settings, "DOWNLOADER_MIDDLEWARES")
    redirect = "scrapy.downloadermiddlewares.redirect"
    assert downloader[load_object(f"{redirect}.RedirectMiddleware")] is None
    assert downloader[load_object(f"{redirect}.MetaRefreshMiddleware")] is None
    for name in DEFAULT_NAMES:
        assert settings.getpriority(name) == 15, name  # "addon"
        assert settings[name] == getattr(defaults, name), name
    # What a partial copy of the settings got wrong (issue 8): all defaults are there.
    assert settings.getint("SEEN_FILTER_CAPACITY") == 1_000_000
    assert settings["FRONTIER_KEY_PREFIX"] % {"spider": "x"} == "{x}"
    assert settings.getint("REDIRECT_MAX_HOPS") == 10


def test_the_projects_own_settings_win() -> None:
    settings = settings_of(
        SEEN_FILTER_CAPACITY=5000,
        REDIRECT_MAX_HOPS=3,
        SPIDER_MIDDLEWARES={
            "bloom_frontier.middlewares.canonical_hints.CanonicalHintsMiddleware": None
        },
    )
    assert settings.getint("SEEN_FILTER_CAPACITY") == 5000
    assert settings.getint("REDIRECT_MAX_HOPS") == 3
    hints = load_object("bloom_frontier.middlewares.canonical_hints.CanonicalHintsMiddleware")
    assert enabled(settings, "SPIDER_MIDDLEWARES")[hints] is None


def test_redis_url_installs_the_shared_frontier() -> None:
    settings = settings_of(REDIS_URL="redis://127.0.0.1:6379/0")
    assert settings["SCHEDULER"] == "bloom_frontier.frontier.scheduler.RedisScheduler"
    downloader = enabled(settings, "DOWNLOADER_MIDDLEWARES")
    assert downloader[load_object("bloom_frontier.frontier.scheduler.LeaseMiddleware")] == 1
    assert (
        downloader[load_object("bloom_frontier.middlewares.politeness.GlobalPolitenessMiddleware")]
        == 101
    )


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
        ("DUPEFILTER_CLASS=scrapy.dupefilters.RFPDupeFilter", "DUPEFILTER_CLASS"),
        ("SCHEDULER=scrapy.core.scheduler.Scheduler", "SCHEDULER"),
        (
            'DOWNLOADER_MIDDLEWARES={"scrapy.downloadermiddlewares.redirect.RedirectMiddleware"'
            ": 600}",
            "RedirectMiddleware",
        ),
    ],
)
def test_a_setting_that_defeats_the_frontier_stops_the_crawl(setting: str, named: str) -> None:
    """One clear message naming the conflict, no traceback, nothing fetched (the start URL
    is a closed port: a crawl that started would log a connection error)."""
    result = subprocess.run(
        [*CLOSED_PORT_CRAWL, "-s", setting],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    messages = [line for line in result.stderr.splitlines() if "bloom-frontier cannot" in line]
    assert len(messages) == 1, result.stderr[-3000:]
    assert named in messages[0]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "Spider opened" not in result.stderr


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
