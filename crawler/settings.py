"""Scrapy settings for the crawler, with documented defaults.

Every project-specific setting is listed here with its default; override any of them with
``-s NAME=VALUE`` or the environment variables named below. Setting ``REDIS_URL`` switches
the crawl from the embedded defaults (in-process Bloom filter, Scrapy's own scheduler) to the
shared Redis frontier; nothing else about the spider changes.
"""

from __future__ import annotations

import os

BOT_NAME = "crawler"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"
COMMANDS_MODULE = "crawler.commands"

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

# --- Dedup -------------------------------------------------------------------------------
DUPEFILTER_CLASS = "crawler.dupefilter.BloomDupeFilter"
# Expected number of distinct keys and the false-positive rate the filter keeps. A false
# positive is a page never fetched, so the rate is small; the in-process filter and RedisBloom
# both grow by SEEN_FILTER_EXPANSION when the capacity is reached, keeping the rate.
SEEN_FILTER_CAPACITY = 1_000_000
SEEN_FILTER_ERROR_RATE = 0.001
SEEN_FILTER_EXPANSION = 2
# With REDIS_URL set, the shared RedisBloom filter lives beside the shared frontier, at
# <FRONTIER_KEY_PREFIX>:seen, so every worker of one crawl shares one filter.
# Number of RedisBloom keys the filter is split over (crawler.seen.sharded), by a hash of the
# dedupe key. One Redis value holds at most 512 MiB, about 300M keys at 0.1%: plan one shard
# per 250M keys (docs/scaling.md). On Redis Cluster the shards spread over the masters; use a
# multiple of the number of masters. Fixed for the life of a filter (a change is refused).
# With 1, one atomic script marks a page's links seen and queues them; above 1, three steps
# (stage, mark in the shards, commit) that lose no request if a worker dies between them
# (crawler.frontier.redis).
SEEN_FILTER_SHARDS = 1
# Per-host dedupe-key rules on top of the built-in ones (crawler.canonical.rules, lists in
# crawler.canonical.tracking). Keys: a host (applies to its subdomains too), "host/path" (one
# page) or "*" (every host). Values, all optional:
#   "strip": [names]      extra tracking parameters removed there (case-insensitive)
#   "keep_only": [names]  allowlist: every other parameter removed there
#   "disable": [rules]    rules switched off there: "tracking", "tracking-shaped",
#                         "session", "slashes", "identity", "allowlist", or one rule as
#                         "tracking:utm_source", "tracking-shaped:si", "identity:youtube"
#                         (the names `scrapy canon` prints)
# e.g. {"forum.example.org": {"strip": ["sid"]}, "example.com/search": {"keep_only": ["q"]},
#       "wiki.example.net": {"disable": ["slashes"]}}.
# Any customization changes the keys' version prefix ("r2+<hash>"), so keys made under other
# rules never collide silently with a filter filled under these.
CANON_HOST_RULES: dict[str, dict[str, list[str]]] = {}

# --- Shared frontier ---------------------------------------------------------------------
# redis://[:password@]host:port/db or rediss:// for TLS. Unset: embedded, single-process crawl.
# A Redis Cluster: redis+cluster://host:port (any node; rediss+cluster:// for TLS).
REDIS_URL = os.environ.get("REDIS_URL") or None
# Prefix of the crawl's keys in Redis; %(spider)s is the spider's name. Workers sharing it share
# one crawl: the queue (<prefix>:queue), the seen filter (<prefix>:seen), leases and failures.
# Keep the {braces}: the hash tag puts every key of a crawl on one Redis Cluster slot, which
# the frontier's atomic Lua scripts need. Use another prefix to start a separate crawl.
FRONTIER_KEY_PREFIX = "{%(spider)s}"
# Seconds a worker holds a request it fetches before others may take it over (on the Redis
# server's clock). A live worker extends its leases every third of this, so it only bounds
# how long a killed worker's pages wait; keep it well above DOWNLOAD_TIMEOUT.
FRONTIER_LEASE_TTL = 60.0
# Times a request's lease may expire (its worker killed or stalled on it) before it is recorded
# as failed instead of fetched again: a page that kills every worker must not kill the crawl.
FRONTIER_MAX_EXPIRIES = 5
# Requests one worker leases at a time (a small local buffer in front of the downloader).
FRONTIER_LEASE_BATCH = 16
# Global per-host politeness (crawler.frontier.politeness): with REDIS_URL set, DOWNLOAD_DELAY
# (or a host's DOWNLOAD_SLOTS "delay") is the gap between two requests to one host across ALL
# workers together, and this is how many of a host's requests are leased at once across all
# workers (0: CONCURRENT_REQUESTS_PER_DOMAIN, or the host's DOWNLOAD_SLOTS "concurrency").
# Each worker's own downloader delay is then 0, so the two never add up.
FRONTIER_HOST_CONCURRENCY = 0
# Longest robots.txt Crawl-delay honoured, in seconds (a longer one is capped to this). A host's
# gap is its Crawl-delay when that is longer than DOWNLOAD_DELAY.
FRONTIER_MAX_CRAWL_DELAY = 30.0
# Queue entries one lease looks at for requests of hosts that are ready (not waiting on their
# delay, nor at their concurrency limit). Bounds the work of one lease; a worker finds nothing
# to do only when the first this-many queued requests all belong to waiting hosts.
FRONTIER_POLITENESS_SCAN = 500
# Crawl-wide backoff (middlewares.politeness.HostBackoffMiddleware, both modes): a host that
# answers 429 or 503 with Retry-After (seconds or a date), or twice in a row without one, gets
# no request for that long (without: 2 s, doubled at each further one), from any worker of a
# shared frontier. No pause is longer than this many seconds.
HOST_BACKOFF_MAX = 300.0
# Seconds between a worker's status reports (read by `scrapy frontier SPIDER`).
FRONTIER_STATUS_INTERVAL = 10.0
# Switches to the shared frontier's scheduler (and its lease middleware) when REDIS_URL is set,
# including on the command line (-s REDIS_URL=...).
ADDONS = {"crawler.frontier.addon.RedisFrontierAddon": 0}

# --- Record store ------------------------------------------------------------------------
# SQLAlchemy URL. Unset: a SQLite file in the working directory (crawl.sqlite).
# postgresql://user@host/db (or postgres://) uses the psycopg 3 driver; many workers may share it.
STORE_URL = os.environ.get("STORE_URL") or None
# Records are buffered and written in one transaction every STORE_BATCH_SIZE records, every
# STORE_FLUSH_INTERVAL seconds (checked at the next record) and when the spider closes.
STORE_BATCH_SIZE = 500
STORE_FLUSH_INTERVAL = 5.0

# --- Redirects ---------------------------------------------------------------------------
# Hops per redirect chain: the hop that reaches the cap is recorded, its target not fetched
# (the chain ends as "too-many-hops"). Replaces Scrapy's REDIRECT_MAX_TIMES.
REDIRECT_MAX_HOPS = 10

# --- SSRF guard --------------------------------------------------------------------------
# Refuse requests, redirect hops and DNS answers that reach loopback, private, link-local,
# unique-local, CGNAT, multicast or cloud-metadata addresses, except on the hosts the crawl was
# started on and those listed in SSRF_ALLOWED_HOSTS (names or addresses; env: comma-separated).
SSRF_GUARD_ENABLED = True
SSRF_ALLOWED_HOSTS = [h for h in os.environ.get("SSRF_ALLOWED_HOSTS", "").split(",") if h]
# The resolver half of the guard: refuses private answers before any connection is made.
TWISTED_DNS_RESOLVER = "middlewares.ssrf.SSRFGuardResolver"

# --- Wiring ------------------------------------------------------------------------------
SPIDER_MIDDLEWARES = {
    # Low order = closest to the engine: sees the page's final output and checks all of its
    # links against the seen filter in one batch.
    "middlewares.linkbatch.BatchDedupeMiddleware": 10,
    # High order = closest to the spider: the canonical URL it adds passes Scrapy's depth and
    # referer middlewares and joins the page's link batch.
    "middlewares.canonical_hints.CanonicalHintsMiddleware": 950,
}
DOWNLOADER_MIDDLEWARES = {
    # Before Scrapy's offsite filter (50) and robots.txt (100): a refused host gets no
    # request at all, not even for robots.txt.
    "middlewares.ssrf.SSRFGuardMiddleware": 40,
    # Below RetryMiddleware (550): sees only failures retries gave up on.
    "middlewares.redirects.ChainFailureMiddleware": 60,
    # Replaces Scrapy's two redirect middlewares; after decompression (590) for meta refresh.
    "scrapy.downloadermiddlewares.redirect.RedirectMiddleware": None,
    "scrapy.downloadermiddlewares.redirect.MetaRefreshMiddleware": None,
    "middlewares.redirects.RedirectChainMiddleware": 580,
    # Above RetryMiddleware (550): sees a 429/503 before it becomes a retry.
    "middlewares.politeness.HostBackoffMiddleware": 560,
}
EXTENSIONS = {
    "crawler.summary.CrawlSummary": 500,
    # Shared frontier only (REDIS_URL): publishes pages/min and leases for `scrapy frontier`.
    "crawler.frontier.status.WorkerStatusReporter": 510,
}

# Scrapy's JOBDIR queues pickle requests by default; ours are JSON.
SCHEDULER_DISK_QUEUE = "crawler.frontier.diskqueue.JsonLifoDiskQueue"
SCHEDULER_START_DISK_QUEUE = "crawler.frontier.diskqueue.JsonFifoDiskQueue"

REQUEST_FINGERPRINTER_IMPLEMENTATION = "2.7"
TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
FEED_EXPORT_ENCODING = "utf-8"
