"""Where the record store lives: its URL, its engine, its schema brought up to date once.

``STORE_URL`` names a SQLite file by default or a PostgreSQL database (many workers then
write one store). The writer (:mod:`bloom_frontier.pipelines.writer`) and the reader
(:mod:`bloom_frontier.pipelines.reader`) share this.
"""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError

from bloom_frontier.extras import require_extra
from bloom_frontier.pipelines.schema import upgrade_schema

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: Where the store lives when ``STORE_URL`` is unset: a file in the working directory.
DEFAULT_STORE_URL = "sqlite:///crawl.sqlite"
#: Seconds to wait for a database server to accept a connection.
CONNECT_TIMEOUT = 5


class StoreMissing(RuntimeError):
    """The record store to read does not exist."""


class StoreFailed(RuntimeError):
    """The record store cannot take the crawl's writes and no retry can mend it (a full
    disk, an I/O error, a read-only or corrupt file, the SQLite file deleted or replaced):
    the crawl stops. The message is the line the user reads."""


def normalize_store_url(url: str | None) -> str:
    """SQLAlchemy URL for ``STORE_URL``: the SQLite default when unset, ``postgresql://``
    (and ``postgres://``) mapped to the psycopg 3 driver (the ``postgres`` extra)."""
    if not url:
        return DEFAULT_STORE_URL
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


#: How a STORE_URL is written, for the messages that refuse one.
URL_FORM = (
    "sqlite:///path/crawl.sqlite or postgresql://host:port/db (a user and password go "
    "before the host as user:password@)"
)


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a ``STORE_URL`` (ending with how one is written), or
    None. Never quotes the user or password part."""
    try:
        parsed = make_url(normalize_store_url(url))
    except ArgumentError:
        return f"is not a database URL: use {URL_FORM}"
    except ValueError:  # SQLAlchemy's int() of the port
        # SQLAlchemy takes everything up to the last "@" as user and password ("/" too).
        host = url.partition("://")[2].split("?", 1)[0].rpartition("@")[2].split("/", 1)[0]
        if host.startswith("[") and "]" not in host:
            return f"has an IPv6 address without its closing ']' ({host!r}): use {URL_FORM}"
        port = host.rpartition("]")[2].rpartition(":")[2]
        return f"has a port that is not a number from 1 to 65535 ({port!r}): use {URL_FORM}"
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        return f"has port {parsed.port}, not one from 1 to 65535: use {URL_FORM}"
    return None


def store_url_from(settings: BaseSettings) -> str:
    return normalize_store_url(settings.get("STORE_URL"))


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite files get WAL and a busy timeout so that several
    processes (workers, a command reading during a crawl) can share one file. Raises
    :class:`~bloom_frontier.extras.MissingExtra` for a PostgreSQL store without psycopg."""
    url = normalize_store_url(url)
    parsed = make_url(url)
    if parsed.get_driver_name() == "psycopg":
        require_extra("psycopg", "postgres", "a PostgreSQL record store (STORE_URL)")
    if parsed.get_backend_name() != "sqlite":
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


def _identity(path: str) -> tuple[int, int, int] | None:
    """The file at ``path`` as (device, inode, size); None when there is none."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino, stat.st_size


class Database:
    """A store's engine, whose schema is brought up to date (:func:`upgrade_schema`) once,
    before the first statement: at once, or with ``schema_on_first_use`` at the first write
    (a crawl's store is built on Twisted's loop; its first write runs in its own thread).

    A SQLite file is watched (:meth:`check_file`): SQLite itself would go on writing into a
    deleted file, or into a new empty one, and dies of ``SIGBUS`` on a truncated ``-shm``."""

    def __init__(self, engine: Engine, *, schema_on_first_use: bool = False) -> None:
        self.engine = engine
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        url = engine.url
        database = url.database if url.get_backend_name() == "sqlite" else None
        #: The SQLite file (None: a server, or an in-memory database).
        self.path = os.path.abspath(database) if database and database != ":memory:" else None
        #: The file and its ``-shm`` (device, inode, largest size seen) once opened.
        self._opened: tuple[tuple[int, int, int] | None, tuple[int, int, int] | None] = (
            None,
            None,
        )
        if not schema_on_first_use:
            self.ready()

    @classmethod
    def from_url(cls, url: str | None, *, schema_on_first_use: bool = False) -> Database:
        return cls(make_engine(normalize_store_url(url)), schema_on_first_use=schema_on_first_use)

    @classmethod
    def existing(cls, settings: BaseSettings) -> Database:
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

    def ready(self) -> Engine:
        """The engine, once the schema is up to date. Blocks: off Twisted's loop in a crawl."""
        if not self._schema_ready:
            with self._schema_lock:
                if not self._schema_ready:
                    upgrade_schema(self.engine)
                    if self.path is not None:
                        self._opened = (_identity(self.path), _identity(self.path + "-shm"))
                    self._schema_ready = True
        return self.engine

    def check_file(self) -> None:
        """Raise :class:`StoreFailed` if the SQLite file opened was deleted or replaced, or
        its ``-shm`` (which SQLite maps into memory) removed, replaced or truncated since:
        SQLite would write into a file nobody reads again, or die of ``SIGBUS`` touching
        the mapping. Checked around every write (a ``-shm`` truncated between the check and
        SQLite's next access still kills the process: the check narrows that window, it
        cannot close it). Nothing for PostgreSQL."""
        opened, shm = self._opened
        if self.path is None or opened is None:
            return
        now = _identity(self.path)
        if now is None:
            raise StoreFailed(f"the record store file {self.path} was deleted during the crawl")
        if now[:2] != opened[:2]:
            raise StoreFailed(
                f"the record store file {self.path} was replaced by another file during the crawl"
            )
        now_shm = _identity(self.path + "-shm")
        if shm is not None and (now_shm is None or now_shm[:2] != shm[:2] or now_shm[2] < shm[2]):
            if now_shm is not None and now_shm[:2] == shm[:2]:
                # Back to its size (zeros: SQLite rebuilds the index from the WAL), so that
                # closing the connections, which touches the mapping, does not fault.
                with suppress(OSError):
                    os.truncate(self.path + "-shm", shm[2])
            raise StoreFailed(
                f"the record store's shared-memory file {self.path}-shm was removed, replaced "
                "or truncated during the crawl (SQLite would crash on it)"
            )
        if now_shm is not None and (shm is None or now_shm[2] > shm[2]):
            self._opened = (opened, now_shm)

    def dispose(self) -> None:
        """Release the engine's connections. SQLite removes the ``-shm`` when its last
        connection closes, so the one watched is forgotten: a write after this (a record
        made while the crawl closes) opens the file again and watches the new ``-shm``
        (:meth:`check_file`), instead of taking SQLite's own clean-up for a fault."""
        self.engine.dispose()
        self._opened = (self._opened[0], None)
