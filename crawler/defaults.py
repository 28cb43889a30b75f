"""Every bloom-frontier setting with its default and what it does: the defaults table.

:class:`bloom_frontier.addon.BloomFrontierAddon` installs these at Scrapy's ``"addon"`` priority, so
anything a project sets (``settings.py``, ``custom_settings``, ``-s NAME=VALUE``) wins.
Commands that run without a crawler (``scrapy redirects``, ``seed``, ``frontier``...) never
see add-ons; they read this same table through :func:`with_defaults`. The settings of
:data:`environment_settings` take their default from the environment variable of their name,
read by :func:`with_defaults` when Scrapy builds the settings, never at import.

New settings register here: one upper-case name per setting, with a comment saying what it
does, its unit and its default. Scrapy's own settings are not repeated here, except those
whose Scrapy default does not suit a crawl of HTML pages ("Bounded pages": the download size
limits), which the add-on gives another default the same way; the components the add-on
changes (scheduler, dupefilter, disk queues, middlewares, DNS resolver) are set in
:mod:`bloom_frontier.addon`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

# (No TYPE_CHECKING here: every upper-case name of this module is a setting.)
from scrapy.settings import BaseSettings

# --- Dedup -------------------------------------------------------------------------------
# Expected number of distinct keys and the false-positive rate the filter keeps. A false
# positive is a page never fetched, so the rate is small; the in-process filter and RedisBloom
# both grow by SEEN_FILTER_EXPANSION when the capacity is reached, keeping the rate.
SEEN_FILTER_CAPACITY = 1_000_000
SEEN_FILTER_ERROR_RATE = 0.001
SEEN_FILTER_EXPANSION = 2
# With REDIS_URL set, the shared RedisBloom filter lives beside the shared frontier, at
# <FRONTIER_KEY_PREFIX>:seen, so every worker of one crawl shares one filter.
# Number of RedisBloom keys the filter is split over (bloom_frontier.seen.sharded), by a hash of the
# dedupe key. One Redis value holds at most 512 MiB, about 300M keys at 0.1%: plan one shard
# per 250M keys (docs/scaling.md). On Redis Cluster the shards spread over the masters; use a
# multiple of the number of masters. Fixed for the life of a filter (a change is refused).
# With 1, one atomic script marks a page's links seen and queues them; above 1, three steps
# (stage, mark in the shards, commit) that lose no request if a worker dies between them
# (bloom_frontier.frontier.redis).
SEEN_FILTER_SHARDS = 1
# Per-host dedupe-key rules on top of the built-in ones (bloom_frontier.canonical.rules, lists in
# bloom_frontier.canonical.tracking). Keys: a host (applies to its subdomains too), "host/path" (one
# page), "host/path/*" (every page under /path/) or "*" (every host). Values, all optional:
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

# --- Content fingerprints and learned parameter rules --------------------------------------
# Every fetched document gets an exact fingerprint of its normalized body (per-request noise
# such as CSRF tokens, nonces and timestamps removed) and a MinHash near-duplicate signature,
# stored with its page record (bloom_frontier.content), computed in a thread off the reactor.
CONTENT_FINGERPRINTS_ENABLED = True
# A document larger than this (bytes of body) gets only an exact hash of its raw bytes, no
# normalized fingerprint or MinHash (kind from its status, stat content/too_large): the
# normalization's regular expressions hold the interpreter while they run, so a 24 MB page
# would stall the crawl's loop for a second. Raw bytes never merge two different pages.
CONTENT_FINGERPRINT_MAX_BYTES = 2 * 1024 * 1024
# The normalization fingerprints are made under, stored with each: "n2" (visible text and link
# targets, numpy-hashed words: cheaper than "n1", docs/scaling.md) or "n1" (the whole markup,
# noise removed; for a crawl that must stay comparable with a store written before n2).
# Fingerprints of different normalizations are never compared.
CONTENT_NORMALIZATION = "n2"
# Parameter drop rules proven by content (bloom_frontier.learning): when pages that differ by one
# parameter have equal content CANON_LEARN_MIN_PAIRS times on a host (or a path prefix) and
# never differ, that parameter becomes a drop rule for that scope, recorded with its evidence.
#   "propose": recorded for review (`scrapy audit-rules`, which can --apply it);
#   "apply":   also applied at once, by every worker of the crawl (learned rules live beside
#              the frontier in Redis when shared); "off": nothing learned.
# Error pages, empty pages and soft-404s are never evidence; one counter-example vetoes.
CANON_LEARN = "propose"
CANON_LEARN_MIN_PAIRS = 3
# Fetched pages the learner remembers (with their evidence), per worker: about 1 KiB each.
# Past it, the section of a host (top-level directory) fed least recently is forgotten whole;
# what it had seen can then only veto (its parameters get no rule for that host, nor in that
# section, for the rest of the crawl; other sections still learn), so a bounded memory may
# delay a proposal, never make one (bloom_frontier.learning.evidence).
CANON_LEARN_MEMORY = 200_000
# Least share of the links an applied learned rule merged that are fetched anyway (each URL once)
# to re-check the rule, on paths not yet compared first (a rule learned in this crawl is
# re-checked more while young; a page shape no evidence covered always): different content
# revokes it (logged, recorded with the counter-example) and queues the links it merged again.
CANON_LEARN_RECHECK = 0.02

# --- Shared frontier ---------------------------------------------------------------------
# redis://[:password@]host:port/db or rediss:// for TLS. Unset: embedded, single-process crawl.
# A Redis Cluster: redis+cluster://host:port (any node; rediss+cluster:// for TLS).
# Default: the REDIS_URL environment variable (docker-compose.yml sets it).
REDIS_URL: str | None = None
# Prefix of the crawl's keys in Redis; %(spider)s is the spider's name. Workers sharing it share
# one crawl: the queue (<prefix>:queue), the seen filter (<prefix>:seen), leases and failures.
# Keep the {braces}: the hash tag puts every key of a crawl on one Redis Cluster slot, which
# the frontier's atomic Lua scripts need. Use another prefix to start a separate crawl.
FRONTIER_KEY_PREFIX = "{%(spider)s}"
# Partitions one crawl's queue, leases and politeness state are split into, each under a hash
# tag of its own spread over a Redis Cluster's masters (crawler/frontier/redis/partitions.py):
# past one master's memory, set it to the number of masters (or a multiple). Every request of
# one host stays in one partition. 1: the whole crawl on one slot, as it always was. Fixed for
# the life of a crawl (a worker started with another number refuses to start).
FRONTIER_PARTITIONS = 1
# Seconds a worker holds a request it fetches before others may take it over (on the Redis
# server's clock). A live worker extends its leases every third of this, so it only bounds
# how long a killed worker's pages wait; keep it well above DOWNLOAD_TIMEOUT.
FRONTIER_LEASE_TTL = 60.0
# Times a request's lease may expire (its worker killed or stalled on it) before it is recorded
# as failed instead of fetched again: a page that kills every worker must not kill the crawl.
FRONTIER_MAX_EXPIRIES = 5
# Requests one worker leases at a time (a small local buffer in front of the downloader).
FRONTIER_LEASE_BATCH = 16
# Global per-host politeness (bloom_frontier.frontier.politeness): with REDIS_URL set,
# DOWNLOAD_DELAY
# (or a host's DOWNLOAD_SLOTS "delay") is the gap between two requests to one host across ALL
# workers together, and this is how many of a host's requests are in flight at once across all
# workers (0: CONCURRENT_REQUESTS_PER_DOMAIN, or the host's DOWNLOAD_SLOTS "concurrency"): a
# request counts from its lease until its download ends, not while its page is parsed, as
# Scrapy's own per-domain limit counts downloads.
# Each worker's own downloader delay is then 0, so the two never add up.
FRONTIER_HOST_CONCURRENCY = 0
# Longest robots.txt Crawl-delay honoured, in seconds (a longer one is capped to this). A host's
# gap is its Crawl-delay when that is longer than DOWNLOAD_DELAY.
FRONTIER_MAX_CRAWL_DELAY = 30.0
# Lanes (one per host and priority level) one lease looks at for requests of hosts that are
# ready (not waiting on their delay, nor at their concurrency limit). Bounds the work of one
# lease; a worker finds nothing to do only when the first this-many lanes all belong to
# waiting hosts (a lane taken from goes to the back of its level, so hosts take turns).
FRONTIER_POLITENESS_SCAN = 500
# Crawl-wide backoff (bloom_frontier.middlewares.politeness.HostBackoffMiddleware, both modes): a
# host that
# answers 429 or 503 with Retry-After (seconds or a date), or twice in a row without one, gets
# no request for that long (without: 2 s, doubled at each further one), from any worker of a
# shared frontier. No pause is longer than this many seconds.
HOST_BACKOFF_MAX = 300.0
# Seconds between a worker's status reports (read by `scrapy frontier SPIDER`; its
# "pages/s now" is each worker's rate over its last interval).
FRONTIER_STATUS_INTERVAL = 2.0
# Largest stored request (bytes of JSON). A larger one is refused when queued (counted under
# frontier/unserializable) and, written by someone else, quarantined when leased, so no stored
# message can hold a worker for seconds or gigabytes (bloom_frontier.frontier.decode).
FRONTIER_MAX_REQUEST_BYTES = 1_048_576
# Stored requests that cannot be decoded (or are longer than FRONTIER_MAX_REQUEST_BYTES) go to
# a quarantine with the reason instead of failing a worker: `scrapy frontier SPIDER
# --quarantine` lists them, --requeue-quarantined / --drop-quarantined act on them. At most
# this many records are kept; past it the oldest are dropped (counted).
FRONTIER_QUARANTINE_MAX = 10_000
# A Redis whose maxmemory-policy may evict keys (allkeys-*, volatile-*) loses queued requests,
# leases or seen keys when its memory fills, so a worker (and `seed`) refuses it at start.
# True: crawl anyway (a loss is still noticed: the crawl's identity key goes with the rest).
FRONTIER_ALLOW_EVICTION = False
# Request classes a stored request may name besides Scrapy's own (Request, FormRequest,
# JsonRequest, XmlRpcRequest), as dotted paths. Checked as text before anything is imported.
FRONTIER_REQUEST_CLASSES: list[str] = []

# --- Bounded pages -----------------------------------------------------------------------
# Scrapy's own download size limits, in bytes, with defaults for HTML crawls instead of
# Scrapy's 1 GiB and 32 MiB: a response larger than DOWNLOAD_MAXSIZE is refused (Scrapy
# cancels its download; counted under downloader/exception_type_count), one larger than
# DOWNLOAD_WARNSIZE is logged. Both bound the body after decompression too (Scrapy's
# HttpCompressionMiddleware stops inflating at DOWNLOAD_MAXSIZE): a gzip bomb costs at most
# about twice this much memory, not gigabytes. 0 switches a limit off.
DOWNLOAD_MAXSIZE = 32 * 1024 * 1024
DOWNLOAD_WARNSIZE = 8 * 1024 * 1024
# Links taken from one page: the `site` spider reads at most this many <a>/<area> links of a
# page (in document order) and leaves the rest unread; with any spider, at most this many of
# a page's requests reach its dedup batch. The others are counted under links/over_page_cap
# and logged once per page. Bounds what one page costs in time, memory and queue entries
# (a page of a million links took minutes and gigabytes). 0: no cap.
PAGE_MAX_LINKS = 20_000

# --- Process ------------------------------------------------------------------------------
# When the spider opens, the objects start-up made (modules, classes, settings) are frozen out
# of the garbage collector's full passes and its youngest generation is collected every 10,000
# new objects instead of 700 (bloom_frontier.gcfreeze; what it saves: docs/scaling.md). False
# leaves Python's collector as it was.
GC_FREEZE_ENABLED = True
# Seconds between the ticks of the loop-stall meter (bloom_frontier.loopwatch.LoopStallMeter, an
# extension a project adds to EXTENSIONS to measure a crawl): a stall shorter than this is not seen.
LOOP_STALL_METER_INTERVAL = 0.02

# --- Metrics ------------------------------------------------------------------------------
# Port of this worker's Prometheus endpoint, http://METRICS_ADDRESS:METRICS_PORT/metrics
# (bloom_frontier.metrics; needs the [metrics] extra; every metric: docs/metrics.md). None: no
# endpoint. Workers on one machine need a port each. Default: the METRICS_PORT environment
# variable.
METRICS_PORT: int | None = None
# Address the endpoint listens on: loopback by default; "0.0.0.0" (all interfaces) where
# Prometheus scrapes from another machine or container. Default: the METRICS_ADDRESS
# environment variable, else 127.0.0.1.
METRICS_ADDRESS = "127.0.0.1"
# Seconds the endpoint keeps serving after the spider closed, so that Prometheus scrapes the
# worker's last figures before the process exits (set it above the scrape interval); 0: the
# endpoint closes with the spider.
METRICS_LINGER = 0.0

# --- Record store ------------------------------------------------------------------------
# SQLAlchemy URL. Unset: a SQLite file in the working directory (crawl.sqlite).
# postgresql://user@host/db (or postgres://) uses the psycopg 3 driver; many workers may share it.
# Default: the STORE_URL environment variable.
STORE_URL: str | None = None
# Records are buffered and written in one transaction every STORE_BATCH_SIZE records, every
# STORE_FLUSH_INTERVAL seconds (checked at the next record) and when the spider closes.
STORE_BATCH_SIZE = 500
STORE_FLUSH_INTERVAL = 5.0

# --- Redirects ---------------------------------------------------------------------------
# Hops per redirect chain: the hop that reaches the cap is recorded, its target not fetched
# (the chain ends as "too-many-hops"). Scrapy's REDIRECT_MAX_TIMES, when the project sets it,
# keeps its meaning (redirects followed): the cap is then at most REDIRECT_MAX_TIMES + 1 hops
# (bloom_frontier.middlewares.redirects.hop_cap; Scrapy's RedirectMiddleware is replaced).
REDIRECT_MAX_HOPS = 10

# --- SSRF guard --------------------------------------------------------------------------
# Refuse requests, redirect hops and DNS answers that reach loopback, private, link-local,
# unique-local, CGNAT, multicast or cloud-metadata addresses, except on the hosts the crawl was
# started on (start URLs, allowed_domains) and those listed in SSRF_ALLOWED_HOSTS (names or
# addresses; default: the SSRF_ALLOWED_HOSTS environment variable, comma-separated).
# The resolver half of the guard (bloom_frontier.ssrf.SSRFGuardResolver) is
# process-wide: the
# add-on installs it as TWISTED_DNS_RESOLVER before the crawler process starts.
SSRF_GUARD_ENABLED = True
SSRF_ALLOWED_HOSTS: list[str] = []
# URL schemes that may reach the downloader, whatever the request's origin (link, redirect,
# stored request, canonical hint, seed). Widening it also needs the scheme's download handler
# back in DOWNLOAD_HANDLERS (the add-on switches off file, data, s3 and ftp).
SSRF_ALLOWED_SCHEMES = ["http", "https"]
# The guard cannot see where a proxy connects, so by default a crawl refuses to start with a
# proxy in the environment (http_proxy, https_proxy) and refuses requests with meta["proxy"].
# True allows proxies: the proxy must then enforce egress (no private or metadata addresses).
SSRF_ALLOW_PROXY = False


# --- Shortener links ---------------------------------------------------------------------
# Links to link-shortener hosts (bit.ly, t.co, ...: crawler/shorteners/hosts.txt; youtu.be is
# an identity, not a shortener) are resolved to their target's key with one request that
# follows no redirect (bloom_frontier.middlewares.shorteners): the target is fetched only when it
# is on the
# crawl's hosts and not seen yet.
SHORTENERS_ENABLED = True
# More shortener hosts for this crawl (names; default: the SHORTENER_HOSTS environment
# variable, comma-separated).
SHORTENER_HOSTS: list[str] = []
# Seconds one shortener request may take (no retry): a shortener that is down costs this once.
SHORTENER_TIMEOUT = 5.0
# Seconds between two requests to one shortener host (across all workers when shared): the
# add-on gives each shortener host a download slot with this delay, unless DOWNLOAD_SLOTS has one.
SHORTENER_DELAY = 1.0
# Seconds an answer cached in the record store (shortener_answers) is reused: 30 days.
SHORTENER_CACHE_TTL = 30 * 24 * 3600.0


#: Settings whose default a deployment gives in the environment variable of the same name
#: (docker-compose.yml does), when that is set and not empty; a list is comma-separated.
environment_settings = (
    "REDIS_URL",
    "STORE_URL",
    "SSRF_ALLOWED_HOSTS",
    "SHORTENER_HOSTS",
    "METRICS_PORT",
    "METRICS_ADDRESS",
)


def from_environment(settings: BaseSettings, names: Iterable[str], priority: str) -> None:
    """Set each setting of ``names`` whose environment variable (of the same name) is set
    and not empty, at ``priority``; a setting whose value is a list reads its variable as
    comma-separated names. Read now, so a variable set after import counts."""
    for name in names:
        value = os.environ.get(name)
        if value:
            listed = isinstance(settings.get(name), list)
            settings.set(
                name, [item for item in value.split(",") if item] if listed else value, priority
            )


def with_defaults(settings: BaseSettings, priority: str = "addon") -> BaseSettings:
    """``settings`` with every default of this table (:data:`environment_settings` from the
    environment) set at ``priority``, where nothing of a higher priority (the project's, the
    command line's) set it already; returned for chaining. Frozen settings are copied first."""
    if settings.frozen:
        settings = settings.copy()
    settings.setmodule(sys.modules[__name__], priority=priority)
    from_environment(settings, environment_settings, priority)
    return settings
