"""``scrapy crawl SPIDER``: Scrapy's own command, after checking what the crawl needs.

An entry point (``bloom_frontier.entry_points.Crawl``), so a user's project that adds the add-on
gets these checks too; a project without the add-on gets Scrapy's command unchanged.

A crawl that cannot work (unknown spider, Redis down or refusing the password, a
``REDIS_URL`` or ``STORE_URL`` that is not one, a proxy the SSRF guard cannot vouch for, a
``JOBDIR`` another crawl or a ``rebuild-filter`` is using)
stops before the engine starts, with one line saying what is wrong and what to do
(:mod:`bloom_frontier.commands._failures`), instead of a traceback from inside the running engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.crawler import AsyncCrawlerProcess, CrawlerProcess
from scrapy.spiderloader import get_spider_loader
from scrapy.utils.job import job_dir
from scrapy.utils.misc import load_object

from bloom_frontier.addon import BloomFrontierAddon
from bloom_frontier.commands._failures import fails_cleanly
from bloom_frontier.compat import asyncio_reactor_path
from bloom_frontier.pipelines.database import make_engine, store_url_from
from bloom_frontier.pipelines.schema import upgrade_schema
from bloom_frontier.redis_client import command_client, require_bloom
from bloom_frontier.seen.joblock import JobdirLock
from bloom_frontier.ssrf import check_proxy_setup

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import BaseSettings, Settings


def check_crawl_setup(settings: BaseSettings, spider_name: str) -> None:
    """Raise the error a user can fix if the crawl of ``spider_name`` cannot work; each
    server is given the command timeouts, so this takes seconds when one does not answer.
    ``settings`` are the project's: the add-on's are applied to a copy first (its
    :class:`~bloom_frontier.addon.FrontierConflict` when a setting defeats the frontier)."""
    get_spider_loader(settings).load(spider_name)
    settings = settings.copy()
    BloomFrontierAddon.claim(settings)
    check_proxy_setup(settings)
    if settings.get("REDIS_URL"):
        client = command_client(settings["REDIS_URL"])
        prefix = settings["FRONTIER_KEY_PREFIX"] % {"spider": spider_name}
        try:
            require_bloom(client, f"{prefix}:bloom-probe")
        finally:
            client.close()
    elif jobdir := job_dir(settings):
        with JobdirLock(jobdir) as lock:  # taken for good by the crawl's frontier
            lock.acquire("scrapy crawl")
    engine = make_engine(store_url_from(settings))
    try:
        upgrade_schema(engine)  # here, not at the crawl's first write on the loop
    finally:
        engine.dispose()


def uses_addon(settings: BaseSettings) -> bool:
    """The project crawls through the bloom-frontier add-on (``ADDONS``); any other project
    that has this package installed gets Scrapy's ``crawl`` unchanged."""
    for addon, priority in settings.getdict("ADDONS").items():
        loaded = addon
        if isinstance(addon, str):
            try:
                loaded = load_object(addon)
            except (ImportError, NameError, ValueError):
                continue  # Scrapy reports it itself when it loads the add-ons
        if (
            priority is not None
            and isinstance(loaded, type)
            and issubclass(loaded, BloomFrontierAddon)
        ):
            return True
    return False


def crawler_process(settings: Settings) -> CrawlerProcess | AsyncCrawlerProcess:
    """The process ``scrapy.cmdline`` would make for a crawl, made after the checks (making
    it configures logging and logs Scrapy's banner, which a one-line error should not
    follow)."""
    asyncio_reactor = settings["TWISTED_REACTOR"] == asyncio_reactor_path()
    if (asyncio_reactor and not settings.getbool("FORCE_CRAWLER_PROCESS")) or not settings.getbool(
        "TWISTED_REACTOR_ENABLED"
    ):
        return AsyncCrawlerProcess(settings)
    return CrawlerProcess(settings)


class Command(ScrapyCrawlCommand):
    requires_crawler_process = False  # made in run(), after the checks

    @fails_cleanly
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if len(args) == 1 and uses_addon(self.settings):
            check_crawl_setup(self.settings, args[0])
        self.crawler_process = crawler_process(self.settings)
        super().run(args, opts)
