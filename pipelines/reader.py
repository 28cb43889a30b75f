"""Reading the record store back: the read models the commands use.

The commands (``redirects``, ``canonicals``, ``same-content``, ``audit-rules``,
``rebuild-filter``) and the crawl's own start-up reads (learned rules, stored shortener
answers) go through :class:`StoreReader`; nothing else runs a ``SELECT``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, func, select

from bloom_frontier.pipelines.database import Database
from bloom_frontier.pipelines.records import MatchFeatures, ParamRule, ShortenerAnswer
from bloom_frontier.pipelines.tables import (
    canonical_hints,
    chains,
    hops,
    key_aliases,
    match_features,
    pages,
    param_rules,
    record_id,
    shortener_answers,
    url_aliases,
)

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


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
    """A chain as read back, with its hops in order; ``referrer``: the page whose link
    started it (None for a start URL, a chain recorded before revision 0004, or no
    ``Referer`` sent)."""

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
    referrer: str | None = None


@dataclass(frozen=True)
class StoredDocument:
    """A fetched page as migration matching reads it: where it was asked for and answered,
    its status, content kind and exact content fingerprint, and its :class:`MatchFeatures`
    (None: recorded without, e.g. by a crawl before revision 0006 or for a page that is not
    HTML)."""

    fetch_url: str
    final_url: str
    status: int
    kind: str | None
    content_hash: str | None
    features: MatchFeatures | None


class StoreReader:
    """Reads of one store. Each call blocks on the database: in a crawl, call it off
    Twisted's loop (:meth:`bloom_frontier.pipelines.writer.StoreWriter.shortener_answer_later`)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    @classmethod
    def from_url(cls, url: str | None) -> StoreReader:
        return cls(Database.from_url(url))

    @classmethod
    def for_reading(cls, settings: BaseSettings) -> StoreReader:
        """The store a crawl wrote (``STORE_URL``); :class:`StoreMissing` if there is none."""
        return cls(Database.existing(settings))

    def close(self) -> None:
        self.database.dispose()

    def chains(self) -> list[StoredChain]:
        """Every chain with its hops in order, oldest first."""
        with self.database.ready().connect() as connection:
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
        with self.database.ready().connect() as connection:
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
        with self.database.ready().connect() as connection:
            return [row[0] for row in connection.execute(query)]

    def pages(self) -> Iterator[dict[str, Any]]:
        return self._rows(pages, pages.c.fetch_url)

    def key_aliases(self) -> Iterator[dict[str, Any]]:
        return self._rows(key_aliases, key_aliases.c.from_key)

    def fingerprinted_pages(self) -> Iterator[dict[str, Any]]:
        """Pages with content fingerprints, by fingerprint."""
        return self._rows(
            pages, pages.c.content_hash, pages.c.fetch_url, where=pages.c.content_hash.isnot(None)
        )

    def documents(self) -> Iterator[StoredDocument]:
        """Every fetched page with its match features, if recorded, by fetch URL."""
        query = (
            select(
                pages.c.fetch_url,
                pages.c.final_url,
                pages.c.status,
                pages.c.content_kind,
                pages.c.content_hash,
            )
            .add_columns(*(match_features.c[name] for name in _FEATURE_COLUMNS))
            .select_from(pages.outerjoin(match_features, match_features.c.id == pages.c.id))
            .order_by(pages.c.fetch_url)
        )
        with self.database.ready().connect() as connection:
            for row in connection.execute(query).mappings():
                features = None if row["main_hash"] is None else MatchFeatures.from_row(row)
                yield StoredDocument(
                    row["fetch_url"],
                    row["final_url"],
                    row["status"],
                    row["content_kind"],
                    row["content_hash"],
                    features,
                )

    def param_rules(self, state: str | None = None) -> list[ParamRule]:
        where = None if state is None else param_rules.c.state == state
        rows = self._rows(param_rules, param_rules.c.scope, param_rules.c.param, where=where)
        return [ParamRule.from_row(row) for row in rows]

    def shortener_answer(self, short_url: str) -> ShortenerAnswer | None:
        """The answer stored for ``short_url``."""
        query = select(shortener_answers).where(shortener_answers.c.id == record_id(short_url))
        with self.database.ready().connect() as connection:
            found = connection.execute(query).mappings().first()
        return shortener_answer_of(dict(found)) if found else None


#: The ``match_features`` columns :meth:`StoreReader.documents` reads.
_FEATURE_COLUMNS = (
    "title",
    "headings",
    "main_hash",
    "main_minhash",
    "main_length",
    "main_shingles",
    "outlinks",
)


def shortener_answer_of(row: dict[str, Any]) -> ShortenerAnswer:
    """The answer a ``shortener_answers`` row (stored or buffered) holds."""
    return ShortenerAnswer(row["short_url"], row["status"], row["location"], row["answered_at"])
