"""Every setting of the defaults table (:mod:`bloom_frontier.defaults`) checked once, before a
crawl's engine starts or a command reads them: :data:`RULES` holds what each may be, next to
the table, and :func:`check_settings` refuses the first value that is not, with one line
naming the setting, the value and what is allowed (:class:`InvalidSetting`).

Without it, a bad value fails wherever it is first read: inside the running engine (a
traceback, then Scrapy's ``RuntimeError: Engine slot not assigned``), deep in a command, or
not at all (a negative lease time, a prefix that formats to nothing). A value is judged as
the component reading it reads it (Scrapy's ``getint``, ``getfloat``, ``getbool``,
``getlist``, ``getdict``): ``-s NAME=VALUE`` gives text, ``settings.py`` may give numbers.

A new setting of the table needs its rule here (``tests/test_validation.py`` names the ones
that have none). URLs are judged by their own modules (:func:`bloom_frontier.redis_client.
url_problem`, :func:`bloom_frontier.pipelines.database.url_problem`), whose messages never
quote a password; a URL is shown here with its user and password masked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from redis.crc import REDIS_CLUSTER_HASH_SLOTS
from scrapy.settings import BaseSettings

from bloom_frontier import redis_client
from bloom_frontier.canonical.rules import rules_from_settings
from bloom_frontier.content.constants import NORMALIZATIONS
from bloom_frontier.frontier.redis.partitions import MAX_PARTITIONS
from bloom_frontier.learning.extension import MODES
from bloom_frontier.pipelines import database

if TYPE_CHECKING:
    from collections.abc import Iterable

#: Characters of a value shown in a message (a 900 KB value is not printed whole).
SHOWN = 80
#: Smallest FRONTIER_MAX_REQUEST_BYTES: a request with an ordinary URL must fit.
MIN_REQUEST_BYTES = 1024
_DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_HOST = re.compile(r"[^\s/?#@]+")


class InvalidSetting(ValueError):
    """A setting's value is not one it may have; the message is the line the user reads."""


class Rule(Protocol):
    """What one setting may be."""

    def problem(self, settings: BaseSettings, name: str) -> str | None:
        """What is wrong with the setting ``name`` of ``settings``, worded to follow its
        name (``"must be ..., not 'abc'"``), or None when it is allowed."""
        ...


def shown(value: object) -> str:
    """``value`` as a message quotes it: a URL with its user and password masked, at most
    :data:`SHOWN` characters."""
    if isinstance(value, str) and "://" in value:
        scheme, _, rest = value.partition("://")
        if "@" in rest:
            value = f"{scheme}://***@{rest.rpartition('@')[2]}"
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[: SHOWN - 5]}...{text[-2:]}"


def _port(value: object) -> int:
    """A port number as given (an int, or its digits as text); ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(value)
    return int(value)


def _whole(settings: BaseSettings, name: str) -> int:
    """The setting as ``getint`` reads it, except that a float must be whole (``getint``
    would cut 1.5 to 1)."""
    value = settings.get(name)
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    return settings.getint(name)


@dataclass(frozen=True)
class Checked:
    """A setting read as its component reads it (``read``, e.g. ``BaseSettings.getfloat``),
    then judged (``accepts``); ``allowed`` says what may be, after "must be"."""

    allowed: str
    read: Callable[[BaseSettings, str], Any]
    accepts: Callable[[Any], bool] = lambda _value: True

    def problem(self, settings: BaseSettings, name: str) -> str | None:
        try:
            if self.accepts(self.read(settings, name)):
                return None
        except (ValueError, TypeError):
            pass
        return f"must be {self.allowed}, not {shown(settings.get(name))}"


def integer(minimum: int, maximum: int | None = None, unit: str = "") -> Checked:
    """An integer from ``minimum`` (to ``maximum``)."""
    bounds = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
    return Checked(
        f"an integer {bounds}" + (f" ({unit})" if unit else ""),
        _whole,
        lambda value: value >= minimum and (maximum is None or value <= maximum),
    )


def number(minimum: float, *, above: bool = False, unit: str) -> Checked:
    """A finite number from ``minimum`` (above it, with ``above``)."""
    bounds = f"above {minimum:g}" if above else f"of at least {minimum:g}"
    return Checked(
        f"a number {bounds} ({unit})",
        BaseSettings.getfloat,
        lambda value: math.isfinite(value) and (value > minimum if above else value >= minimum),
    )


def one_of(choices: Iterable[str]) -> Checked:
    """One of ``choices`` (text, as given)."""
    names = tuple(choices)
    return Checked(f"one of {', '.join(map(repr, names))}", BaseSettings.get, names.__contains__)


def names(pattern: re.Pattern[str], what: str, *, at_least_one: bool = False) -> Checked:
    """A list of names each matching ``pattern`` (a list, or comma-separated text)."""

    def accepts(values: list[Any]) -> bool:
        return (bool(values) or not at_least_one) and all(
            isinstance(value, str) and pattern.fullmatch(value) for value in values
        )

    return Checked(
        f"a {'non-empty ' if at_least_one else ''}list of {what}", BaseSettings.getlist, accepts
    )


FLAG = Checked("True or False (or 1 or 0)", BaseSettings.getbool)


class KeyPrefix:
    """``FRONTIER_KEY_PREFIX``: text that ``%(spider)s`` formats into a non-empty prefix."""

    allowed = "text in which only %(spider)s is replaced (e.g. '{%(spider)s}')"

    def problem(self, settings: BaseSettings, name: str) -> str | None:
        value = settings.get(name)
        try:
            if isinstance(value, str) and value % {"spider": "spider"}:
                return None
        except (KeyError, ValueError, TypeError):
            pass
        return f"must be {self.allowed}, not {shown(value)}"


class HostRules:
    """``CANON_HOST_RULES``: what :func:`~bloom_frontier.canonical.rules.rules_from_settings`
    accepts (a dict, or its JSON text)."""

    def problem(self, settings: BaseSettings, name: str) -> str | None:
        try:
            rules_from_settings(settings)
        except (ValueError, TypeError, AttributeError) as error:
            return (
                f"must be a table of per-host rules (crawler/defaults.py says how): {error}; "
                f"not {shown(settings.get(name))}"
            )
        return None


@dataclass(frozen=True)
class URL:
    """An optional URL setting (unset or empty: not used) judged by ``url_problem``."""

    url_problem: Callable[[str], str | None]

    def problem(self, settings: BaseSettings, name: str) -> str | None:
        value = settings.get(name)
        if not value:
            return None
        if not isinstance(value, str):
            return f"must be a URL (text), not {shown(value)}"
        problem = self.url_problem(value)
        return None if problem is None else f"{problem} (given: {shown(value)})"


#: What each setting of the defaults table may be.
RULES: Mapping[str, Rule] = {
    # Dedup
    "SEEN_FILTER_CAPACITY": integer(1, unit="keys"),
    "SEEN_FILTER_ERROR_RATE": Checked(
        "a number above 0 and below 1 (the false-positive rate, e.g. 0.001)",
        BaseSettings.getfloat,
        lambda value: 0 < value < 1,
    ),
    "SEEN_FILTER_EXPANSION": integer(1, unit="growth factor"),
    "SEEN_FILTER_SHARDS": integer(1, REDIS_CLUSTER_HASH_SLOTS),
    "CANON_HOST_RULES": HostRules(),
    # Content fingerprints and learned parameter rules
    "CONTENT_FINGERPRINTS_ENABLED": FLAG,
    "CONTENT_FINGERPRINT_MAX_BYTES": integer(0, unit="bytes"),
    "CONTENT_NORMALIZATION": one_of(NORMALIZATIONS),
    "CANON_LEARN": one_of(MODES),
    "CANON_LEARN_MIN_PAIRS": integer(1, unit="pairs"),
    "CANON_LEARN_MEMORY": integer(1, unit="pages"),
    "CANON_LEARN_RECHECK": Checked(
        "a number from 0 to 1 (the share of merged links fetched anyway)",
        BaseSettings.getfloat,
        lambda value: 0 <= value <= 1,
    ),
    # Shared frontier
    "REDIS_URL": URL(redis_client.url_problem),
    "FRONTIER_KEY_PREFIX": KeyPrefix(),
    "FRONTIER_PARTITIONS": integer(1, MAX_PARTITIONS),
    "FRONTIER_LEASE_TTL": number(0, above=True, unit="seconds"),
    "FRONTIER_MAX_EXPIRIES": integer(1),
    "FRONTIER_LEASE_BATCH": integer(1, unit="requests"),
    "FRONTIER_HOST_CONCURRENCY": integer(0, unit="requests; 0: CONCURRENT_REQUESTS_PER_DOMAIN"),
    "FRONTIER_MAX_CRAWL_DELAY": number(0, unit="seconds"),
    "FRONTIER_POLITENESS_SCAN": integer(1, unit="lanes"),
    "HOST_BACKOFF_MAX": number(0, above=True, unit="seconds"),
    "FRONTIER_STATUS_INTERVAL": number(0, above=True, unit="seconds"),
    "FRONTIER_MAX_REQUEST_BYTES": integer(MIN_REQUEST_BYTES, unit="bytes"),
    "FRONTIER_QUARANTINE_MAX": integer(1, unit="records"),
    "FRONTIER_ALLOW_EVICTION": FLAG,
    "FRONTIER_REQUEST_CLASSES": names(_DOTTED_PATH, "dotted paths (package.module.Class)"),
    # Bounded pages (Scrapy's own DOWNLOAD_* settings: 0 turns a limit off, as in Scrapy)
    "DOWNLOAD_MAXSIZE": integer(0, unit="bytes; 0: no limit"),
    "DOWNLOAD_WARNSIZE": integer(0, unit="bytes; 0: no warning"),
    "PAGE_MAX_LINKS": integer(0, unit="links; 0: no cap"),
    # Process
    "GC_FREEZE_ENABLED": FLAG,
    "LOOP_STALL_METER_INTERVAL": number(0, above=True, unit="seconds"),
    # Metrics
    "METRICS_PORT": Checked(
        "unset, or a port from 1 to 65535",
        BaseSettings.get,
        lambda value: value in (None, "") or 1 <= _port(value) <= 65535,
    ),
    "METRICS_ADDRESS": Checked(
        "an address or host name to listen on (e.g. 127.0.0.1, 0.0.0.0)",
        BaseSettings.get,
        lambda value: isinstance(value, str) and bool(_HOST.fullmatch(value)),
    ),
    "METRICS_LINGER": number(0, unit="seconds"),
    # Record store
    "STORE_URL": URL(database.url_problem),
    "STORE_BATCH_SIZE": integer(1, unit="records"),
    "STORE_FLUSH_INTERVAL": number(0, above=True, unit="seconds"),
    # Redirects
    "REDIRECT_MAX_HOPS": integer(1, unit="hops"),
    # SSRF guard
    "SSRF_GUARD_ENABLED": FLAG,
    "SSRF_ALLOWED_HOSTS": names(_HOST, "host names or addresses"),
    "SSRF_ALLOWED_SCHEMES": names(_SCHEME, "URL schemes (e.g. http, https)", at_least_one=True),
    "SSRF_ALLOW_PROXY": FLAG,
    # Shortener links
    "SHORTENERS_ENABLED": FLAG,
    "SHORTENER_HOSTS": names(_HOST, "host names"),
    "SHORTENER_TIMEOUT": number(0, above=True, unit="seconds"),
    "SHORTENER_DELAY": number(0, unit="seconds"),
    "SHORTENER_CACHE_TTL": number(0, unit="seconds"),
}


def check_settings(settings: BaseSettings) -> None:
    """:class:`InvalidSetting` for the first setting of :data:`RULES` whose value in
    ``settings`` is not allowed (in the defaults table's order). A setting ``settings`` do
    not hold at all (settings made without the table's defaults) is not judged."""
    for name, rule in RULES.items():
        if name in settings and (problem := rule.problem(settings, name)) is not None:
            raise InvalidSetting(f"{name} {problem}")
