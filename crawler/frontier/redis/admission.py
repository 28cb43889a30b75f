"""Admission: marking new requests' keys seen and queueing them, releasing the lease of the
request whose handling produced them (the parent), so a crash can never lose them.

- **admit** (``admit.lua``): one atomic step, when the seen filter is one key beside the
  queue: mark the keys seen, queue the new requests, release the parent's lease.
- With a sharded filter the keys live on other slots than the queue, so admitting a batch
  whose keys need checking takes three steps, in an order that never loses a request:
  **stage** the batch in the frontier under a lease (the parent's, or one of its own), mark
  its keys in the shards, then **commit**: queue the new ones, drop the batch, release the
  lease. A worker killed between the steps leaves a staged batch whose lease expires; the
  next lease call queues the whole batch (``frontier/staged_recovered``): a key marked seen
  always has its request staged or queued, at the cost of a few pages fetched twice after a
  crash. A commit arriving after its lease expired does the same (see ``commit.lua``).

An answer from a worker whose lease expired is still accepted if nobody has leased the
request again; if another worker holds it, it is refused and dropped
(``frontier/ack_refused``): the other worker fetches the same page and admits the same links.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from crawler.frontier import META_CHECKED, META_KEY
from crawler.frontier.keys import was_checked
from crawler.frontier.politeness import HOST_META, politeness_key
from crawler.frontier.redis.leases import text, without_lease
from crawler.frontier.redis.outbox import Answer
from crawler.frontier.serialize import RequestNotSerializable, request_to_json
from crawler.seen.layers import OlderLayers
from crawler.seen.redis import REPLY_TTL

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from crawler.frontier.keys import RequestKeyer
    from crawler.frontier.lua import FrontierScripts
    from crawler.frontier.redis.leases import Leases
    from crawler.frontier.redis.outbox import Outbox
    from crawler.seen.sharded import ShardedBloomSeenFilter

logger = logging.getLogger(__name__)

#: ``request.meta`` flag: already queued in the shared frontier, the scheduler skips it.
QUEUED_META = "frontier_queued"
#: The filter's parameters admit.lua takes, in its order.
BLOOM_ARGS = ("capacity", "error_rate", "expansion")
#: Values per request in a batch's rows: queue score, politeness host, JSON (admit.lua,
#: stage.lua).
ROW = 3


def stored_form(request: Request, key: str) -> Request:
    """``request`` as it is stored: with its key, without this worker's lease id."""
    meta = without_lease(request.meta)
    meta.pop(QUEUED_META, None)
    meta[META_KEY] = key
    meta[HOST_META] = politeness_key(request)
    # The URL, not True: a copy of the request with another URL is checked again.
    meta[META_CHECKED] = request.url
    return request.replace(meta=meta)


class StagedAdmission:
    """Delivers one batch in the three steps a sharded filter needs (module docstring):
    stage it, mark its checked keys in the shards, commit it. Called again after a
    ``REDIS_UNAVAILABLE`` error, it resumes at the step that failed; a retried step repeats
    harmlessly (the stage and the shards' answers are kept under the batch's id).

    Returns what the admit script returns: per request "1" if queued, else "0"; or
    "refused" when the parent's lease may not be released by this worker (nothing done).
    """

    def __init__(
        self,
        admission: Admission,
        parent: str | None,
        checked_keys: list[str],
        checks: list[bool],
        rows: list[Any],
    ) -> None:
        self.admission = admission
        self.parent = parent
        self.checked_keys = checked_keys
        self.checks = checks
        self.rows = rows
        self.batch = uuid.uuid4().hex
        #: The lease holding the staged batch, once step 1 is done.
        self.lease: str | None = None
        #: The shards' answers for ``checked_keys``, once step 2 is done.
        self.fresh: list[bool] | None = None

    def __call__(self) -> str:
        admission = self.admission
        scripts = admission.scripts
        if self.lease is None:
            args = [admission.owner, self.parent or "", self.batch, admission.lease_ttl_ms]
            reply = text(scripts.run("stage", [*args, *self.rows]))
            if reply == "refused":
                return reply
            self.lease = reply
        if self.fresh is None:
            self.fresh = admission.seen.add_many(
                self.checked_keys, batch_id=self.batch, reply_ttl=admission.seen_reply_ttl
            )
        answers = iter(self.fresh)
        flags = "".join("1" if not check or next(answers) else "0" for check in self.checks)
        cap = admission.leases.quarantine_cap
        status = text(scripts.run("commit", [self.lease, self.batch, flags, cap]))
        if status == "late":
            admission.stats.inc_value("frontier/staged_recovered", len(self.checks))
            logger.warning(
                "Batch %s committed after its lease expired: all its %d requests queued "
                "(some may be fetched twice)",
                self.batch,
                len(self.checks),
            )
            return "1" * len(self.checks)
        return flags if status == "ok" else status


class WithoutOlder:
    """Delivers a batch without the requests an older, read-only layer of the seen filter
    holds (after ``scrapy rebuild-filter``, :mod:`crawler.seen.layers`): the layers are
    asked in the delivering thread, never on Twisted's loop, once (kept for a retry); the
    requests they hold are answered "0" (seen), the others by the admission step."""

    def __init__(
        self,
        admission: Admission,
        parent: str | None,
        entries: list[tuple[Request, str]],
        checks: list[bool],
        rows: list[Any],
    ) -> None:
        self.admission = admission
        self.parent = parent
        self.entries = entries
        self.checks = checks
        self.rows = rows
        #: Per entry, True if an older layer holds it; once asked.
        self.hits: list[bool] | None = None
        self.step: Callable[[], Any] | None = None

    def __call__(self) -> str:
        if self.step is None or self.hits is None:
            asked = [index for index, check in enumerate(self.checks) if check]
            found = self.admission.older.seen([self.entries[index][0].url for index in asked])
            hits = [False] * len(self.entries)
            for index, hit in zip(asked, found, strict=True):
                hits[index] = hit
            kept = [index for index, hit in enumerate(hits) if not hit]
            self.step = self.admission.step(
                self.parent,
                [self.entries[index][1] for index in kept],
                [self.checks[index] for index in kept],
                [cell for index in kept for cell in self.rows[ROW * index : ROW * index + ROW]],
            )
            self.hits = hits
        reply = text(self.step())
        if reply == "refused":
            return reply
        flags = iter(reply)
        return "".join("0" if hit else next(flags) for hit in self.hits)


class Admission:
    """Admits requests into the shared frontier (see the module docstring).

    Stats: ``frontier/enqueued``, ``frontier/acked``, ``frontier/unserializable``; the
    seen-filter verdicts as in the embedded frontier (``seen/new``, ...).
    """

    def __init__(
        self,
        scripts: FrontierScripts,
        seen: ShardedBloomSeenFilter,
        keyer: RequestKeyer,
        leases: Leases,
        outbox: Outbox,
        stats: StatsCollector,
        older: OlderLayers | None = None,
    ) -> None:
        self.scripts = scripts
        self.seen = seen
        self.keyer = keyer
        self.leases = leases
        self.outbox = outbox
        self.stats = stats
        #: Read-only layers of the seen filter (after ``scrapy rebuild-filter``).
        self.older = older or OlderLayers([])
        self.spider: Spider | None = None
        #: Called on each answer with the requests found new and those found seen (a crawl
        #: counts them and fires ``request_dropped`` for the latter).
        self.on_verdict: Callable[[list[Request], list[Request]], None] | None = None
        self._logged_unserializable = False

    @property
    def owner(self) -> str:
        return self.leases.owner

    @property
    def lease_ttl_ms(self) -> int:
        return self.leases.lease_ttl_ms

    @property
    def seen_reply_ttl(self) -> int:
        """Seconds each filter shard keeps its answer to a staged batch, for a retry: past
        the lease's expiry (after which a commit distrusts the answers, see commit.lua),
        plus a margin for the nodes' clocks."""
        return math.ceil(self.leases.lease_ttl) + REPLY_TTL

    def admit(
        self,
        parent: str | None,
        children: Sequence[Request],
        *,
        after: Deferred[Any] | None = None,
        on_late_duplicates: Callable[[list[Request]], None] | None = None,
        dropped_by_caller: bool = False,
    ) -> list[Request]:
        """Admit ``children`` and release the lease ``parent`` (taken from the lease
        book already), in one atomic admit script, or in the three steps of a sharded
        filter when some of their keys need checking, once ``after`` fired; the new
        requests, marked ``meta[QUEUED_META]``.

        When the answer is not known on return (sent from the background thread, or Redis
        away), every request is returned; ``on_late_duplicates`` gets those it finds seen
        when it comes. :attr:`on_verdict` hears of every answer; of its duplicates only
        when late, if ``dropped_by_caller`` (the caller reports those it gets back itself:
        Scrapy's engine sends ``request_dropped`` when ``enqueue_request`` says False)."""
        pairs = self.keyer.keyed(children)
        entries: list[tuple[Request, str]] = []
        checks: list[bool] = []
        rows: list[Any] = []  # per entry: queue score, politeness host, JSON
        max_bytes = self.leases.decoder.max_bytes
        for request, key in pairs:
            stored_request = stored_form(request, key)
            try:
                stored = request_to_json(stored_request, self.spider, max_bytes)
            except RequestNotSerializable as exc:
                self._count_unserializable(request, exc)
                continue
            entries.append((request, key))
            checks.append(not (request.dont_filter or was_checked(request)))
            rows += [-request.priority, stored_request.meta[HOST_META], stored]
        if parent is None and not entries:
            return []
        admitted: list[Request] = []
        late = False

        def on_reply(reply: bytes | str) -> bool:
            flags = text(reply)
            if flags == "refused":
                self.leases.refused(parent)
                return False
            if parent is not None:
                self.stats.inc_value("frontier/acked")
            fresh = [flag == "1" for flag in flags]
            self.stats.inc_value("frontier/enqueued", sum(fresh))
            new_ones = self.keyer.verdicts(entries, fresh)
            admitted.extend(new_ones)
            duplicates = [
                request for (request, _), new in zip(entries, fresh, strict=True) if not new
            ]
            if self.on_verdict is not None:
                self.on_verdict(new_ones, duplicates if late or not dropped_by_caller else [])
            if late and duplicates and on_late_duplicates is not None:
                on_late_duplicates(duplicates)
            return True

        keys = [key for _, key in entries]
        if self.older and any(checks):
            deliver: Callable[[], Any] = WithoutOlder(self, parent, entries, checks, rows)
        else:
            deliver = self.step(parent, keys, checks, rows)
        name = "stage+commit" if isinstance(deliver, StagedAdmission) else "admit"
        answer = Answer(name, deliver, on_reply, after, lease=parent)
        self.outbox.send(answer)
        result = admitted
        if answer.outcome is None:  # not delivered yet: the verdict is not known
            late = True
            result = [request for request, _ in entries]
        for request in result:
            request.meta[QUEUED_META] = True
        return result

    def step(
        self, parent: str | None, keys: list[str], checks: list[bool], rows: list[Any]
    ) -> Callable[[], str]:
        """The call that admits the entries of ``keys`` (with their ``checks`` and queue
        ``rows``) and releases ``parent``: the admit script, or the three steps of a sharded
        filter when some keys need checking. Raises ``REDIS_UNAVAILABLE`` errors, to be
        called again."""
        if len(self.seen.shards) > 1 and any(checks):
            checked_keys = [key for key, check in zip(keys, checks, strict=True) if check]
            return StagedAdmission(self, parent, checked_keys, checks, rows)
        bloom = self.seen.parameters  # to recreate a lost filter (admit.lua)
        args = [self.owner, parent or "", *(bloom[name] for name in BLOOM_ARGS)]
        for index, key in enumerate(keys):
            args += ["1" if checks[index] else "0", key, *rows[ROW * index : ROW * index + ROW]]
        return partial(self.scripts.run, "admit", args)

    def _count_unserializable(self, request: Request, exc: RequestNotSerializable) -> None:
        self.stats.inc_value("frontier/unserializable")
        level = logging.DEBUG if self._logged_unserializable else logging.WARNING
        self._logged_unserializable = True
        logger.log(level, "Request %s cannot be queued (dropped): %s", request, exc.reason)
