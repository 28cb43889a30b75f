"""Rebuilding a crawl's seen filter under new rules (``scrapy rebuild-filter``).

Every URL the crawl knows is keyed again under the current rules and added to a new filter;
the old filter becomes a read-only layer (:mod:`bloom_frontier.seen.layers`), so nothing seen
becomes unseen. The URLs come from the record store (fetched pages, redirect hops, URL
aliases, canonical hints) and from the frontier (requests leased or failed in Redis).
Requests still waiting in the queue (queued, requeued or staged in Redis; the ``JOBDIR``
request queue of an embedded crawl) are not added: their key under the new rules would be
seen already when they leave the queue, and they are keyed again then
(:mod:`bloom_frontier.learning.gate`): dropped if the new rules merge them with a page
known, else marked and fetched.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
from queuelib import queue

from bloom_frontier.canonical import InvalidURL, dedupe_key
from bloom_frontier.frontier.decode import COMPACT_PREFIX, record_url
from bloom_frontier.frontier.redis.layout import FrontierKeys
from bloom_frontier.frontier.redis.partitions import partition_keys
from bloom_frontier.frontier.redis.state import queued_records
from bloom_frontier.redis_client import text
from bloom_frontier.seen.layers import (
    OLDER_DIR,
    filter_parameters,
    manifest_key,
    older_dirs,
    read_rules_file,
    revoked_in,
    write_rules_file,
)
from bloom_frontier.seen.memory import MemoryBloomSeenFilter
from bloom_frontier.seen.sharded import seen_filter_from_settings, shard_keys

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from bloom_frontier.canonical.rules import RuleSet
    from bloom_frontier.pipelines.reader import StoreReader
    from bloom_frontier.redis_client import Client

logger = logging.getLogger(__name__)

#: Directory (in ``JOBDIR``) of layers retired by a revoked learned rule.
RETIRED_DIR = "seen-retired"

#: Keys added to the new filter per call.
BATCH = 1000


class RebuildConflict(RuntimeError):
    """Another rebuild switched the filter while this one ran."""


@dataclass
class KeyedUrls:
    """The new keys of the known URLs, and the URLs the new rules reject."""

    keys: set[str] = field(default_factory=set)
    urls: int = 0
    rejected: dict[str, int] = field(default_factory=dict)

    def add(self, urls: Iterable[str], rules: RuleSet) -> None:
        for url in urls:
            self.urls += 1
            try:
                self.keys.add(dedupe_key(url, rules))
            except InvalidURL as exc:
                self.rejected[exc.reason] = self.rejected.get(exc.reason, 0) + 1


def store_urls(store: StoreReader) -> Iterator[str]:
    """Every URL the record store knows: fetched pages (asked and answered), both ends of
    each redirect hop, URL aliases and canonical hints (the page and a valid target)."""
    for page in store.pages():
        yield page["fetch_url"]
        yield page["final_url"]
    for chain in store.chains():
        yield chain.start_url
        for hop in chain.hops:
            yield hop.source_url
            if hop.target_url:
                yield hop.target_url
    for alias in store.url_aliases():
        yield alias["url"]
    for hint in store.hints():
        yield hint["page_url"]
        if hint["valid"] and hint["canonical_url"]:
            yield hint["canonical_url"]


def _staged_entries(text: bytes | str) -> list[Any]:
    """The entries of a staged batch (``[score, host, shape, rest of the record]``, or from
    older workers ``[score, host, JSON]`` and ``[score, JSON]``)."""
    try:
        entries = json.loads(text)["entries"]
        return [entry for entry in entries if isinstance(entry, list) and entry]
    except (ValueError, TypeError, KeyError, RecursionError):
        return []


def _staged_record(entry: list[Any]) -> str:
    """A staged entry's record as a lane would hold it (the shape id is not needed here)."""
    if len(entry) == 4 and entry[2]:
        return f"{COMPACT_PREFIX}0\t{entry[3]}"
    return entry[-1]


def jobdir_queued_urls(jobdir: Path) -> Iterator[str]:
    """URLs of the requests waiting in an embedded crawl's ``JOBDIR/requests.queue``, read
    from a copy (Scrapy's disk queues can only be popped)."""
    source = jobdir / "requests.queue"
    if not source.is_dir():
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp, "queue")
        shutil.copytree(source, copy)
        fifo_dirs = {info.parent for info in copy.rglob("info.json")}
        queues: list[Any] = [queue.FifoDiskQueue(path) for path in sorted(fifo_dirs)]
        queues += [
            queue.LifoDiskQueue(path)
            for path in sorted(copy.rglob("*"))
            if path.is_file() and path.suffix != ".json" and path.parent not in fifo_dirs
        ]
        for disk_queue in queues:
            while (data := disk_queue.pop()) is not None:
                if url := record_url(data):
                    yield url
            disk_queue.close()


def redis_frontier_urls(client: Client, prefix: str) -> Iterator[str]:
    """URLs of every request in a shared frontier (:func:`redis_frontier_entries`)."""
    return (url for url, _waiting in redis_frontier_entries(client, prefix))


def redis_frontier_entries(client: Client, prefix: str) -> Iterator[tuple[str, bool]]:
    """URLs of the requests in a shared frontier (every partition of its queue), each with
    True if its request still waits to be leased (queued, requeued, or staged: a batch being
    admitted through a sharded filter), False if it is leased or failed for good."""
    for keys in partition_keys(client, FrontierKeys.for_prefix(prefix)):
        requeued = set()
        for _lane, item in queued_records(client, keys):
            if url := record_url(item):
                yield url, True
            else:  # "#<lease id>": requeued, its record in `requests`
                requeued.add(text(item).removeprefix("#"))
        for lease, record in client.hscan_iter(keys.requests):
            if url := record_url(record):
                yield url, text(lease) in requeued
        for _lease, staged in client.hscan_iter(keys.staged):
            for entry in _staged_entries(staged):
                if isinstance(entry[-1], str) and (url := record_url(_staged_record(entry))):
                    yield url, True
        for url, _record in client.hscan_iter(keys.failed):
            yield text(url), False


def _batches(keys: Iterable[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for key in keys:
        batch.append(key)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


# --- embedded crawls --------------------------------------------------------------------------


def rebuild_jobdir(
    jobdir: Path,
    keys: Iterable[str],
    record: dict[str, Any],
    old_record: dict[str, Any],
    settings: BaseSettings,
    revoked: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[Path | None, list[Path]]:
    """Replace ``JOBDIR/seen`` by a filter of ``keys`` (made under the rules of ``record``),
    the old one moving to ``JOBDIR/seen-older/<n>`` with ``old_record`` if it had no rules
    file. A layer keyed under a learned rule now ``revoked`` (``scope?param``) is retired
    instead, to ``JOBDIR/seen-retired/<n>``, never consulted again: its keys merge pages no
    longer proven equal. The crawl must be stopped. Returns the older layer's directory
    (None if there was no filter, or it was retired) and the retired ones."""
    seen_dir = jobdir / "seen"
    building = jobdir / "seen.rebuild"
    shutil.rmtree(building, ignore_errors=True)
    new = MemoryBloomSeenFilter.from_settings(settings, directory=str(building))
    for batch in _batches(keys):
        new.add_many(batch)
    new.close()
    write_rules_file(building, record)
    retired = [
        _move_to(directory, jobdir / RETIRED_DIR)
        for directory in older_dirs(jobdir)
        if revoked_in(read_rules_file(directory) or {}, revoked)
    ]
    older = None
    if seen_dir.exists():
        if read_rules_file(seen_dir) is None:
            write_rules_file(seen_dir, old_record)
        if revoked_in(old_record, revoked):
            retired.append(_move_to(seen_dir, jobdir / RETIRED_DIR))
        else:
            older = _move_to(seen_dir, jobdir / OLDER_DIR)
    building.rename(seen_dir)
    return older, retired


def _move_to(directory: Path, parent: Path) -> Path:
    """Move ``directory`` to the next numbered directory in ``parent``."""
    parent.mkdir(exist_ok=True)
    numbers = [int(p.name) for p in parent.iterdir() if p.name.isdigit()]
    target = parent / str(max(numbers) + 1 if numbers else 0)
    directory.rename(target)
    return target


# --- shared crawls ----------------------------------------------------------------------------

_GENERATION = re.compile(r":g(\d+)$")


def next_generation_key(prefix: str, current: str) -> str:
    """The key of the filter generation after ``current``.

    >>> next_generation_key("{site}", "{site}:seen")
    '{site}:seen:g1'
    >>> next_generation_key("{site}", "{site}:seen:g1")
    '{site}:seen:g2'
    """
    match = _GENERATION.search(current)
    return f"{prefix}:seen:g{int(match.group(1)) + 1 if match else 1}"


def _delete_filter(client: Client, base_key: str, shards: int) -> None:
    """Remove what an interrupted rebuild left at ``base_key``."""
    for key in shard_keys(base_key, shards):
        client.delete(key, f"{key}:params")
    client.delete(f"{base_key}:shards")


def rebuild_redis(
    client: Client,
    prefix: str,
    manifest: dict[str, Any],
    keys: Iterable[str],
    record: dict[str, Any],
    settings: BaseSettings,
    revoked: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[str, list[str]]:
    """Fill the next generation of the shared crawl's filter with ``keys`` (made under the
    rules of ``record``), then switch to it in one atomic step: the manifest names it as
    current and the previous generation as the newest older layer. Workers may run
    meanwhile: what they add to the previous generation stays seen. A generation keyed
    under a learned rule now ``revoked`` is retired instead: left out of the manifest (its
    Redis keys are left in place), never consulted again. Returns the new key and the
    retired ones.

    :class:`RebuildConflict` if the manifest changed meanwhile (another rebuild)."""
    parameters = filter_parameters(settings)
    current = manifest["current"]
    new_key = next_generation_key(prefix, current["key"])
    _delete_filter(client, new_key, parameters["shards"])
    new = seen_filter_from_settings(client, new_key, settings)
    for batch in _batches(keys):
        new.add_many(batch)
    older_entry = {**current["parameters"], "key": current["key"], "rules": current["rules"]}
    older = [older_entry, *manifest["older"]]
    retired = [entry["key"] for entry in older if revoked_in(entry["rules"], revoked)]
    switched = {
        "current": {"key": new_key, "rules": record, "parameters": parameters},
        "older": [entry for entry in older if entry["key"] not in retired],
    }
    name = manifest_key(prefix)
    with client.pipeline(transaction=True) as pipe:
        try:
            pipe.watch(name)
            if json.loads(pipe.get(name) or "null") != manifest:
                raise RebuildConflict(f"{name} changed while rebuilding: run it again")
            pipe.multi()
            pipe.set(name, json.dumps(switched))
            pipe.execute()
        except redis.WatchError:
            raise RebuildConflict(f"{name} changed while rebuilding: run it again") from None
    return new_key, retired
