"""Writing the record store: buffered upserts, flushed in their own thread, group commits.

Records are buffered and flushed in one transaction every ``STORE_BATCH_SIZE`` records, every
``STORE_FLUSH_INTERVAL`` seconds (at the next write) and when the spider closes. Every write
is an idempotent upsert keyed on a hash of the record's natural key, so a batch written twice
(a retried flush, two workers recording the same page) leaves one row. While the database is
unreachable, records stay buffered and the flush is retried every ``STORE_FLUSH_INTERVAL``
seconds; the crawl goes on.

During a crawl every write runs in the writer's background thread, never on Twisted's loop.
The last flush, when the spider closes, is retried while the database stays away (a locked
file, a restarting server), up to ``DEFAULT_CLOSE_TIMEOUT`` seconds, and Scrapy waits for it:
the process exits once every record is written (or, past that, with an error saying how many
were not). On a shared frontier a page's records are committed before its lease is released
(:meth:`StoreWriter.commit_page`; pages handled while one commit is under way share the next,
a group commit): while the database stays away, those pages wait, their leases held, and are
released once it is back; a worker killed meanwhile loses nothing (the pages are fetched
again). Throughput figures: ``docs/scaling.md``.

What a write can meet, and what follows (:func:`failure_kind`): every text value is made
storable before it is buffered (:func:`~bloom_frontier.pipelines.records.storable`); a
locked SQLite file or a PostgreSQL server away or busy is waited for (above); a batch
with a row the database refuses (a constraint, a value its driver cannot encode) is
written again row by row, each refused row kept in ``refused_rows`` with its reason,
logged and counted (``store/refused/<reason>``), so it never holds the others; anything
else (a full disk, an I/O error, a read-only or corrupt file, the SQLite file deleted or
replaced: :meth:`Database.check_file`) raises :class:`StoreFailed`: the writer stops
flushing, tells :attr:`StoreWriter.on_failure` (the recorder stops the crawl), and the
pages waiting for a commit are never answered (their leases expire).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DataError, IntegrityError, OperationalError, StatementError
from twisted.internet.defer import Deferred, DeferredList, maybeDeferred, succeed
from twisted.python.failure import Failure

from bloom_frontier import defaults
from bloom_frontier.background import BackgroundThread, pause_off_loop
from bloom_frontier.pipelines.database import (
    Database,
    StoreFailed,
    make_engine,
    store_url_from,
)
from bloom_frontier.pipelines.reader import StoreReader, shortener_answer_of
from bloom_frontier.pipelines.records import (
    SEEN,
    CanonicalHint,
    Chain,
    ContentRecord,
    Hop,
    KeyAlias,
    PageRecord,
    ParamRule,
    ShortenerAnswer,
    UrlAlias,
    storable_row,
)
from bloom_frontier.pipelines.tables import (
    canonical_hints,
    chains,
    hops,
    key_aliases,
    match_features,
    pages,
    param_rules,
    record_id,
    refused_rows,
    shortener_answers,
    url_aliases,
)

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from scrapy.statscollectors import StatsCollector
    from sqlalchemy.sql.dml import Insert

logger = logging.getLogger(__name__)

#: Seconds the last flush (:meth:`StoreWriter.commit_all`) keeps retrying a database that
#: is away before it gives up, logging how many records it could not write.
DEFAULT_CLOSE_TIMEOUT = 300.0
#: A flush that hits a deadlock or a locked SQLite file is retried this many times.
FLUSH_ATTEMPTS = 5
#: Buffered rows: per table, per conflict key, the newest row.
Rows = dict[str, dict[tuple[Any, ...], dict[str, Any]]]

#: How a failed write is answered: tried again later (the database is away or busy), the
#: batch written row by row and the rows the database refuses set aside, or the crawl
#: stopped (:class:`StoreFailed`).
RETRY, REFUSED, FATAL = "retry", "refused", "fatal"
#: SQLite errors that pass: another process holds the file for a moment.
_SQLITE_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")
#: PostgreSQL error classes that pass (SQLSTATE prefixes): connection lost, transaction
#: rolled back (deadlock, serialization), server shutting down or starting, a statement
#: cancelled, too many connections, a lock not available.
_PG_PASSING = ("08", "40", "57", "53300", "55P03")


def failure_kind(error: BaseException) -> str:
    """:data:`RETRY`, :data:`REFUSED` or :data:`FATAL` for a write that raised ``error``.

    Refused: the database (or its driver) refuses the row's values (a constraint, a value
    it cannot encode). Retried: a locked SQLite file, a PostgreSQL server away or busy.
    Fatal: anything else, a full disk, an I/O error, a read-only file and a bug among them:
    waiting would hold the crawl's pages for nothing."""
    if isinstance(error, (IntegrityError, DataError)):
        return REFUSED
    cause = error.orig if isinstance(error, StatementError) else error
    if isinstance(error, OperationalError):
        if getattr(error, "connection_invalidated", False):
            return RETRY
        if hasattr(cause, "sqlite_errorname"):
            return RETRY if cause.sqlite_errorname.startswith(_SQLITE_BUSY) else FATAL
        state = getattr(cause, "sqlstate", None)
        return RETRY if state is None or state.startswith(_PG_PASSING) else FATAL
    if isinstance(cause, (ValueError, TypeError, OverflowError)):
        return REFUSED  # raised by the driver binding a value (UnicodeEncodeError, ...)
    return FATAL


def _cause(error: BaseException) -> BaseException:
    """The driver's exception inside SQLAlchemy's wrapper, if any."""
    orig = getattr(error, "orig", None)
    return orig if isinstance(orig, BaseException) else error


def _first_line(error: BaseException) -> str:
    return (str(error).strip() or type(error).__name__).splitlines()[0]


def _row_json(row: dict[str, Any]) -> str:
    """``row`` as JSON (ASCII), bytes as hex: what ``refused_rows`` keeps of it."""
    return json.dumps(row, sort_keys=True, default=lambda value: bytes(value).hex())


def _page_row(page: PageRecord) -> dict[str, Any]:
    """``page``'s row in ``pages`` (its content fingerprint columns aside)."""
    return {
        "id": record_id(page.fetch_url),
        "fetch_url": page.fetch_url,
        "final_url": page.final_url,
        "key": page.key,
        "status": page.status,
        "chain_id": page.chain_id,
        "flag": page.flag,
        "fetched_at": page.at,
    }


@dataclass(frozen=True)
class _Upsert:
    """How rows of one table are written: conflict target, the columns a newer row updates
    (none: keep the first row) and an optional condition for the update."""

    table: Table
    conflict: tuple[str, ...]
    update: tuple[str, ...] = ()
    update_when: Callable[[Any, Any], Any] | None = None


def _chain_advances(table: Table, excluded: Any) -> Any:
    """A chain row is replaced only by a more advanced state of the same chain: more hops,
    or as many hops with a real outcome where "seen" was recorded (a shared frontier hands
    the last target to another worker, whose report may arrive first)."""
    return (excluded.hop_count > table.c.hop_count) | (
        (excluded.hop_count == table.c.hop_count) & (table.c.outcome == SEEN)
    )


_UPSERTS = {
    "pages": _Upsert(
        pages,
        ("id",),
        ("final_url", "key", "status", "chain_id", "flag", "fetched_at"),
    ),
    "chains": _Upsert(
        chains,
        ("chain_id",),
        ("final_url", "outcome", "reason", "flag", "hop_count", "recorded_at"),
        _chain_advances,
    ),
    "hops": _Upsert(hops, ("chain_id", "position")),
    "hints": _Upsert(
        canonical_hints,
        ("id",),
        ("page_key", "canonical_url", "canonical_key", "valid", "reason", "seen_at"),
    ),
    "url_aliases": _Upsert(url_aliases, ("id",)),
    "key_aliases": _Upsert(key_aliases, ("id",)),
    # After "pages": a fingerprint computed off the reactor updates its page's row (and
    # carries the page's columns, so it lands whichever of the two is written first).
    "fingerprints": _Upsert(
        pages, ("id",), ("content_hash", "content_minhash", "content_norm", "content_kind")
    ),
    "match_features": _Upsert(
        match_features,
        ("id",),
        (
            "final_url",
            "title",
            "headings",
            "main_hash",
            "main_minhash",
            "main_length",
            "main_shingles",
            "outlinks",
            "recorded_at",
        ),
    ),
    "shortener_answers": _Upsert(shortener_answers, ("id",), ("status", "location", "answered_at")),
    "param_rules": _Upsert(
        param_rules,
        ("id",),
        ("state", "evidence_count", "evidence", "counter_example", "rules_version", "updated_at"),
    ),
}


#: A refused row, kept once (its id hashes its table and JSON).
_REFUSED = _Upsert(refused_rows, ("id",))


class Refused(Exception):
    """The database refused a row's values (the error it raised is the cause)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(_first_line(_cause(error)))
        self.error = error

    def row_of(self, kind: str, row: dict[str, Any]) -> dict[str, Any]:
        """The ``refused_rows`` row recording ``row`` of ``kind`` (a writer's table)."""
        cause = _cause(self.error)
        as_json = _row_json(row)
        return {
            "id": record_id(kind, as_json),
            "kind": kind,
            "reason": f"{type(cause).__name__}: {_first_line(cause)}"[:500],
            "row": as_json,
            "refused_at": time.time(),
        }


@cache
def _upsert_statement(dialect_name: str, spec: _Upsert) -> Insert:
    """The upsert of ``spec``'s table in ``dialect_name``, built once: building it (the
    ``excluded`` alias copies every column) cost more CPU than writing a page's rows, and a
    shared frontier writes them page by page."""
    # Imported here: the PostgreSQL dialect takes 0.06 s to import, which a SQLite store
    # (and the start of every crawl) does not need.
    if dialect_name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    statement = insert(spec.table)
    if not spec.update:
        return statement.on_conflict_do_nothing(index_elements=list(spec.conflict))
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=list(spec.conflict),
        set_={column: excluded[column] for column in spec.update},
        where=spec.update_when(spec.table, excluded) if spec.update_when else None,
    )


class StoreWriter:
    """The crawl's writes to one store (SQLite or PostgreSQL), buffered and upserted."""

    def __init__(
        self,
        database: Database,
        batch_size: int = defaults.STORE_BATCH_SIZE,
        flush_interval: float = defaults.STORE_FLUSH_INTERVAL,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        stats: StatsCollector | None = None,
    ) -> None:
        self.database = database
        #: Where refused rows are counted (``store/refused/<reason>``), if anywhere.
        self.stats = stats
        #: Reads of the same store (the crawl's start-up reads, stored shortener answers).
        self.reader = StoreReader(database)
        self.batch_size = max(1, batch_size)
        self.flush_interval = flush_interval
        self.close_timeout = close_timeout
        self._buffers: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {
            name: {} for name in _UPSERTS
        }
        self._buffered = 0
        self._last_flush = time.monotonic()
        self._retry_after = 0.0
        #: Flushes handed to :attr:`background` and not settled yet (their rows may come
        #: back to the buffer).
        self._flushing = 0
        #: Pages waiting for the next group commit (:meth:`commit_page`), and whether one
        #: is under way.
        self._page_waiters: list[Deferred[None]] = []
        self._committing_pages = False
        #: Records still being made that :meth:`close` waits for (:meth:`hold`).
        self._held: set[Deferred[Any]] = set()
        #: :meth:`close` has begun (records from then on are written at once), and has
        #: released the connections (a record after that releases them again once written).
        self._closing = False
        self._released = False
        #: The thread writes and reads run in while Twisted's loop runs (:attr:`_thread`).
        self.background: BackgroundThread | None = None
        #: Why the store cannot be written any more (None: it can); told once, on the loop,
        #: to :attr:`on_failure`.
        self.failure: StoreFailed | None = None
        self.on_failure: Callable[[StoreFailed], None] | None = None
        #: Transactions committed and the seconds they took, retries included (the
        #: workers' metrics).
        self.commits = 0
        self.commit_seconds = 0.0

    @classmethod
    def from_url(cls, url: str | None, **kwargs: Any) -> StoreWriter:
        """A writer of the store at ``url``, its schema brought up to date now."""
        return cls(Database.from_url(url), **kwargs)

    @classmethod
    def from_settings(
        cls, settings: BaseSettings, stats: StatsCollector | None = None
    ) -> StoreWriter:
        """A crawl's store: its schema brought up to date at its first write (the ``crawl``
        command's pre-start check did it already, before the loop started)."""
        return cls(
            Database(make_engine(store_url_from(settings)), schema_on_first_use=True),
            batch_size=settings.getint("STORE_BATCH_SIZE"),
            flush_interval=settings.getfloat("STORE_FLUSH_INTERVAL"),
            stats=stats,
        )

    @property
    def pending(self) -> int:
        """Records buffered, not written yet."""
        return self._buffered

    def _buffer(self, name: str, row: dict[str, Any]) -> None:
        """Keep ``row`` for the next flush, every text value made storable first
        (:func:`~bloom_frontier.pipelines.records.storable_row`); flush when due."""
        spec = _UPSERTS[name]
        row = storable_row(row)
        # One row per conflict key and batch: PostgreSQL refuses to upsert a row twice in
        # one statement, and the newest state is the one to keep anyway.
        self._buffers[name][tuple(row[column] for column in spec.conflict)] = row
        self._buffered += 1
        now = time.monotonic()
        # While the store closes (a fingerprint finished meanwhile) nothing else would flush
        # the row; once its connections are released, they are released again after it.
        due = (
            self._closing
            or self._buffered >= self.batch_size
            or now - self._last_flush >= self.flush_interval
        )
        if due and now >= self._retry_after and self.failure is None:
            if (background := self._thread) is not None:
                writing = self.flush_later()
                if self._released:
                    writing.addCallback(lambda _: background.run(self.database.dispose))
                return
            try:
                self.flush()
            except OperationalError as exc:
                self._flush_failed(exc)
            except StoreFailed as exc:
                self._failed(exc)
            if self._released:
                self.database.dispose()

    @property
    def buffered(self) -> int:
        """Records waiting for the next transaction."""
        return self._buffered

    @property
    def pages_waiting(self) -> int:
        """Pages waiting for their records' commit (:meth:`commit_page`)."""
        return len(self._page_waiters)

    def add_page(self, page: PageRecord) -> None:
        self._buffer("pages", _page_row(page))

    def add_chain(self, chain: Chain) -> None:
        if chain.outcome is None:
            raise ValueError(f"chain {chain.chain_id} has no outcome yet")
        for position, hop in enumerate(chain.hops):
            self._add_hop(chain.chain_id, position, hop)
        self._buffer(
            "chains",
            {
                "chain_id": chain.chain_id,
                "start_url": chain.start_url,
                "start_key": chain.start_key,
                "final_url": chain.final_url,
                "outcome": chain.outcome,
                "reason": chain.reason,
                "flag": chain.flag,
                "hop_count": len(chain.hops),
                "recorded_at": time.time(),
                "referrer": chain.referrer,
            },
        )

    def _add_hop(self, chain_id: str, position: int, hop: Hop) -> None:
        self._buffer(
            "hops",
            {
                "chain_id": chain_id,
                "position": position,
                "source_url": hop.source,
                "source_key": hop.source_key,
                "status": hop.status,
                "permanent": hop.permanent,
                "via": hop.via,
                "location": hop.location,
                "target_url": hop.target,
                "target_key": hop.target_key,
                "at": hop.at,
            },
        )

    def add_hints(self, hints: Sequence[CanonicalHint]) -> None:
        for hint in hints:
            self._buffer(
                "hints",
                {
                    "id": record_id(hint.page_url, hint.source, hint.href),
                    "page_url": hint.page_url,
                    "page_key": hint.page_key,
                    "source": hint.source,
                    "href": hint.href,
                    "canonical_url": hint.canonical_url,
                    "canonical_key": hint.canonical_key,
                    "valid": hint.valid,
                    "reason": hint.reason,
                    "seen_at": hint.at,
                },
            )

    def add_url_aliases(self, aliases: Sequence[UrlAlias]) -> None:
        for alias in aliases:
            self._buffer(
                "url_aliases",
                {
                    "id": record_id(alias.url, alias.rules_version),
                    "url": alias.url,
                    "key": alias.key,
                    "rules_version": alias.rules_version,
                    "source": alias.source,
                    "seen_at": alias.at,
                },
            )

    def add_key_alias(self, alias: KeyAlias) -> None:
        self._buffer(
            "key_aliases",
            {
                "id": record_id(alias.from_key, alias.to_key),
                "from_key": alias.from_key,
                "to_key": alias.to_key,
                "via": alias.via,
                "rules_version": alias.rules_version,
                "seen_at": alias.at,
            },
        )

    def add_fingerprint(self, page: PageRecord, content: ContentRecord) -> None:
        self._buffer(
            "fingerprints",
            {
                **_page_row(page),
                "content_hash": content.exact,
                "content_minhash": content.minhash,
                "content_norm": content.norm,
                "content_kind": content.kind,
            },
        )
        if content.features is not None:
            self._buffer(
                "match_features",
                {
                    "id": record_id(page.fetch_url),
                    "fetch_url": page.fetch_url,
                    "final_url": page.final_url,
                    **content.features.row(),
                    "recorded_at": page.at,
                },
            )

    def add_shortener_answer(self, answer: ShortenerAnswer) -> None:
        self._buffer(
            "shortener_answers",
            {
                "id": record_id(answer.short_url),
                "short_url": answer.short_url,
                "status": answer.status,
                "location": answer.location,
                "answered_at": answer.at,
            },
        )

    def shortener_answer(self, short_url: str) -> ShortenerAnswer | None:
        row = self._buffers["shortener_answers"].get((record_id(short_url),))
        return shortener_answer_of(row) if row else self.reader.shortener_answer(short_url)

    def shortener_answer_later(self, short_url: str) -> Deferred[ShortenerAnswer | None]:
        """:meth:`shortener_answer` read from the background thread, after the flushes
        handed over before it (so it sees them); None (logged) when the database is away."""
        row = self._buffers["shortener_answers"].get((record_id(short_url),))
        if row:
            return succeed(shortener_answer_of(row))
        if self._thread is None:
            reading = maybeDeferred(self.reader.shortener_answer, short_url)
        else:
            reading = self._thread.run(self.reader.shortener_answer, short_url)
        return reading.addErrback(self._no_shortener_answer, short_url)

    @staticmethod
    def _no_shortener_answer(failure: Failure, short_url: str) -> None:
        failure.trap(OperationalError)
        logger.warning("Record store unavailable, shortener link %s asked again", short_url)

    def add_param_rule(self, rule: ParamRule) -> None:
        self._buffer("param_rules", {"id": record_id(rule.scope, rule.param), **rule.row()})

    def _flush_failed(self, exc: Exception) -> None:
        # The database is away: keep every record and try again later, rather than failing
        # the response being processed (its page would be lost).
        self._retry_after = time.monotonic() + self.flush_interval
        logger.error(
            "Record store unavailable, %d records kept in memory until it is back: %s",
            self._buffered,
            exc,
        )

    def _failed(self, failure: StoreFailed) -> None:
        """The store cannot be written any more: stop flushing (the rows stay buffered,
        counted when it closes) and tell :attr:`on_failure`, once."""
        if self.failure is not None:
            return
        self.failure = failure
        if self.on_failure is not None:
            self.on_failure(failure)

    @property
    def _thread(self) -> BackgroundThread | None:
        """:attr:`background` while Twisted's loop runs (started then if the store has none),
        so blocking calls never run on it; None otherwise (a command, a test without a
        loop): the caller's thread waits."""
        from twisted.internet import reactor

        if not reactor.running:  # type: ignore[attr-defined]
            return None
        if self.background is None:
            self.background = BackgroundThread("record-store")
        return self.background

    def flush(self) -> None:
        """Write every buffered row in one transaction, retried on deadlocks and locked
        files (the upserts make a repeated attempt harmless). Raises ``OperationalError``
        when the database stays away, :class:`StoreFailed` when it cannot be written; the
        rows stay buffered then."""
        rows = self._take()
        try:
            self._write(rows)
        except BaseException:
            self._restore(rows)
            raise

    def flush_later(self) -> Deferred[None]:
        """Write every buffered row from the background thread (in order with earlier
        flushes); fires on the loop once they are committed, or kept for the next flush
        (logged) when the database stays away."""
        rows = self._take()
        if self._thread is None:
            return maybeDeferred(self._write, rows).addErrback(self._put_back, rows)
        self._flushing += 1
        writing = self._thread.run(self._write, rows).addErrback(self._put_back, rows)
        return writing.addBoth(self._flushed)

    def _flushed(self, result: object) -> object:
        self._flushing -= 1
        return result

    def _take(self) -> Rows:
        """The buffered rows, now no longer buffered."""
        self._last_flush = time.monotonic()
        rows, self._buffers = self._buffers, {name: {} for name in _UPSERTS}
        self._buffered = 0
        return rows

    def _restore(self, rows: Rows) -> None:
        """Buffer ``rows`` again, behind newer ones of the same key."""
        for name, table_rows in rows.items():
            for key, row in table_rows.items():
                if key not in self._buffers[name]:
                    self._buffers[name][key] = row
                    self._buffered += 1

    def _put_back(self, failure: Failure, rows: Rows) -> None:
        """A flush in the background failed: keep its rows for the next one (or for the
        count of those not written, when the store cannot be written)."""
        self._restore(rows)
        if failure.check(StoreFailed):
            self._failed(failure.value)
            return
        failure.trap(OperationalError)
        self._flush_failed(failure.value)

    def _write(self, rows: Rows) -> None:
        """Write ``rows`` in one transaction, retried on deadlocks and locked files (the
        upserts make a repeated attempt harmless); a batch with a row the database refuses
        is written row by row (:meth:`_write_row_by_row`). Raises ``OperationalError``
        while the database stays away, :class:`StoreFailed` when it cannot be written.
        Blocks: runs in the background thread during a crawl."""
        if not any(rows.values()):
            return
        started = time.monotonic()
        for attempt in range(1, FLUSH_ATTEMPTS + 1):
            try:
                self._transaction(lambda connection: self._upsert_all(connection, rows))
                self.commits += 1
                self.commit_seconds += time.monotonic() - started
                return
            except OperationalError as exc:
                if failure_kind(exc) != RETRY or attempt == FLUSH_ATTEMPTS:
                    raise
                logger.warning("Record store busy, retrying the flush (attempt %d)", attempt)
                pause_off_loop(0.05 * 2**attempt)
            except Refused:
                self._write_row_by_row(rows)
                return

    def _transaction(self, write: Callable[[Connection], None]) -> None:
        """``write`` in one transaction, the SQLite file checked before and after it (rows
        committed into a file deleted meanwhile are lost). Raises :class:`Refused` for
        values the database refuses, ``OperationalError`` for a database away or busy,
        :class:`StoreFailed` for any other fault."""
        self.database.check_file()
        try:
            with self.database.ready().begin() as connection:
                write(connection)
        except StoreFailed:
            raise
        except Exception as exc:
            kind = failure_kind(exc)
            if kind == REFUSED:
                raise Refused(exc) from exc
            if kind == FATAL:
                raise StoreFailed(
                    f"the record store cannot be written ({_first_line(_cause(exc))})"
                ) from exc
            raise
        self.database.check_file()

    def _upsert_all(self, connection: Connection, rows: Rows) -> None:
        for name, table_rows in rows.items():
            if table_rows:
                self._upsert(connection, _UPSERTS[name], table_rows)

    def _write_row_by_row(self, rows: Rows) -> None:
        """Write each row of ``rows`` in a transaction of its own; those the database
        refuses go to ``refused_rows`` (table, reason, the row as JSON), counted as
        ``store/refused/<reason>`` and logged, so one bad value never holds the others."""
        refused: list[dict[str, Any]] = []
        for name, table_rows in rows.items():
            for key in sorted(table_rows):
                row = {key: table_rows[key]}
                try:
                    self._transaction(
                        lambda connection, name=name, row=row: self._upsert(
                            connection, _UPSERTS[name], row
                        )
                    )
                except Refused as refusal:
                    refused.append(refusal.row_of(name, row[key]))
        if not refused:
            return
        try:
            self._transaction(
                lambda connection: connection.execute(
                    _upsert_statement(connection.dialect.name, _REFUSED), refused
                )
            )
        except Refused as refusal:
            raise StoreFailed(
                f"the record store refuses even the record of a refused row ({refusal})"
            ) from refusal
        # Counted from this thread: only the writer counts these stats.
        for row in refused:
            logger.error(
                "Record store refused a row of %s (%s); kept in refused_rows",
                row["kind"],
                row["reason"],
            )
            if self.stats is not None:
                self.stats.inc_value(f"store/refused/{row['reason'].partition(':')[0]}")

    def _upsert(
        self, connection: Connection, spec: _Upsert, rows: dict[tuple[Any, ...], dict[str, Any]]
    ) -> None:
        statement = _upsert_statement(connection.dialect.name, spec)
        # Sorted by key: concurrent workers then lock rows in the same order (no deadlock).
        connection.execute(statement, [rows[key] for key in sorted(rows)])

    def commit_all(self) -> Deferred[None]:
        """Write every buffered row, however long the database stays away (retried every
        ``flush_interval`` seconds, logged, for up to ``close_timeout`` seconds): what the
        crawl recorded last must outlive the process. In a crawl the writes run in the
        background thread, after the flushes handed over before (a failed one's rows are back
        in the buffer by then), and the Deferred fires on the loop once they are committed,
        or once given up on (logged, a line with the count: no traceback at the user; the
        rows are buffered again)."""
        return self._commit_buffered(self.close_timeout)

    def commit_page(self) -> Deferred[None]:
        """Write every buffered row (a page's records among them), as :meth:`commit_all`
        does, but for as long as the database stays away (retried every ``flush_interval``
        seconds, each attempt logged): fires only once they are committed. A shared crawl
        releases the page's lease after it, so a worker killed while the database is away
        fetches the page again rather than lose its records.

        A group commit: pages handled while a commit is under way share the next one, a
        single transaction for all of them (a page's own would wait behind that commit
        anyway, in the store's one thread)."""
        waiter: Deferred[None] = Deferred()
        if self.failure is not None:
            return waiter  # never fires: the page's lease expires, the page is fetched again
        self._page_waiters.append(waiter)
        if not self._committing_pages:
            self._commit_pages()
        return waiter

    def _commit_pages(self) -> None:
        """Commit what is buffered for the pages waiting now; then for those that came
        meanwhile, if any."""
        waiters, self._page_waiters = self._page_waiters, []
        self._committing_pages = True

        def committed(result: Failure | None) -> None:
            self._committing_pages = False
            if self.failure is not None:
                return  # the waiters never fire (see commit_page)
            for waiter in waiters:
                if isinstance(result, Failure):
                    waiter.errback(result)
                else:
                    waiter.callback(None)
            if self._page_waiters:
                self._commit_pages()

        self._commit_buffered(None).addBoth(committed)

    def _commit_buffered(self, timeout: float | None) -> Deferred[None]:
        """Commit what is buffered once the flushes handed over before are done (a failed
        one's rows are back in the buffer by then), tried for up to ``timeout`` seconds;
        nothing once the store cannot be written (its rows counted when it closes)."""
        if self.failure is not None:
            return succeed(None)
        if self._thread is None or not self._flushing:
            return self._commit(self._take(), timeout)
        earlier = self._thread.run(lambda: None)
        return earlier.addCallback(lambda _: self._commit(self._take(), timeout))

    def _commit(self, rows: Rows, timeout: float | None) -> Deferred[None]:
        if self._thread is None:
            writing = maybeDeferred(self._write_until_committed, rows, timeout)
        else:
            writing = self._thread.run(self._write_until_committed, rows, timeout)
        return writing.addErrback(self._given_up, rows)

    def _given_up(self, failure: Failure, rows: Rows) -> None:
        self._restore(rows)
        if failure.check(StoreFailed):
            self._failed(failure.value)
            return
        failure.trap(OperationalError)  # logged by _write_until_committed

    def _not_written(self, _: object = None) -> None:
        """Log how many records a store that cannot be written did not get."""
        if self.failure is not None and self._buffered:
            logger.error("Record store: %d records not written: %s", self._buffered, self.failure)

    def _write_until_committed(self, rows: Rows, timeout: float | None) -> None:
        """:meth:`_write`, tried again while the database stays away, up to ``timeout``
        seconds (None: until it is back). Blocks: runs in the background thread during a
        crawl."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self._write(rows)
                return
            except OperationalError as exc:
                count = sum(len(table_rows) for table_rows in rows.values())
                if deadline is not None and time.monotonic() + self.flush_interval > deadline:
                    logger.error("Record store unavailable, %d records not written: %s", count, exc)
                    raise
                logger.error(
                    "Record store unavailable, %d records wait to be written, retrying in "
                    "%.1f s: %s",
                    count,
                    self.flush_interval,
                    exc,
                )
                pause_off_loop(self.flush_interval)

    def hold(self, pending: Deferred[Any]) -> None:
        """Have :meth:`close` wait for ``pending`` before its last write: records still being
        made when the spider closes (a fingerprint in a thread), whose write after the
        connections were released would find the SQLite file's ``-shm`` gone and fail."""
        self._held.add(pending)
        pending.addBoth(self._release, pending)

    def _release(self, result: object, pending: Deferred[Any]) -> object:
        self._held.discard(pending)
        return result

    def close(self) -> Deferred[None] | None:
        """Write everything buffered (:meth:`commit_all`), once what it was told to
        :meth:`hold` for is done, then release connections. In a
        crawl, off Twisted's loop: the returned Deferred fires once done (``spider_closed``
        receivers may return one; Scrapy waits for it before the process exits). The thread
        stays, idle, for writes that come later (a fingerprint computed while the spider
        closes), in order; it ends with the process. Shutting it down here would wait on
        the loop for such a write."""
        self._closing = True
        background = self._thread
        if background is None:
            self.flush()
            self.database.dispose()
            self._released = True
            return None
        held: Deferred[Any] = DeferredList(list(self._held)) if self._held else succeed(None)
        closing = held.addCallback(lambda _: self.commit_all()).addCallback(self._not_written)
        return closing.addCallback(self._dispose, background)

    def _dispose(self, _: object, background: BackgroundThread) -> Deferred[None]:
        self._released = True
        return background.run(self.database.dispose)
