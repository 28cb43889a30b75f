"""Older seen-filter layers: what a crawl saw under the rules it had before a rebuild.

``scrapy rebuild-filter`` (:mod:`bloom_frontier.commands.rebuild_filter`) builds a new seen filter
from every URL the crawl knows, keyed under the current rules. Bloom filters cannot list
their keys, so URLs the crawl met but never recorded (dropped by the offsite or robots.txt
middleware, say) are only in the old filter: it stays as a **read-only layer**. A URL is
seen if the current filter holds its key under the current rules, OR an older layer holds
its key under that layer's rules; new keys go to the current filter only. Keys carry their
rule version, so each layer must be asked with the key made under its own rules: each
layer comes with the rules it was filled under (:func:`rules_record`).

Where the layers live:

- embedded crawl (``JOBDIR``): the current filter in ``JOBDIR/seen/``, older layers in
  ``JOBDIR/seen-older/<n>/``; each directory holds the filter and ``rules.json``;
- shared crawl (``REDIS_URL``): the manifest ``<prefix>:seen:layers`` (JSON) names the
  current filter's key (``<prefix>:seen`` until a first rebuild, then ``<prefix>:seen:g<n>``)
  and the older ones, each with its rules. Switching generations is one ``SET`` of the
  manifest, so keys that workers add to the old generation while a rebuild runs are never
  lost: that generation becomes an older layer, still consulted.

A crawl records its rules beside its filter the first time it starts, and refuses to start
with other rules than those its filter was filled (or rebuilt) under: the keys would not
match, and every page would count as new. Learned parameter rules (:mod:`bloom_frontier.learning`)
are the exception: a filter rebuilt under ``CANON_HOST_RULES`` plus learned rules records
both (``learned``), and a crawl with the same ``CANON_HOST_RULES`` keys under that filter's
version prefix with whichever learned rules are applied now (a learned rule only drops a
parameter proven to change nothing; one revoked since makes the pages it merged new again,
never merges more).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from bloom_frontier.canonical import InvalidURL, dedupe_key
from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet
from bloom_frontier.learning.state import combined_host_rules

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.settings import BaseSettings

    from bloom_frontier.frontier.keys import RequestKeyer
    from bloom_frontier.frontier.redis.layout import FrontierKeys
    from bloom_frontier.redis_client import Client

#: File beside an embedded filter naming the rules it was filled under.
RULES_FILE = "rules.json"
#: Directory (in ``JOBDIR``) of the older layers of an embedded crawl.
OLDER_DIR = "seen-older"


class RulesMismatch(RuntimeError):
    """A crawl started with other rules than those its seen filter was filled under."""


class SupportsContains(Protocol):
    def contains_many(self, keys: Sequence[str]) -> list[bool]:
        """Per key, True if the filter (probably) holds it; adds nothing."""
        ...


def rules_record(
    host_rules: dict[str, Any], rules: RuleSet, learned: Mapping[str, list[str]] | None = None
) -> dict[str, Any]:
    """What is stored beside a filter about its rules: enough to key URLs with them again:
    ``CANON_HOST_RULES`` and the learned drop rules (scope -> names) ``rules`` include.

    >>> rules_record({}, DEFAULT_RULES)["host_rules"]
    {}
    """
    return {"version": rules.version, "host_rules": host_rules, "learned": dict(learned or {})}


def settings_rules_record(settings: BaseSettings, rules: RuleSet) -> dict[str, Any]:
    """:func:`rules_record` of a crawl's ``CANON_HOST_RULES``."""
    return rules_record(settings.getdict("CANON_HOST_RULES"), rules)


def rules_from_record(record: dict[str, Any]) -> RuleSet:
    """The ruleset a :func:`rules_record` describes; ValueError when the built-in rules of
    this version of the code no longer give the recorded version (keys made then cannot be
    made again)."""
    rules = DEFAULT_RULES.with_host_rules(
        combined_host_rules(record["host_rules"], record.get("learned") or {})
    )
    if rules.version != record["version"]:
        raise ValueError(
            f"the recorded rules were version {record['version']}, this code makes "
            f"{rules.version} from them: the built-in rules changed since"
        )
    return rules


def revoked_in(record: dict[str, Any], revoked: set[str]) -> list[str]:
    """The learned rules (``scope?param``) a filter's rules ``record`` includes that are
    among ``revoked``: its keys merge pages no longer proven equal.

    >>> revoked_in({"learned": {"e.org": ["ref", "src"]}}, {"e.org?ref"})
    ['e.org?ref']
    """
    learned = record.get("learned") or {}
    return sorted(
        f"{scope}?{name}"
        for scope, names in learned.items()
        for name in names
        if f"{scope}?{name}" in revoked
    )


def check_rules(recorded: dict[str, Any], record: dict[str, Any], where: str) -> str:
    """The version prefix to key with, for a crawl with the rules of ``record``, on the
    filter at ``where`` filled under ``recorded``: that filter's version, when it was filled
    under these rules or under these ``CANON_HOST_RULES`` plus learned rules (see the module
    docstring). :class:`RulesMismatch` otherwise."""
    version = record["version"]
    if recorded["version"] == version:
        return version
    learned = recorded.get("learned") or {}
    if learned:
        mine = DEFAULT_RULES.with_host_rules(combined_host_rules(record["host_rules"], learned))
        if mine.version == recorded["version"]:
            return mine.version
    raise RulesMismatch(
        f"the seen filter at {where} was filled under rules {recorded['version']} "
        f"(CANON_HOST_RULES={json.dumps(recorded['host_rules'])}), this crawl keys with "
        f"{version}: set CANON_HOST_RULES as it was, or run `scrapy rebuild-filter` "
        "to apply the new rules"
    )


@dataclass(frozen=True)
class OlderLayer:
    """A read-only filter and the rules its keys were made with."""

    filter: SupportsContains
    rules: RuleSet
    name: str


class OlderLayers:
    """The read-only layers of a seen filter, asked per URL (each with its own rules)."""

    def __init__(self, layers: Sequence[OlderLayer]) -> None:
        self.layers = list(layers)

    def __bool__(self) -> bool:
        return bool(self.layers)

    def seen(self, urls: Sequence[str]) -> list[bool]:
        """Per URL, True if an older layer holds its key (made under that layer's rules)."""
        result = [False] * len(urls)
        for layer in self.layers:
            positions, keys = [], []
            for position, url in enumerate(urls):
                if result[position]:
                    continue
                try:
                    keys.append(dedupe_key(url, layer.rules))
                except InvalidURL:
                    continue
                positions.append(position)
            if keys:
                for position, hit in zip(positions, layer.filter.contains_many(keys), strict=True):
                    result[position] = hit
        return result

    def drop_seen(
        self,
        pairs: Sequence[tuple[Request, str]],
        keyer: RequestKeyer,
        must_check: Callable[[Request], bool] = lambda request: True,
    ) -> list[tuple[Request, str]]:
        """``pairs`` without the requests an older layer has seen (among those that
        ``must_check``), which are counted as duplicates by ``keyer``."""
        if not self.layers or not pairs:
            return list(pairs)
        checked = [pair for pair in pairs if must_check(pair[0])]
        hits = dict(
            zip(
                (id(request) for request, _ in checked),
                self.seen([request.url for request, _ in checked]),
                strict=True,
            )
        )
        dropped = [pair for pair in pairs if hits.get(id(pair[0]))]
        keyer.verdicts(dropped, [False] * len(dropped))
        return [pair for pair in pairs if not hits.get(id(pair[0]))]


# --- embedded crawls (JOBDIR) ---------------------------------------------------------------


def read_rules_file(directory: Path) -> dict[str, Any] | None:
    path = directory / RULES_FILE
    return json.loads(path.read_text()) if path.exists() else None


def write_rules_file(directory: Path, record: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"{RULES_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    tmp.replace(directory / RULES_FILE)


def older_dirs(jobdir: Path) -> list[Path]:
    """The older layers' directories of a ``JOBDIR``, oldest first."""
    root = jobdir / OLDER_DIR
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def jobdir_layers(jobdir: Path) -> OlderLayers:
    """The older layers of an embedded crawl's ``JOBDIR``, loaded read-only."""
    from bloom_frontier.seen.memory import MemoryBloomSeenFilter

    layers = []
    for directory in older_dirs(jobdir):
        record = read_rules_file(directory)
        if record is None:
            raise RulesMismatch(f"{directory} has no {RULES_FILE}: cannot key URLs for it")
        seen = MemoryBloomSeenFilter(capacity=1, error_rate=0.5, directory=directory)
        layers.append(OlderLayer(seen, rules_from_record(record), str(directory)))
    return OlderLayers(layers)


def prepare_jobdir(seen_dir: Path, keyer: RequestKeyer, host_rules: dict[str, Any]) -> OlderLayers:
    """Check (or, on a first start, record) the rules of the filter in ``seen_dir``
    (``JOBDIR/seen``) against the ``keyer``'s (made from ``host_rules``), which keys under
    that filter's version from now on, and load the older layers beside it."""
    record = rules_record(host_rules, keyer.rules)
    recorded = read_rules_file(seen_dir)
    if recorded is None:
        write_rules_file(seen_dir, record)
    else:
        keyer.use_version(check_rules(recorded, record, str(seen_dir)))
    return jobdir_layers(seen_dir.parent)


# --- shared crawls (Redis) ------------------------------------------------------------------


def manifest_key(prefix: str) -> str:
    """The Redis key of a shared crawl's layer manifest."""
    return f"{prefix}:seen:layers"


def read_manifest(client: Client, prefix: str) -> dict[str, Any] | None:
    raw = client.get(manifest_key(prefix))
    return json.loads(raw) if raw else None


def current_seen_key(client: Client, prefix: str, default_key: str) -> str:
    """The key of the shared crawl's current filter generation (``default_key`` before any
    rebuild)."""
    manifest = read_manifest(client, prefix)
    return manifest["current"]["key"] if manifest else default_key


def filter_parameters(settings: BaseSettings) -> dict[str, Any]:
    """How a shared filter is built (recorded with an older layer, to open it again)."""
    return {
        "shards": settings.getint("SEEN_FILTER_SHARDS"),
        "capacity": settings.getint("SEEN_FILTER_CAPACITY"),
        "error_rate": settings.getfloat("SEEN_FILTER_ERROR_RATE"),
        "expansion": settings.getint("SEEN_FILTER_EXPANSION"),
    }


def ensure_manifest(
    client: Client,
    prefix: str,
    default_key: str,
    record: dict[str, Any],
    parameters: dict[str, Any],
) -> dict[str, Any]:
    """The layer manifest of the shared crawl at ``prefix``; when there is none yet, one
    saying that the filter at ``default_key`` (built with ``parameters``) is keyed under the
    rules of ``record`` is recorded first."""
    fresh = {
        "current": {"key": default_key, "rules": record, "parameters": parameters},
        "older": [],
    }
    client.set(manifest_key(prefix), json.dumps(fresh), nx=True)
    return read_manifest(client, prefix) or fresh


def open_redis_layer(client: Client, entry: dict[str, Any]) -> OlderLayer:
    """An older layer of a shared crawl, from its manifest entry."""
    from bloom_frontier.seen.sharded import ShardedBloomSeenFilter

    seen = ShardedBloomSeenFilter(
        client,
        entry["key"],
        shards=entry["shards"],
        capacity=entry["capacity"],
        error_rate=entry["error_rate"],
        expansion=entry["expansion"],
    )
    return OlderLayer(seen, rules_from_record(entry["rules"]), entry["key"])


def redis_layers(
    client: Client, keys: FrontierKeys, settings: BaseSettings, keyer: RequestKeyer
) -> tuple[FrontierKeys, OlderLayers]:
    """A worker's frontier keys with the current filter generation, and the older layers
    (see the module docstring). A first worker records its rules; a worker whose rules
    differ from the current filter's refuses to start (:class:`RulesMismatch`); the
    ``keyer`` keys under the current filter's version."""
    record = settings_rules_record(settings, keyer.rules)
    manifest = ensure_manifest(client, keys.prefix, keys.seen, record, filter_parameters(settings))
    current = manifest["current"]
    keyer.use_version(check_rules(current["rules"], record, current["key"]))
    older = OlderLayers([open_redis_layer(client, entry) for entry in manifest["older"]])
    return replace(keys, seen=manifest["current"]["key"]), older
