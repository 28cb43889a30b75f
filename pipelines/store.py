"""The record store: pages, redirect chains and hops, canonical hints and URL aliases.

SQLAlchemy Core, one schema, two engines: a SQLite file by default, PostgreSQL when
``STORE_URL`` says so (many workers then write one store). Writes are buffered and flushed in
one transaction every ``STORE_BATCH_SIZE`` records, every ``STORE_FLUSH_INTERVAL`` seconds (at
the next write) and when the spider closes. Every write is an idempotent upsert keyed on a hash
of the record's natural key, so a batch written twice (a retried flush, two workers recording
the same page) leaves one row. While the database is unreachable, records stay buffered and
the flush is retried every ``STORE_FLUSH_INTERVAL`` seconds; the crawl goes on.

Writes run in the store's background thread, never on Twisted's loop, one transaction per
batch: about 17,000 records/s into SQLite and 9,000/s into a local PostgreSQL, against the 3-5
records a fetched page produces. The last flush, when the spider closes, is retried while the
database stays away (a locked file, a restarting server), up to ``DEFAULT_CLOSE_TIMEOUT``
seconds, and Scrapy waits for it: the process exits once every record is written (or, past
that, with an error saying how many were not). On a shared frontier a page's records are
committed before its lease is released (:meth:`SqlRecordStore.commit_page`; pages handled
while one commit is under way share the next, a group commit): while the database stays
away, those pages wait, their leases held, and are released once it is back;
a worker killed meanwhile loses nothing (the pages are fetched again).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import OperationalError
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.python.failure import Failure

from bloom_frontier.background import BackgroundThread, pause_off_loop
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
)
from bloom_frontier.pipelines.schema import upgrade_schema

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings
    from sqlalchemy.sql.dml import Insert

logger = logging.getLogger(__name__)

#: Where the store lives when ``STORE_URL`` is unset: a file in the working directory.
DEFAULT_STORE_URL = "sqlite:///crawl.sqlite"
DEFAULT_BATCH_SIZE = 500
DEFAULT_FLUSH_INTERVAL = 5.0
#: Seconds the last flush (:meth:`SqlRecordStore.commit_all`) keeps retrying a database that
#: is away before it gives up, logging how many records it could not write.
DEFAULT_CLOSE_TIMEOUT = 300.0
#: A flush that hits a deadlock or a locked SQLite file is retried this many times.
FLUSH_ATTEMPTS = 5
#: Seconds to wait for a database server to accept a connection.
CONNECT_TIMEOUT = 5
#: Buffered rows: per table, per conflict key, the newest row.
Rows = dict[str, dict[tuple[Any, ...], dict[str, Any]]]
ID_LENGTH = 32

metadata = MetaData()


class StoreMissing(RuntimeError):
    """The record store to read does not exist."""


def _id_column() -> Column[str]:
    return Column("id", String(ID_LENGTH), primary_key=True)


pages = Table(
    "pages",
    metadata,
    _id_column(),  # hash of fetch_url
    Column("fetch_url", Text, nullable=False),
    Column("final_url", Text, nullable=False),
    Column("key", Text),
    Column("status", Integer, nullable=False),
    Column("chain_id", String(ID_LENGTH)),
    Column("flag", Text),
    Column("fetched_at", Float, nullable=False),
    # Content fingerprints (bloom_frontier.content): revision 0002_content_fingerprints.
    Column("content_hash", String(32)),
    Column("content_minhash", LargeBinary),
    Column("content_norm", String(8)),
    Column("content_kind", String(16)),
    Index("ix_pages_content_hash", "content_hash"),
)

chains = Table(
    "redirect_chains",
    metadata,
    Column("chain_id", String(ID_LENGTH), primary_key=True),
    Column("start_url", Text, nullable=False),
    Column("start_key", Text),
    Column("final_url", Text),
    Column("outcome", String(16), nullable=False),
    Column("reason", Text),
    Column("flag", Text),
    Column("hop_count", Integer, nullable=False),
    Column("recorded_at", Float, nullable=False),
)

hops = Table(
    "redirect_hops",
    metadata,
    Column("chain_id", String(ID_LENGTH), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("source_url", Text, nullable=False),
    Column("source_key", Text),
    Column("status", Integer, nullable=False),
    Column("permanent", Boolean, nullable=False),
    Column("via", String(16), nullable=False),
    Column("location", Text, nullable=False),
    Column("target_url", Text),
    Column("target_key", Text),
    Column("at", Float, nullable=False),
)

canonical_hints = Table(
    "canonical_hints",
    metadata,
    _id_column(),  # hash of page_url, source, href
    Column("page_url", Text, nullable=False),
    Column("page_key", Text),
    Column("source", String(16), nullable=False),
    Column("href", Text, nullable=False),
    Column("canonical_url", Text),
    Column("canonical_key", Text),
    Column("valid", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    Column("seen_at", Float, nullable=False),
)

url_aliases = Table(
    "url_aliases",
    metadata,
    _id_column(),  # hash of url, rules_version
    Column("url", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("rules_version", String(32), nullable=False),
    Column("source", String(16), nullable=False),
    Column("seen_at", Float, nullable=False),
)

key_aliases = Table(
    "key_aliases",
    metadata,
    _id_column(),  # hash of from_key, to_key
    Column("from_key", Text, nullable=False),
    Column("to_key", Text, nullable=False),
    Column("via", String(16), nullable=False),
    Column("rules_version", String(32), nullable=False),
    Column("seen_at", Float, nullable=False),
)

#: Parameter drop rules learned from content (bloom_frontier.learning), with their evidence (JSON).
param_rules = Table(
    "param_rules",
    metadata,
    _id_column(),  # hash of scope, param
    Column("scope", Text, nullable=False),
    Column("param", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("evidence_count", Integer, nullable=False),
    Column("evidence", Text, nullable=False),
    Column("counter_example", Text),
    Column("rules_version", String(32)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

#: Shortener answers (bloom_frontier.middlewares.shorteners): where a short link pointed, and when
#: that was
#: answered (revision 0003_shortener_answers).
shortener_answers = Table(
    "shortener_answers",
    metadata,
    _id_column(),  # hash of short_url
    Column("short_url", Text, nullable=False),
    Column("status", Integer, nullable=False),
    Column("location", Text),
    Column("answered_at", Float, nullable=False),
)


def _shortener_answer(row: dict[str, Any]) -> ShortenerAnswer:
    return ShortenerAnswer(row["short_url"], row["status"], row["location"], row["answered_at"])


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


def record_id(*parts: str | None) -> str:
    """Stable primary key for a natural key of (possibly very long) URLs."""
    text = "\x1f".join(part or "" for part in parts)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:ID_LENGTH]


def normalize_store_url(url: str | None) -> str:
    """SQLAlchemy URL for ``STORE_URL``: the SQLite default when unset, ``postgresql://``
    (and ``postgres://``) mapped to the psycopg 3 driver the project installs."""
    if not url:
        return DEFAULT_STORE_URL
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def store_url_from(settings: BaseSettings) -> str:
    return normalize_store_url(settings.get("STORE_URL"))


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite files get WAL and a busy timeout so that several
    processes (workers, a command reading during a crawl) can share one file."""
    url = normalize_store_url(url)
    if make_url(url).get_backend_name() != "sqlite":
        # A server that does not answer is reported in seconds (libpq's connect_timeout).
        return create_engine(
            url, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT}
        )
    engine = create_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine


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
    "shortener_answers": _Upsert(shortener_answers, ("id",), ("status", "location", "answered_at")),
    "param_rules": _Upsert(
        param_rules,
        ("id",),
        ("state", "evidence_count", "evidence", "counter_example", "rules_version", "updated_at"),
    ),
}


@cache
def _upsert_statement(dialect_name: str, spec: _Upsert) -> Insert:
    """The upsert of ``spec``'s table in ``dialect_name``, built once: building it (the
    ``excluded`` alias copies every column) cost more CPU than writing a page's rows, and a
    shared frontier writes them page by page."""
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    statement = dialect.insert(spec.table)
    if not spec.update:
        return statement.on_conflict_do_nothing(index_elements=list(spec.conflict))
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=list(spec.conflict),
        set_={column: excluded[column] for column in spec.update},
        where=spec.update_when(spec.table, excluded) if spec.update_when else None,
    )


@dataclass(frozen=True)
class StoredHop:
    """A hop as read back, with its chain's outcome."""

    chain_id: str
    position: int
    source_url: str
    source_key: str | None
    status: int
    permanent: bool
    via: str
    location: str
    target_url: str | None
    target_key: str | None
    at: float


@dataclass(frozen=True)
class StoredChain:
    chain_id: str
    start_url: str
    start_key: str | None
    final_url: str | None
    outcome: str
    reason: str | None
    flag: str | None
    hop_count: int
    recorded_at: float
    hops: tuple[StoredHop, ...] = field(default=())


class RecordStore(Protocol):
    """Where the crawl's records go, and where the commands read them back."""

    def add_page(self, page: PageRecord) -> None: ...

    def add_chain(self, chain: Chain) -> None:
        """Record a finished chain (with its hops) or a newer state of one."""
        ...

    def add_hints(self, hints: Sequence[CanonicalHint]) -> None: ...

    def add_url_aliases(self, aliases: Sequence[UrlAlias]) -> None: ...

    def add_key_alias(self, alias: KeyAlias) -> None: ...

    def add_fingerprint(self, page: PageRecord, content: ContentRecord) -> None:
        """Attach content fingerprints to ``page``'s row."""
        ...

    def add_param_rule(self, rule: ParamRule) -> None:
        """Record a learned parameter rule, or a newer state of one."""
        ...

    def add_shortener_answer(self, answer: ShortenerAnswer) -> None:
        """Record (or refresh) where a short link pointed."""
        ...

    def shortener_answer(self, short_url: str) -> ShortenerAnswer | None:
        """The newest answer recorded for ``short_url`` (buffered ones included)."""
        ...

    def shortener_answer_later(self, short_url: str) -> Deferred[ShortenerAnswer | None]:
        """:meth:`shortener_answer`, read off Twisted's loop."""
        ...

    def flush(self) -> None:
        """Write everything buffered."""
        ...

    def commit_all(self) -> Deferred[None]:
        """Write everything buffered, retried while the database is away; fires once
        committed."""
        ...

    def close(self) -> Deferred[None] | None:
        """Flush and release connections; during a crawl off Twisted's loop, returning the
        Deferred that fires once done."""
        ...

    def chains(self) -> list[StoredChain]:
        """Every chain with its hops in order, oldest first."""
        ...

    def hints(self) -> Iterator[dict[str, Any]]: ...

    def url_aliases(self, rules_version: str | None = None) -> Iterator[dict[str, Any]]: ...

    def rules_versions(self) -> list[str]: ...

    def pages(self) -> Iterator[dict[str, Any]]: ...

    def key_aliases(self) -> Iterator[dict[str, Any]]: ...

    def fingerprinted_pages(self) -> Iterator[dict[str, Any]]:
        """Pages with content fingerprints, by fingerprint."""
        ...

    def param_rules(self, state: str | None = None) -> list[ParamRule]: ...


class SqlRecordStore:
    """:class:`RecordStore` on SQLAlchemy Core (SQLite or PostgreSQL)."""

    def __init__(
        self,
        engine: Engine,
        batch_size: int = DEFAULT_BATCH_SIZE,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
        *,
        schema_on_first_use: bool = False,
    ) -> None:
        self.engine = engine
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
        #: The thread writes and reads run in while Twisted's loop runs (:attr:`_thread`).
        self.background: BackgroundThread | None = None
        #: Whether the schema is known to be up to date (:meth:`_ready`).
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        if not schema_on_first_use:
            self._ready()

    def _ready(self) -> Engine:
        """The engine, once its database's schema is up to date (:func:`upgrade_schema`,
        once per store). A crawl's store (``schema_on_first_use``) gets there at its first
        write, in its own thread: the crawl builds it on Twisted's loop."""
        if not self._schema_ready:
            with self._schema_lock:
                if not self._schema_ready:
                    upgrade_schema(self.engine)
                    self._schema_ready = True
        return self.engine

    @classmethod
    def from_url(cls, url: str | None, **kwargs: Any) -> SqlRecordStore:
        return cls(make_engine(normalize_store_url(url)), **kwargs)

    @classmethod
    def for_reading(cls, settings: BaseSettings) -> SqlRecordStore:
        """The store a crawl wrote (``STORE_URL``); a missing SQLite file is an error, not
        a new empty store."""
        url = store_url_from(settings)
        parsed = make_url(url)
        database = parsed.database if parsed.get_backend_name() == "sqlite" else None
        if database and database != ":memory:" and not Path(database).exists():
            raise StoreMissing(
                f"no record store at {database}: run a crawl first, or set STORE_URL"
            )
        return cls(make_engine(url))

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SqlRecordStore:
        """A crawl's store: its schema brought up to date at its first write (the ``crawl``
        command's pre-start check did it already, before the loop started)."""
        return cls(
            make_engine(store_url_from(settings)),
            batch_size=settings.getint("STORE_BATCH_SIZE", DEFAULT_BATCH_SIZE),
            flush_interval=settings.getfloat("STORE_FLUSH_INTERVAL", DEFAULT_FLUSH_INTERVAL),
            schema_on_first_use=True,
        )

    # --- writing -------------------------------------------------------------------------

    def _buffer(self, name: str, row: dict[str, Any]) -> None:
        spec = _UPSERTS[name]
        # One row per conflict key and batch: PostgreSQL refuses to upsert a row twice in
        # one statement, and the newest state is the one to keep anyway.
        self._buffers[name][tuple(row[column] for column in spec.conflict)] = row
        self._buffered += 1
        now = time.monotonic()
        due = self._buffered >= self.batch_size or now - self._last_flush >= self.flush_interval
        if due and now >= self._retry_after:
            if self._thread is not None:
                self.flush_later()
                return
            try:
                self.flush()
            except OperationalError as exc:
                self._flush_failed(exc)

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
        return _shortener_answer(row) if row else self._stored_shortener_answer(short_url)

    def shortener_answer_later(self, short_url: str) -> Deferred[ShortenerAnswer | None]:
        """:meth:`shortener_answer` read from the background thread, after the flushes
        handed over before it (so it sees them); None (logged) when the database is away."""
        row = self._buffers["shortener_answers"].get((record_id(short_url),))
        if row:
            return succeed(_shortener_answer(row))
        if self._thread is None:
            reading = maybeDeferred(self._stored_shortener_answer, short_url)
        else:
            reading = self._thread.run(self._stored_shortener_answer, short_url)
        return reading.addErrback(self._no_shortener_answer, short_url)

    def _stored_shortener_answer(self, short_url: str) -> ShortenerAnswer | None:
        """The answer written for ``short_url``. Blocks: in a crawl, runs in the background
        thread (:meth:`shortener_answer_later`)."""
        query = select(shortener_answers).where(shortener_answers.c.id == record_id(short_url))
        with self._ready().connect() as connection:
            found = connection.execute(query).mappings().first()
        return _shortener_answer(dict(found)) if found else None

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
        when the database stays away; the rows stay buffered then."""
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
        """A flush in the background failed for good: keep its rows for the next one."""
        self._restore(rows)
        failure.trap(OperationalError)
        self._flush_failed(failure.value)

    def _write(self, rows: Rows) -> None:
        """Write ``rows`` in one transaction, retried on deadlocks and locked files (the
        upserts make a repeated attempt harmless). Blocks: runs in the background thread
        during a crawl."""
        if not any(rows.values()):
            return
        for attempt in range(1, FLUSH_ATTEMPTS + 1):
            try:
                with self._ready().begin() as connection:
                    for name, table_rows in rows.items():
                        if table_rows:
                            self._upsert(connection, _UPSERTS[name], table_rows)
                return
            except OperationalError:
                if attempt == FLUSH_ATTEMPTS:
                    raise
                logger.warning("Record store busy, retrying the flush (attempt %d)", attempt)
                pause_off_loop(0.05 * 2**attempt)

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
        one's rows are back in the buffer by then), tried for up to ``timeout`` seconds."""
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
        failure.trap(OperationalError)  # logged by _write_until_committed

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

    def close(self) -> Deferred[None] | None:
        """Write everything buffered (:meth:`commit_all`), then release connections. In a
        crawl, off Twisted's loop: the returned Deferred fires once done (``spider_closed``
        receivers may return one; Scrapy waits for it before the process exits). The thread
        stays, idle, for writes that come later (a fingerprint computed while the spider
        closes), in order; it ends with the process. Shutting it down here would wait on
        the loop for such a write."""
        background = self._thread
        if background is None:
            self.flush()
            self.engine.dispose()
            return None
        return self.commit_all().addCallback(lambda _: background.run(self.engine.dispose))

    # --- reading -------------------------------------------------------------------------

    def chains(self) -> list[StoredChain]:
        with self._ready().connect() as connection:
            hop_rows: dict[str, list[StoredHop]] = {}
            for row in connection.execute(
                select(hops).order_by(hops.c.chain_id, hops.c.position)
            ).mappings():
                hop_rows.setdefault(row["chain_id"], []).append(StoredHop(**row))
            result = []
            for row in connection.execute(
                select(chains).order_by(chains.c.recorded_at, chains.c.chain_id)
            ).mappings():
                # Hops beyond hop_count belong to no recorded state of the chain yet.
                chain_hops = tuple(hop_rows.get(row["chain_id"], ())[: row["hop_count"]])
                result.append(StoredChain(**row, hops=chain_hops))
        return result

    def _rows(self, table: Table, *order: Any, where: Any = None) -> Iterator[dict[str, Any]]:
        query = select(table).order_by(*order)
        if where is not None:
            query = query.where(where)
        with self._ready().connect() as connection:
            for row in connection.execute(query).mappings():
                yield dict(row)

    def hints(self) -> Iterator[dict[str, Any]]:
        return self._rows(canonical_hints, canonical_hints.c.page_url, canonical_hints.c.source)

    def url_aliases(self, rules_version: str | None = None) -> Iterator[dict[str, Any]]:
        where = None if rules_version is None else url_aliases.c.rules_version == rules_version
        return self._rows(url_aliases, url_aliases.c.url, where=where)

    def rules_versions(self) -> list[str]:
        """Rule versions present among the stored aliases, newest recorded last."""
        query = (
            select(url_aliases.c.rules_version)
            .group_by(url_aliases.c.rules_version)
            .order_by(func.max(url_aliases.c.seen_at))
        )
        with self._ready().connect() as connection:
            return [row[0] for row in connection.execute(query)]

    def pages(self) -> Iterator[dict[str, Any]]:
        return self._rows(pages, pages.c.fetch_url)

    def key_aliases(self) -> Iterator[dict[str, Any]]:
        return self._rows(key_aliases, key_aliases.c.from_key)

    def fingerprinted_pages(self) -> Iterator[dict[str, Any]]:
        return self._rows(
            pages, pages.c.content_hash, pages.c.fetch_url, where=pages.c.content_hash.isnot(None)
        )

    def param_rules(self, state: str | None = None) -> list[ParamRule]:
        where = None if state is None else param_rules.c.state == state
        rows = self._rows(param_rules, param_rules.c.scope, param_rules.c.param, where=where)
        return [ParamRule.from_row(row) for row in rows]
