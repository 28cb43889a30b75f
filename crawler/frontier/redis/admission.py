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
- With a partitioned queue (``FRONTIER_PARTITIONS`` > 1, :mod:`.partitions`) the seen
  filter is never beside the queue and a page's links may belong to several partitions:
  every batch takes the three steps, each partition's part staged and committed in its own
  partition. The parent's part (under its lease) is staged last and committed last: every
  other part is staged before the parent's lease can be taken over by a recovery, and queued
  before it is released. A worker killed in between leaves staged parts that the partitions'
  next lease calls queue whole, and the parent's lease expires (fetched again) unless its
  own part was staged: a page whose links span partitions may be fetched again after a
  crash, never lost. When the parent's lease is refused, the parts staged already are
  dropped again (committed with nothing to queue).

An answer from a worker whose lease expired is still accepted if nobody has leased the
request again; if another worker holds it, it is refused and dropped
(``frontier/ack_refused``): the other worker fetches the same page and admits the same links.

Keys depend on the crawl's learned parameter rules (:mod:`bloom_frontier.learning.state`), which
another worker may change at any moment (a rule applied, or revoked by a counter-example),
and a worker reads their version only about once a second. So each batch carries the version
its keys were made under; admit and stage change nothing and answer **stale** when the
crawl's version differs (a revoked rule would drop a page as its variant's duplicate), and
the worker reloads the rules (in the background thread, in order with its other answers),
keys the batch again and sends it again, under the same parent lease, released only with the
accepted batch (``frontier/stale_rules``). A commit whose rules moved after its stage queues
the whole batch (``commit.lua``). A worker killed in between loses nothing: the lease expires
and the page is fetched again.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from bloom_frontier.frontier.keys import was_checked
from bloom_frontier.frontier.known import KnownKeys
from bloom_frontier.frontier.politeness import politeness_key
from bloom_frontier.frontier.redis.leases import without_lease
from bloom_frontier.frontier.redis.outbox import Answer
from bloom_frontier.frontier.redis.protocol import (
    BatchAnswer,
    QueueRow,
    StageReply,
    Status,
    row_args,
)
from bloom_frontier.frontier.serialize import RequestNotSerializable, RequestShapes, compact_record
from bloom_frontier.meta import (
    DEDUPE_CHECKED_META,
    DEDUPE_KEY_META,
    DEDUPE_KEY_RULES_META,
    FRONTIER_HOST_META,
    FRONTIER_QUEUED_META,
)
from bloom_frontier.seen.layers import OlderLayers
from bloom_frontier.seen.redis import REPLY_TTL

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from bloom_frontier.frontier.keys import RequestKeyer
    from bloom_frontier.frontier.redis.leases import Leases
    from bloom_frontier.frontier.redis.outbox import Outbox
    from bloom_frontier.frontier.redis.partitions import Partitions
    from bloom_frontier.seen.sharded import ShardedBloomSeenFilter

logger = logging.getLogger(__name__)

#: The filter's parameters admit.lua takes, in its order.
BLOOM_ARGS = ("capacity", "error_rate", "expansion")


def stored_meta(request: Request, key: str) -> dict[str, Any]:
    """The ``meta`` ``request`` is stored with: its key, without this worker's lease id."""
    meta = without_lease(request.meta)
    meta.pop(FRONTIER_QUEUED_META, None)
    meta.pop(DEDUPE_KEY_RULES_META, None)
    meta[DEDUPE_KEY_META] = key
    meta[FRONTIER_HOST_META] = politeness_key(request)
    # The URL, not True: a copy of the request with another URL is checked again.
    meta[DEDUPE_CHECKED_META] = request.url
    return meta


class StagedAdmission:
    """Delivers one batch in the three steps a sharded filter or a partitioned queue needs
    (module docstring): stage each partition's part of it (the parent's last), mark its
    checked keys in the filter, commit each part (the parent's last). Called again after a
    ``REDIS_UNAVAILABLE`` error, it resumes at the step that failed; a retried step repeats
    harmlessly (the stages and the filter's answers are kept under the batch's id).

    Answers as the admit script does (:class:`.protocol.BatchAnswer`): per request whether
    it was queued; or refused when the parent's lease may not be released by this worker,
    stale when the crawl's learned rules are no longer those of ``version`` (nothing done
    either way).
    """

    def __init__(
        self,
        admission: Admission,
        parent: str | None,
        checked_keys: list[str],
        checks: list[bool],
        rows: list[QueueRow],
        version: str,
    ) -> None:
        self.admission = admission
        self.parent = parent
        self.checked_keys = checked_keys
        self.checks = checks
        self.rows = rows
        self.version = version
        self.batch = uuid.uuid4().hex
        #: Each partition's part: the positions of its requests, the lead's (the parent's
        #: partition, else the first) first; once placed (step 1).
        self.parts: dict[int, list[int]] | None = None
        #: The lease holding each partition's staged part, once staged.
        self.leases: dict[int, str] = {}
        #: The filter's answers for ``checked_keys``, once step 2 is done.
        self.fresh: list[bool] | None = None
        #: Each committed part's flags (True: queued).
        self.committed: dict[int, list[bool]] = {}

    def _place(self) -> dict[int, list[int]]:
        """Each partition's part of the batch (assigning hosts seen for the first time)."""
        partitions = self.admission.partitions
        parts: dict[int, list[int]] = {}
        if self.parent is not None:
            parts[partitions.split(self.parent)[0]] = []
        for position, partition in enumerate(partitions.of_hosts([row.host for row in self.rows])):
            parts.setdefault(partition, []).append(position)
        return parts

    def __call__(self) -> BatchAnswer:
        admission = self.admission
        partitions = admission.partitions
        # One partition: its scripts check the learned rules' version atomically. Several:
        # the crawl's version is in another slot; it is read before the filter is marked.
        version = self.version if partitions.count == 1 else ""
        if self.parts is None:
            self.parts = self._place()
        lead = next(iter(self.parts), None)
        for partition in reversed(self.parts):  # the lead's last: it holds the parent
            if partition in self.leases:
                continue
            positions = self.parts[partition]
            parent = partitions.split(self.parent)[1] if self.parent and partition == lead else ""
            args = [admission.owner, parent, self.batch, admission.lease_ttl_ms, version]
            args += row_args([self.rows[p] for p in positions])
            staged_part = StageReply.from_reply(partitions.run(partition, "stage", args))
            if staged_part.status is not Status.OK:  # only the lead's: drop the parts staged
                for staged, lease in self.leases.items():
                    nothing = "0" * len(self.parts[staged])
                    partitions.run(staged, "commit", [lease, self.batch, nothing, 0, ""])
                return BatchAnswer(status=staged_part.status)
            self.leases[partition] = staged_part.lease
        if self.fresh is None and version != self.version and partitions.rules_stale(self.version):
            # Keyed under rules revoked meanwhile: mark nothing, queue the batch whole (some
            # pages may be fetched twice, none merged), as commit.lua does when they change.
            admission.stats.inc_value("frontier/stale_rules")
            self.fresh = [True] * len(self.checked_keys)
        if self.fresh is None:
            self.fresh = admission.seen.add_many(
                self.checked_keys, batch_id=self.batch, reply_ttl=admission.seen_reply_ttl
            )
        answers = iter(self.fresh)
        flags = "".join("1" if not check or next(answers) else "0" for check in self.checks)
        cap = admission.quarantine_cap
        for partition in reversed(self.parts):  # the lead's last: it releases the parent
            if partition in self.committed:
                continue
            positions = self.parts[partition]
            part_flags = "".join(flags[p] for p in positions)
            args = [self.leases[partition], self.batch, part_flags, cap, version]
            status = Status.from_reply(partitions.run(partition, "commit", args))
            if status is Status.REFUSED and partition == lead:
                return BatchAnswer(status=status)
            if status in (Status.LATE, Status.CHANGED):
                admission.stats.inc_value("frontier/staged_recovered", len(positions))
                logger.warning(
                    "Batch %s committed %s: all its %d requests queued (some may be fetched twice)",
                    self.batch,
                    "after its lease expired"
                    if status is Status.LATE
                    else "as learned rules changed",
                    len(positions),
                )
            # Late, changed, or refused: the part was queued whole.
            self.committed[partition] = (
                [flag == "1" for flag in part_flags]
                if status is Status.OK
                else [True] * len(positions)
            )
        answer = [False] * len(self.checks)
        for partition, positions in self.parts.items():
            for position, new in zip(positions, self.committed[partition], strict=True):
                answer[position] = new
        return BatchAnswer.of(answer)


class WithoutOlder:
    """Delivers a batch without the requests an older, read-only layer of the seen filter
    holds (after ``scrapy rebuild-filter``, :mod:`bloom_frontier.seen.layers`): the layers are
    asked in the delivering thread, never on Twisted's loop, once (kept for a retry); the
    requests they hold are answered "0" (seen), the others by the admission step."""

    def __init__(
        self,
        admission: Admission,
        parent: str | None,
        entries: list[tuple[Request, str]],
        checks: list[bool],
        rows: list[QueueRow],
        version: str,
    ) -> None:
        self.admission = admission
        self.parent = parent
        self.entries = entries
        self.checks = checks
        self.rows = rows
        self.version = version
        #: Per entry, True if an older layer holds it; once asked.
        self.hits: list[bool] | None = None
        self.step: Callable[[], BatchAnswer] | None = None

    def __call__(self) -> BatchAnswer:
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
                [self.rows[index] for index in kept],
                self.version,
            )
            self.hits = hits
        answer = self.step()
        if answer.status is not None:
            return answer
        new = iter(answer.new)
        return BatchAnswer.of([False if hit else next(new) for hit in self.hits])


@dataclass
class Batch:
    """A page's links keyed under the learned rules of ``version`` ('': rules that never
    change): ``pairs`` as the keyer made them, the ``entries`` to send (with their
    ``checks`` and queue ``rows``) and the ``repeats`` of an earlier entry's key."""

    pairs: list[tuple[Request, str]]
    version: str
    entries: list[tuple[Request, str]] = field(default_factory=list)
    checks: list[bool] = field(default_factory=list)
    rows: list[QueueRow] = field(default_factory=list)
    repeats: list[tuple[Request, str]] = field(default_factory=list)


class Delivery:
    """One page's batch on its way to the frontier: keyed, sent, and on a stale answer
    keyed again under the rules reloaded and sent again, until an answer is accepted or
    refused (:attr:`settled`). The parent's lease stays held until then."""

    def __init__(
        self,
        admission: Admission,
        parent: str | None,
        on_late_duplicates: Callable[[list[Request]], None] | None,
        dropped_by_caller: bool,
    ) -> None:
        self.admission = admission
        self.parent = parent
        self.on_late_duplicates = on_late_duplicates
        self.dropped_by_caller = dropped_by_caller
        #: The new requests, once an answer was accepted.
        self.admitted: list[Request] = []
        #: True once the admit call returned without the verdict.
        self.late = False
        self.settled = False
        self.batch = Batch([], "")

    def submit(self, children: Sequence[Request], after: Deferred[Any] | None = None) -> bool:
        """Key ``children`` and send them (once ``after`` fired); False if there is
        nothing to send."""
        admission = self.admission
        batch = self.batch = admission.keyed_batch(children)
        if self.parent is None and not batch.entries:
            self.settled = True
            return False
        # Against frontier/enqueued: records built for links that were not queued.
        admission.stats.inc_value("frontier/records_built", len(batch.entries))
        keys = [key for _, key in batch.entries]
        args = (self.parent, keys, batch.checks, batch.rows, batch.version)
        if admission.older and any(batch.checks):
            deliver: Callable[[], BatchAnswer] = WithoutOlder(
                admission, self.parent, batch.entries, *args[2:]
            )
        else:
            deliver = admission.step(*args)
        name = "stage+commit" if isinstance(deliver, StagedAdmission) else "admit"
        leases = admission.leases
        answered = leases.reply_handler(
            self.parent, refused=lambda answer: answer.refused, accepted=self.accepted
        )
        on_reply = partial(self.on_reply, answered)
        # The answer releases the parent's lease: heartbeated while it waits in the outbox.
        admission.outbox.send(Answer(name, deliver, on_reply, after, lease=self.parent))
        return True

    def on_reply(self, answered: Callable[[Any], bool], answer: BatchAnswer) -> bool:
        if answer.stale:
            self.stale()
            return False
        self.settled = True
        return answered(answer)

    def stale(self) -> None:
        """The crawl's learned rules moved since the batch was keyed: reload them (from the
        background thread, after the answers sent before) and send the batch again."""
        admission = self.admission
        admission.stats.inc_value("frontier/stale_rules")
        live = admission.keyer.live
        assert live is not None  # only a batch keyed under learned rules is stale
        logger.info(
            "Learned rules changed since a batch of %d links was keyed (version %s): "
            "reloading them and keying it again",
            len(self.batch.entries),
            self.batch.version,
        )
        # The parent's lease stays held until the batch keyed again is answered: the reload
        # carries it, so the heartbeat extends it until that batch is in the outbox.
        reload = Answer("load learned rules", live.state.load, self.reloaded, lease=self.parent)
        admission.outbox.send(reload)

    def reloaded(self, loaded: tuple[int, Any]) -> bool:
        live = self.admission.keyer.live
        assert live is not None
        live.apply(*loaded)
        batch = self.batch
        kept = {id(request) for request, _ in (*batch.entries, *batch.repeats)}
        self.submit([request for request, _ in batch.pairs if id(request) in kept])
        return True

    def accepted(self, answer: BatchAnswer) -> None:
        admission, batch = self.admission, self.batch
        if self.parent is not None:
            admission.stats.inc_value("frontier/acked")
        # Every checked key is in the filter now, found there or marked.
        admission.known.update(
            key for (_, key), check in zip(batch.entries, batch.checks, strict=True) if check
        )
        fresh = answer.new
        admission.stats.inc_value("frontier/enqueued", sum(fresh))
        admission.keyer.duplicates(batch.repeats)
        new_ones = admission.keyer.verdicts(batch.entries, fresh)
        self.admitted.extend(new_ones)
        duplicates = [
            request for (request, _), new in zip(batch.entries, fresh, strict=True) if not new
        ]
        if admission.on_verdict is not None:
            reported = duplicates if self.late or not self.dropped_by_caller else []
            admission.on_verdict(new_ones, reported)
        if self.late and duplicates and self.on_late_duplicates is not None:
            self.on_late_duplicates(duplicates)


class Admission:
    """Admits requests into the shared frontier (see the module docstring).

    Stats: ``frontier/enqueued``, ``frontier/acked``, ``frontier/unserializable``,
    ``frontier/records_built`` (stored records made, for new links and for links whose key
    this worker did not know, see :mod:`bloom_frontier.frontier.known`), ``frontier/stale_rules``
    (batches keyed again because the crawl's learned rules changed since, module docstring);
    the seen-filter verdicts as in the embedded frontier (``seen/new``, ...).
    """

    def __init__(
        self,
        partitions: Partitions,
        seen: ShardedBloomSeenFilter,
        keyer: RequestKeyer,
        leases: Leases,
        outbox: Outbox,
        stats: StatsCollector,
        *,
        owner: str,
        lease_ttl: float,
        max_request_bytes: int,
        quarantine_cap: int,
        older: OlderLayers | None = None,
    ) -> None:
        self.partitions = partitions
        self.seen = seen
        self.keyer = keyer
        #: Counts the answers it refuses (:meth:`.leases.Leases.reply_handler`).
        self.leases = leases
        self.outbox = outbox
        self.stats = stats
        #: This worker's id, as its leases carry it.
        self.owner = owner
        #: Seconds a staged batch's lease lasts (``FRONTIER_LEASE_TTL``).
        self.lease_ttl = lease_ttl
        #: Largest stored record queued (``FRONTIER_MAX_REQUEST_BYTES``).
        self.max_request_bytes = max_request_bytes
        #: Quarantine records kept by a commit that finds a mangled batch.
        self.quarantine_cap = quarantine_cap
        #: Read-only layers of the seen filter (after ``scrapy rebuild-filter``).
        self.older = older or OlderLayers([])
        #: Keys this worker heard the filter hold (:meth:`seen_before`).
        self.known = KnownKeys()
        self.shapes = RequestShapes()
        #: Called on each answer with the requests found new and those found seen (a crawl
        #: counts them and fires ``request_dropped`` for the latter).
        self.on_verdict: Callable[[list[Request], list[Request]], None] | None = None
        self._logged_unserializable = False

    @property
    def spider(self) -> Spider | None:
        return self.shapes.spider

    @spider.setter
    def spider(self, spider: Spider | None) -> None:
        self.shapes = RequestShapes(spider)

    def seen_before(self, key: str) -> bool:
        """True if ``key`` is certainly in the shared filter already: an answer to this
        worker said so (found seen, or marked by its admission). No Redis call: a key
        another worker marked is not known here, its batch's admission decides."""
        return key in self.known

    @property
    def lease_ttl_ms(self) -> int:
        return int(self.lease_ttl * 1000)

    @property
    def seen_reply_ttl(self) -> int:
        """Seconds each filter shard keeps its answer to a staged batch, for a retry: past
        the lease's expiry (after which a commit distrusts the answers, see commit.lua),
        plus a margin for the nodes' clocks."""
        return math.ceil(self.lease_ttl) + REPLY_TTL

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
        requests, marked ``meta[FRONTIER_QUEUED_META]``.

        When the answer is not known on return (sent from the background thread, or Redis
        away), every request is returned; ``on_late_duplicates`` gets those it finds seen
        when it comes. :attr:`on_verdict` hears of every answer; of its duplicates only
        when late, if ``dropped_by_caller`` (the caller reports those it gets back itself:
        Scrapy's engine sends ``request_dropped`` when ``enqueue_request`` says False).
        A request repeating the key of an earlier checked one of the batch gets no record
        (the filter would say seen) and is never returned: counted as a duplicate with the
        answer. A stale answer (module docstring) sends the batch again, keyed anew."""
        delivery = Delivery(self, parent, on_late_duplicates, dropped_by_caller)
        if not delivery.submit(children, after):
            return []
        result = delivery.admitted
        if not delivery.settled:  # not answered yet: the verdict is not known
            delivery.late = True
            result = [request for request, _ in delivery.batch.entries]
        for request in result:
            request.meta[FRONTIER_QUEUED_META] = True
        return result

    def keyed_batch(self, children: Sequence[Request]) -> Batch:
        """``children`` keyed under the crawl's rules now, with their stored records."""
        batch = Batch(self.keyer.keyed(children), self.keyer.rules_version)
        batch_keys: set[str] = set()  # keys of the checked entries
        max_bytes = self.max_request_bytes
        for request, key in batch.pairs:
            check = not (request.dont_filter or was_checked(request))
            if check and key in batch_keys:
                batch.repeats.append((request, key))
                continue
            meta = stored_meta(request, key)
            host = meta[FRONTIER_HOST_META]
            try:
                shape, rest = compact_record(
                    request,
                    self.spider,
                    max_bytes,
                    host=host,
                    host_meta=FRONTIER_HOST_META,
                    shapes=self.shapes,
                    meta=meta,
                )
            except RequestNotSerializable as exc:
                self._count_unserializable(request, exc)
                continue
            batch.entries.append((request, key))
            batch.checks.append(check)
            batch.rows.append(QueueRow(-request.priority, host, shape, rest))
            if check:
                batch_keys.add(key)
        return batch

    def step(
        self,
        parent: str | None,
        keys: list[str],
        checks: list[bool],
        rows: list[QueueRow],
        version: str = "",
    ) -> Callable[[], BatchAnswer]:
        """The call that admits the entries of ``keys`` (with their ``checks`` and queue
        ``rows``, keyed under the learned rules of ``version``) and releases ``parent``:
        the admit script, or the three steps of a sharded filter when some keys need
        checking, or of a partitioned queue. Raises ``REDIS_UNAVAILABLE`` errors, to be
        called again."""
        if self.partitions.count > 1 or (len(self.seen.shards) > 1 and any(checks)):
            checked_keys = [key for key, check in zip(keys, checks, strict=True) if check]
            return StagedAdmission(self, parent, checked_keys, checks, rows, version)
        bloom = self.seen.parameters  # to recreate a lost filter (admit.lua)
        args = [self.owner, parent or "", version, *(bloom[name] for name in BLOOM_ARGS)]
        for key, check, row in zip(keys, checks, rows, strict=True):
            args += ["1" if check else "0", key, *row.args()]
        run = partial(self.partitions.run, 0, "admit", args)
        return lambda: BatchAnswer.from_reply(run())

    def _count_unserializable(self, request: Request, exc: RequestNotSerializable) -> None:
        self.stats.inc_value("frontier/unserializable")
        level = logging.DEBUG if self._logged_unserializable else logging.WARNING
        self._logged_unserializable = True
        logger.log(level, "Request %s cannot be queued (dropped): %s", request, exc.reason)
