"""The frontier's Lua boundary as named types: what the scripts are sent and answer.

Each script's reply is parsed here, once, into a frozen dataclass (one ``from_reply``
classmethod per reply) or a :class:`Status`; nothing else reads a reply by position. A reply
that is not what its script answers (a script edited on one side only, a mangled value)
raises :class:`MalformedReply`, a ``redis.RedisError``, so callers treat it as a fault of
Redis' side and never meet an ``IndexError`` deep in their own code. The scripts' headers
(``lua/<name>.lua``) say what each one takes and returns. A script's error reply saying the
crawl's state is gone or damaged becomes a typed error too (:func:`script_error`):
:class:`FrontierLost`, :class:`FrontierDamaged`, :class:`KeyOfWrongType`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

import redis

from bloom_frontier.redis_client import RedisSetupError, text

if TYPE_CHECKING:
    from typing import Self


class MalformedReply(redis.RedisError):
    """A script answered something its reply type does not allow."""

    def __init__(self, what: str, reply: Any) -> None:
        super().__init__(f"malformed {what} reply: {reply!r:.200}")


def _int(value: Any, what: str, reply: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise MalformedReply(what, reply) from None


def _list(reply: Any, what: str) -> Sequence[Any]:
    if not isinstance(reply, list | tuple):
        raise MalformedReply(what, reply)
    return reply


def _ints(reply: Any, what: str, count: int) -> list[int]:
    """A reply of exactly ``count`` integers."""
    items = _list(reply, what)
    if len(items) != count:
        raise MalformedReply(what, reply)
    return [_int(value, what, reply) for value in items]


class Status(StrEnum):
    """A script's verdict on a worker's answer (admit, stage, commit)."""

    #: Committed as staged (commit.lua).
    OK = "ok"
    #: Nothing done: the lease was not this worker's to release (it expired and another
    #: worker holds the request, or the answer was applied already).
    REFUSED = "refused"
    #: Nothing done: the batch was keyed under learned rules the crawl changed since; the
    #: worker keys it again (admit.lua, stage.lua).
    STALE = "stale"
    #: Committed after its lease expired: the whole batch queued (commit.lua).
    LATE = "late"
    #: Committed after the learned rules changed since its stage: the whole batch queued.
    CHANGED = "changed"

    @classmethod
    def from_reply(cls, reply: bytes | str) -> Self:
        """commit.lua's reply."""
        try:
            return cls(text(reply))
        except (ValueError, AttributeError, UnicodeDecodeError):
            raise MalformedReply("commit", reply) from None


@dataclass(frozen=True)
class QueueRow:
    """One request as admit.lua and stage.lua take it, after its key: where it is queued
    and its stored record (see :func:`bloom_frontier.frontier.serialize.compact_record`)."""

    #: The queue level: ``-request.priority``.
    score: int
    #: The politeness host ('' for none).
    host: str
    #: The JSON of its shape ('' for a record kept whole).
    shape: str
    #: The rest of the record: URL, then its other fields.
    rest: str

    def args(self) -> tuple[int, str, str, str]:
        """The row as the scripts' ARGV take it."""
        return self.score, self.host, self.shape, self.rest


def row_args(rows: Sequence[QueueRow]) -> list[Any]:
    """``rows`` as the scripts' ARGV take them, one after the other."""
    return [value for row in rows for value in row.args()]


@dataclass(frozen=True)
class BatchAnswer:
    """The verdict on a page's batch (admit.lua; the three steps of a staged admission
    answer the same): per request whether it was queued (new), or a :class:`Status`
    (``REFUSED`` or ``STALE``) when nothing was done."""

    #: Per request of the batch, True if queued.
    new: tuple[bool, ...] = ()
    #: ``REFUSED`` or ``STALE`` when nothing was done, else None.
    status: Status | None = None

    @classmethod
    def from_reply(cls, reply: bytes | str) -> Self:
        """admit.lua's reply: one '1'/'0' per request, or 'refused' / 'stale'."""
        try:
            flags = text(reply)
        except (AttributeError, UnicodeDecodeError):
            raise MalformedReply("admit", reply) from None
        if flags in (Status.REFUSED, Status.STALE):
            return cls(status=Status(flags))
        if flags.strip("01"):
            raise MalformedReply("admit", reply)
        return cls(new=tuple(flag == "1" for flag in flags))

    @classmethod
    def of(cls, new: Sequence[bool]) -> Self:
        return cls(new=tuple(new))

    @property
    def refused(self) -> bool:
        return self.status is Status.REFUSED

    @property
    def stale(self) -> bool:
        return self.status is Status.STALE


@dataclass(frozen=True)
class StageReply:
    """stage.lua's reply: the lease now holding the staged part, or why nothing was done."""

    #: The lease id holding the part ('' when nothing was done).
    lease: str
    #: ``OK`` when staged, else ``REFUSED`` or ``STALE``.
    status: Status

    @classmethod
    def from_reply(cls, reply: bytes | str) -> Self:
        try:
            value = text(reply)
        except (AttributeError, UnicodeDecodeError):
            raise MalformedReply("stage", reply) from None
        if value in (Status.REFUSED, Status.STALE):
            return cls("", Status(value))
        if not value:
            raise MalformedReply("stage", reply)
        return cls(value, Status.OK)


@dataclass(frozen=True)
class LeasedRequest:
    """One request a lease call handed to the worker."""

    #: Its id in its partition (the worker's lease id adds the partition).
    request_id: str
    #: Its stored record, as stored (decoded by the strict decoder, never here).
    record: bytes | str
    #: Milliseconds its host observes between two requests.
    delay_ms: int
    #: Its politeness host ('' for none).
    host: str
    #: The JSON of the shape a compact record names ('' for none).
    shape: bytes | str


@dataclass(frozen=True)
class LeaseReply:
    """lease.lua's reply from one partition: what it did, politeness and sizes, and the
    requests it leased."""

    #: Expired leases put back in the queue.
    requeued: int
    #: Requests given up after ``FRONTIER_MAX_EXPIRIES`` expiries.
    given_up: int
    #: Staged batches of dead workers queued whole, and the requests queued from them.
    recovered_batches: int
    recovered: int
    #: Queued requests passed over because their host was not ready.
    skipped: int
    #: Milliseconds until the soonest host waiting on its delay is ready (-1: none).
    soonest_ms: int
    #: Hosts waiting on politeness after this call.
    hosts_waiting: int
    #: Requests queued, and leased (by any worker), after this call.
    queued: int
    leased: int
    #: Requests quarantined by their length.
    quarantined: int
    requests: tuple[LeasedRequest, ...]

    #: Integers before the leased requests, and values per leased request.
    HEAD: ClassVar[int] = 10
    ROW: ClassVar[int] = 5

    @classmethod
    def from_reply(cls, reply: Any) -> Self:
        items = _list(reply, "lease")
        if len(items) < cls.HEAD or (len(items) - cls.HEAD) % cls.ROW:
            raise MalformedReply("lease", reply)
        head = [_int(value, "lease", reply) for value in items[: cls.HEAD]]
        rows = zip(*[iter(items[cls.HEAD :])] * cls.ROW, strict=True)
        try:
            requests = tuple(
                LeasedRequest(text(rid), record, _int(delay, "lease", reply), text(host), shape)
                for rid, record, delay, host, shape in rows
            )
        except (AttributeError, UnicodeDecodeError):
            raise MalformedReply("lease", reply) from None
        return cls(*head, requests=requests)


@dataclass(frozen=True)
class Sizes:
    """counts.lua's reply: requests queued, leased and failed in one partition, read
    atomically."""

    queued: int
    leased: int
    failed: int

    @classmethod
    def from_reply(cls, reply: Any) -> Self:
        return cls(*_ints(reply, "counts", 3))


@dataclass(frozen=True)
class Holders:
    """holders.lua's reply: one partition's sizes and the leases each worker holds now, read
    atomically (the leases per worker add up to ``sizes.leased``)."""

    sizes: Sizes
    #: Worker id -> leases it holds ('' for leases without an owner).
    leases: dict[str, int]

    @classmethod
    def from_reply(cls, reply: Any) -> Self:
        items = _list(reply, "holders")
        if len(items) < 3 or (len(items) - 3) % 2:
            raise MalformedReply("holders", reply)
        sizes = Sizes(*(_int(value, "holders", reply) for value in items[:3]))
        try:
            leases = {
                text(owner): _int(count, "holders", reply)
                for owner, count in zip(items[3::2], items[4::2], strict=True)
            }
        except (AttributeError, UnicodeDecodeError):
            raise MalformedReply("holders", reply) from None
        if sum(leases.values()) != sizes.leased:
            raise MalformedReply("holders", reply)
        return cls(sizes, leases)


@dataclass(frozen=True)
class CrawlTotals:
    """limits.lua's reply: the crawl's pages and items so far (this report included), and
    milliseconds since its first worker started, on the Redis server's clock."""

    pages: int
    items: int
    elapsed_ms: int

    @classmethod
    def from_reply(cls, reply: Any) -> Self:
        return cls(*_ints(reply, "limits", 3))


@dataclass(frozen=True)
class Requeued:
    """requeue_quarantined.lua's reply: records requeued, and records kept in quarantine
    (cut payloads, mangled records)."""

    requeued: int
    kept: int

    @classmethod
    def from_reply(cls, reply: Any) -> Self:
        return cls(*_ints(reply, "requeue_quarantined", 2))


# --- a crawl whose state is gone ----------------------------------------------------------


class _StateError(redis.exceptions.ResponseError, RedisSetupError):
    """The crawl's state in Redis is not what the frontier wrote: a ``redis.ResponseError``
    (callers treating any Redis error keep doing so), and a :class:`RedisSetupError` (a
    command says it in one ``error:`` line)."""

    headline: ClassVar[str]
    advice: ClassVar[str] = (
        "the crawl is incomplete: reset it (scrapy frontier SPIDER --reset) and crawl again"
    )

    def __init__(self, detail: str) -> None:
        self.detail = detail
        headline = f"the frontier's state in Redis was {self.headline}"
        super().__init__(f"{headline} ({detail}); {self.advice}")


class FrontierGone(_StateError):
    """The crawl's state in Redis cannot be trusted any more: the worker stops (one line, a
    non-zero exit)."""


class FrontierLost(FrontierGone):
    """The crawl's identity is missing or another one (:mod:`.identity`): everything the
    worker knew of the crawl is gone."""

    headline = "lost: restarted without persistence, flushed or evicted"


class FrontierDamaged(FrontierGone):
    """A fixed key holding requests (:data:`.layout.VITAL_KEYS`) was overwritten: moved aside,
    the crawl marked lost."""

    headline = "damaged"


class KeyOfWrongType(_StateError):
    """A script that moves no key (a command's, politeness') met a fixed key of another type
    and refused; a worker moves it aside (:mod:`.lua`)."""

    headline = "damaged"
    advice = "a worker moves it aside (and stops if it held requests)"


class KeysMovedAside(redis.exceptions.ResponseError):
    """A worker's step moved fixed keys of the wrong type aside and did nothing else: the
    keys start over empty, the step is run again (:class:`.lua.FrontierScripts`)."""


#: The marker a script's error reply starts with -> the error it means.
_SCRIPT_ERRORS: dict[str, type[redis.exceptions.ResponseError]] = {
    "FRONTIER_LOST": FrontierLost,
    "FRONTIER_DAMAGED": FrontierDamaged,
    "KEY_WRONG": KeyOfWrongType,
    "KEY_MOVED": KeysMovedAside,
}


def script_error(error: redis.exceptions.ResponseError) -> redis.exceptions.ResponseError:
    """The typed error a script's error reply stands for (``error`` itself for any other:
    a bug, or Redis refusing the command)."""
    marker, _, detail = str(error).partition(" ")
    kind = _SCRIPT_ERRORS.get(marker)
    return error if kind is None else kind(detail)
