"""The crawl's active learned rules, shared by its workers, and the ruleset keys are made with.

The learned rules are a map ``scope -> [parameter names]`` (scopes as in
``CANON_HOST_RULES``) with a version number that grows with every change. Embedded crawls keep
them in process; shared crawls in Redis beside the frontier (``<prefix>:learned`` holds the
JSON, ``<prefix>:learned_version`` the number), changed only by a compare-and-set, so every
worker sees one sequence of versions (``publish.lua``). :class:`LiveRules` reads the version
before each batch of keys (a shared crawl's read is refreshed off the loop about once a
second) and rebuilds its ruleset when it moved. That read may be a second old, so a shared
frontier's admission scripts check the version the batch was keyed under against the crawl's
own, atomically with marking its keys: a batch keyed under an older version changes nothing,
is keyed again under the rules reloaded and sent again
(:mod:`bloom_frontier.frontier.redis.admission`).
A worker therefore never admits, nor drops as a duplicate, a link keyed with stale rules.

Keys keep the key prefix of the crawl's seen filter (its keyer's, set by the frontier: the
version of ``CANON_HOST_RULES``, or the version a ``scrapy rebuild-filter`` with learned rules
recorded, :mod:`bloom_frontier.seen.layers`) while learned rules change under it: a learned rule
only drops a parameter proven to change nothing, so a key it does not touch stays the same
and a key it touches becomes the key of the page proven equal; a new prefix (mid-crawl, or
for a worker that joins after rules were learned) would make every URL seen so far look
new. The full version (``r2+<hash>`` including the learned rules) is recorded with each
learned rule; ``scrapy rebuild-filter`` builds a filter under it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet, rules_from_settings
from bloom_frontier.pipelines.records import APPLIED, REVOKED, ParamRule

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from bloom_frontier.background import BackgroundThread
    from bloom_frontier.redis_client import Client

logger = logging.getLogger(__name__)

#: Learned rules: scope -> sorted parameter names dropped there.
Learned = dict[str, list[str]]


class RuleState(Protocol):
    """Where a crawl's learned rules live."""

    def version(self) -> int:
        """The current version (0: nothing learned yet)."""
        ...

    def load(self) -> tuple[int, Learned]:
        """The current version and rules, read together."""
        ...

    def publish(self, expected: int, rules: Learned) -> bool:
        """Replace the rules if the version is still ``expected`` (then it grows by one);
        False if another worker changed them first (load and try again)."""
        ...


class MemoryRuleState:
    """:class:`RuleState` of an embedded crawl."""

    def __init__(self) -> None:
        self._version = 0
        self._rules: Learned = {}

    def version(self) -> int:
        return self._version

    def load(self) -> tuple[int, Learned]:
        return self._version, {scope: list(names) for scope, names in self._rules.items()}

    def publish(self, expected: int, rules: Learned) -> bool:
        if expected != self._version:
            return False
        self._rules = normalized(rules)
        self._version += 1
        return True


class RedisRuleState:
    """:class:`RuleState` of a shared crawl: two keys under the frontier's prefix (one hash
    tag, so ``publish.lua`` may touch both on Redis Cluster)."""

    #: Seconds a version read serves in a crawl before the next one, read off the loop.
    VERSION_READ_EVERY = 1.0

    def __init__(
        self, client: Client, prefix: str, background: BackgroundThread | None = None
    ) -> None:
        self.client = client
        self.rules_key = f"{prefix}:learned"
        self.version_key = f"{prefix}:learned_version"
        self._publish = client.register_script((Path(__file__).parent / "publish.lua").read_text())
        #: The frontier's thread for Redis calls in a crawl (None: read in the caller's
        #: thread, each time): :meth:`version` is asked once per page batch, on the loop.
        self.background = background
        self._version: int | None = None
        self._read_at = 0.0
        self._reading = False

    def version(self) -> int:
        if self.background is None or self._version is None:
            self._version = parse_version(self.client.get(self.version_key))
            self._read_at = time.monotonic()
        elif not self._reading and time.monotonic() - self._read_at >= self.VERSION_READ_EVERY:
            self._reading = True
            reading = self.background.run(self.client.get, self.version_key)
            reading.addCallbacks(self._read, self._not_read)
        return self._version

    def _read(self, version: bytes | str | None) -> None:
        self._version, self._read_at, self._reading = (
            parse_version(version),
            time.monotonic(),
            False,
        )

    def _not_read(self, _: object) -> None:
        self._reading = False  # Redis away: the last version serves, asked again later

    def load(self) -> tuple[int, Learned]:
        raw_version, text = self.client.mget([self.version_key, self.rules_key])
        version = parse_version(raw_version)
        self._version, self._read_at = version, time.monotonic()
        return version, parse_rules(text)

    def publish(self, expected: int, rules: Learned) -> bool:
        text = json.dumps(normalized(rules), sort_keys=True)
        keys = [self.version_key, self.rules_key]
        published = bool(self._publish(keys=keys, args=[expected, text]))
        if published:
            self._version = expected + 1
        return published


def parse_version(raw: bytes | str | None) -> int:
    """A stored version: missing, or not a decimal of at most 15 digits (someone wrote over
    it), reads as 0, as ``rules_stale`` in ``crawler/frontier/redis/lua/common.lua`` reads
    it, so the workers and the admission scripts agree on it.

    >>> parse_version(b"12"), parse_version(None), parse_version("x1")
    (12, 0, 0)
    """
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw or ""
    return int(text) if len(text) <= 15 and text.isascii() and text.isdecimal() else 0


def parse_rules(text: bytes | str | None) -> Learned:
    """Stored learned rules; what is not a JSON map of scopes to lists of names (someone
    wrote over it) reads as no rules, logged: keys then merge less, never more.

    >>> parse_rules('{"e.org": ["ref"]}'), parse_rules(None), parse_rules("[1]")
    ({'e.org': ['ref']}, {}, {})
    """
    try:
        rules = json.loads(text) if text else {}
    except ValueError:
        rules = None
    if isinstance(rules, dict) and all(
        isinstance(names, list) and all(isinstance(name, str) for name in names)
        for names in rules.values()
    ):
        return rules
    logger.warning("The crawl's learned rules in Redis are not a rules map; keying without them")
    return {}


def normalized(rules: Mapping[str, list[str]]) -> Learned:
    """Rules with sorted, distinct, lower-case names and no empty scope."""
    return {
        scope: sorted({name.lower() for name in names})
        for scope, names in sorted(rules.items())
        if names
    }


def learned_in_force(rules: Iterable[ParamRule], shared: Mapping[str, list[str]]) -> Learned:
    """The learned rules a crawl keys with now: applied in the store (``rules``) or in the
    crawl's shared state (``shared``, where ``CANON_LEARN="apply"`` puts them first), less
    any the store records as revoked.

    >>> learned_in_force([ParamRule("e.org", "ref", "revoked", ())], {"e.org": ["ref", "src"]})
    {'e.org': ['src']}
    """
    rules = list(rules)
    revoked = {(rule.scope, rule.param) for rule in rules if rule.state == REVOKED}
    learned: Learned = {}
    for scope, names in [*applied_rules(rules).items(), *shared.items()]:
        kept = [name for name in names if (scope, name.lower()) not in revoked]
        learned.setdefault(scope, []).extend(kept)
    return normalized(learned)


def applied_rules(rules: Iterable[ParamRule]) -> Learned:
    """The learned rules in force among ``rules`` (state ``applied``)."""
    learned: Learned = {}
    for rule in rules:
        if rule.state == APPLIED:
            learned.setdefault(rule.scope, []).append(rule.param)
    return normalized(learned)


def combined_host_rules(
    user: Mapping[str, Mapping[str, list[str]]], learned: Mapping[str, list[str]]
) -> dict[str, dict[str, list[str]]]:
    """``CANON_HOST_RULES`` with the learned drop rules added as ``strip`` names."""
    result = {scope: dict(spec) for scope, spec in user.items()}
    for scope, names in learned.items():
        spec = result.setdefault(scope, {})
        spec["strip"] = sorted({*spec.get("strip", ()), *names})
    return result


class LiveRules:
    """The ruleset of a crawl whose learned rules may change while it runs.

    :meth:`current` costs one version read (a Redis ``GET`` when shared) and rebuilds the
    ruleset only when the version moved. Keys keep ``key_version`` as their prefix (the seen
    filter's, set before the first :meth:`reload`; unset, the version of the first rules
    loaded, see the module docstring); :attr:`full_version` is the version the rules would
    have as a crawl's starting rules.
    """

    def __init__(
        self, settings: BaseSettings, state: RuleState, on_change: Callable[[], None] | None = None
    ) -> None:
        self.user_rules = settings.getdict("CANON_HOST_RULES")
        self.base = rules_from_settings(settings)
        self.state = state
        self.on_change = on_change
        self.version = -1
        self.learned: Learned = {}
        self.full_version = self.base.version
        self.key_version: str | None = None
        self._rules = self._plain = self.base

    def current(self) -> RuleSet:
        """The rules to key the next batch with."""
        if self.state.version() != self.version:
            self.reload()
        return self._rules

    def latest(self) -> RuleSet:
        """The rules to key with, reloaded now (a Redis call when shared): for a decision
        that must not rest on a version read a second ago."""
        version, learned = self.state.load()
        if version != self.version:
            self.apply(version, learned)
        return self._rules

    def without_learned(self) -> RuleSet:
        """The crawl's rules without the learned ones, under the same key prefix."""
        return self._plain

    def touches(self, host: str | None) -> bool:
        """True if a learned rule may change the keys of ``host`` (as stage 1 spells it):
        a rule of that host or of a domain above it. A key of a host no learned rule
        touches is the same with and without them, so it need not be made again.

        Reads the rules as of the last :meth:`current`."""
        if host is None:
            return False
        return any(
            host == scope_host or host.endswith("." + scope_host)
            for scope_host in (scope.partition("/")[0] for scope in self.learned)
        )

    def reload(self) -> None:
        """Load the crawl's current rules (a Redis call when shared) and key with them."""
        self.apply(*self.state.load())

    def apply(self, version: int, learned: Learned) -> None:
        """Key with the learned rules ``learned`` of ``version`` from now on (loaded by
        :meth:`RuleState.load`, maybe in another thread)."""
        self.version, self.learned = version, learned
        full = DEFAULT_RULES.with_host_rules(combined_host_rules(self.user_rules, self.learned))
        self.full_version = full.version
        if self.key_version is None:
            self.key_version = full.version
        self._plain = _with_version(self.base, self.key_version)
        self._rules = _with_version(full, self.key_version)
        if self.on_change is not None:
            self.on_change()


def _with_version(rules: RuleSet, version: str) -> RuleSet:
    return rules if rules.version == version else replace(rules, version=version)
