"""Scrapy settings of this project: its own choices, and the add-on that installs the frontier.

Every bloom-frontier setting has its default, and what it does, in ``crawler/defaults.py``;
the add-on (``crawler/addon.py``) installs them together with the frontier's components, so
anything set here or with ``-s NAME=VALUE`` wins. Setting ``REDIS_URL`` (here, in the
environment or with ``-s``) switches the crawl from the embedded frontier (in-process Bloom
filter, Scrapy's own scheduler) to the shared Redis frontier; nothing else about the spider
changes.
"""

from __future__ import annotations

import os

BOT_NAME = "bloom_frontier"
SPIDER_MODULES = ["bloom_frontier.spiders"]
NEWSPIDER_MODULE = "bloom_frontier.spiders"

# The whole frontier: dupefilter, scheduler, middlewares, extensions, defaults. The frontier's
# new components register in crawler/addon.py and new settings in crawler/defaults.py, not
# here: that is what users' own projects get with this one line.
ADDONS = {"bloom_frontier.Addon": 0}

# --- Politeness --------------------------------------------------------------------------
ROBOTSTXT_OBEY = True
USER_AGENT = "bloom-frontier/0.1 (+https://github.com/bloom-frontier/bloom-frontier)"
# Parallel downloads per worker (env: CONCURRENT_REQUESTS, e.g. from docker-compose.yml).
CONCURRENT_REQUESTS = int(os.environ.get("CONCURRENT_REQUESTS") or 16)
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
LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO")

TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
FEED_EXPORT_ENCODING = "utf-8"
