"""Scrapy settings of this project: its own choices, and the add-on that installs the frontier.

Every bloom-frontier setting has its default, and what it does, in ``crawler/defaults.py``;
the add-on (``crawler/addon.py``) installs them together with the frontier's components, so
anything set here or with ``-s NAME=VALUE`` wins. Setting ``REDIS_URL`` (here, in the
environment or with ``-s``) switches the crawl from the embedded frontier (in-process Bloom
filter, Scrapy's own scheduler) to the shared Redis frontier; nothing else about the spider
changes.
"""

from __future__ import annotations

from scrapy.settings import BaseSettings

from bloom_frontier.defaults import from_environment

BOT_NAME = "bloom_frontier"
SPIDER_MODULES = ["bloom_frontier.spiders"]
NEWSPIDER_MODULE = "bloom_frontier.spiders"

# The whole frontier: dupefilter, scheduler, middlewares, extensions, defaults. The frontier's
# new components register in crawler/addon.py and new settings in crawler/defaults.py, not
# here: that is what users' own projects get with this one line.
ADDONS = {"bloom_frontier.Addon": 0, "bloom_frontier.settings.Environment": 0}


class Environment:
    """Add-on: this project's deployment knobs, ``CONCURRENT_REQUESTS`` and ``LOG_LEVEL``
    (docker-compose.yml passes them), from the environment variables of their names, read
    each time Scrapy builds the settings: a variable set and not empty wins over this module,
    ``-s NAME=VALUE`` over the variable. Before the crawler process exists too, so that
    ``LOG_LEVEL`` reaches Scrapy's logging."""

    names = ("CONCURRENT_REQUESTS", "LOG_LEVEL")

    @classmethod
    def update_pre_crawler_settings(cls, settings: BaseSettings) -> None:
        from_environment(settings, cls.names, "project")

    def update_settings(self, settings: BaseSettings) -> None:
        from_environment(settings, self.names, "project")


# --- Politeness --------------------------------------------------------------------------
ROBOTSTXT_OBEY = True
USER_AGENT = "bloom-frontier/0.1 (+https://github.com/bloom-frontier/bloom-frontier)"
# Parallel downloads per worker (env: CONCURRENT_REQUESTS, e.g. from docker-compose.yml).
CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 16
DOWNLOAD_DELAY = 0
# AutoThrottle adapts the delay to the server's latency. Off by default so that a crawl of
# your own site runs at full speed; turn it on (-s AUTOTHROTTLE_ENABLED=1) for other people's.
AUTOTHROTTLE_ENABLED = False
AUTOTHROTTLE_TARGET_CONCURRENCY = 2.0
DOWNLOAD_TIMEOUT = 30
RETRY_TIMES = 2
# No listening ports on a crawler worker.
TELNETCONSOLE_ENABLED = False
REMOTE_CONTROL_ENABLED = False
# env: LOG_LEVEL, e.g. from docker-compose.yml.
LOG_LEVEL = "INFO"

TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
FEED_EXPORT_ENCODING = "utf-8"
