"""The records the crawl keeps: redirect chains and hops, fetched pages, canonical hints, aliases.

Plain frozen dataclasses. A chain in progress travels in ``request.meta[REDIRECT_CHAIN_META]`` as
JSON-safe data (the Redis frontier serializes meta as JSON), so :class:`Chain` converts to and
from plain dicts and lists; every other record only ever goes to the store.
"""

from __future__ import annotations

import csv
import json
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, TextIO

from bloom_frontier.meta import REDIRECT_CHAIN_META

if TYPE_CHECKING:
    from scrapy import Request

#: Redirect statuses that announce a permanent move.
PERMANENT_STATUSES = frozenset({301, 308})

# How a redirect was announced.
VIA_LOCATION = "location"
VIA_REFRESH_HEADER = "refresh-header"
VIA_META_REFRESH = "meta-refresh"

# How a chain ended.
#: The last target was downloaded (any HTTP status that is not a followed redirect).
FETCHED = "fetched"
#: The last target was already known to the frontier, so it was not fetched again; the
#: redirect map resolves it through the chain that did fetch it. With a shared frontier it
#: may also have been queued: the worker fetching it then completes this chain.
SEEN = "seen"
#: A target had the dedupe key of an earlier URL of the chain.
LOOP = "loop"
#: The chain reached the hop cap (``REDIRECT_MAX_HOPS``); the last target was not fetched.
TOO_MANY_HOPS = "too-many-hops"
#: A target (or the first URL) is a private, loopback, link-local or metadata address.
BLOCKED = "blocked"
#: The target could not be followed (junk ``Location``, invalid URL, download error).
ERROR = "error"
#: A shortener link's target is not on the crawl's hosts: recorded, not fetched.
OFFSITE = "offsite"
OUTCOMES = (FETCHED, SEEN, LOOP, TOO_MANY_HOPS, BLOCKED, ERROR, OFFSITE)


#: What neither SQLite's nor PostgreSQL's driver can store in a text column: lone surrogates
#: (the bytes of a header decoded with ``surrogateescape`` that were not UTF-8) and NUL.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _percent_encoded(match: re.Match[str]) -> str:
    """``%XX`` for each byte the unstorable character stands for: a surrogate-escaped byte
    (U+DC80-U+DCFF) is that byte again; any other lone surrogate, its UTF-8 form."""
    char = match.group()
    raw = char.encode(
        "utf-8", "surrogateescape" if "\udc80" <= char <= "\udcff" else "surrogatepass"
    )
    return "".join(f"%{byte:02X}" for byte in raw)


def storable(value: str) -> str:
    """``value`` as every store can keep it: each byte a header held that was not UTF-8
    (decoded with ``surrogateescape``, as redirects decode ``Location``) percent-encoded,
    NUL too; anything else unchanged.

    Lossless for a URL: ``%FF`` is how RFC 3986 writes the byte 0xFF, what a browser
    sends for it, and ``urllib.parse.unquote_to_bytes`` gives the byte back.

    >>> storable("https://e.org/caf\udce9?a=\x00")
    'https://e.org/caf%E9?a=%00'
    """
    if _UNSTORABLE.search(value) is None:
        return value
    return _UNSTORABLE.sub(_percent_encoded, value)


def _unstorable(value: object) -> bool:
    """True if ``value`` is text :func:`storable` changes (ASCII without NUL, nearly every
    URL, is told apart without a search)."""
    return (
        isinstance(value, str)
        and not (value.isascii() and "\x00" not in value)
        and _UNSTORABLE.search(value) is not None
    )


def storable_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each text value :func:`storable` (the same dict when none needs it, the
    common case: the writer calls this for every record)."""
    if not any(_unstorable(value) for value in row.values()):
        return row
    return {column: storable(v) if isinstance(v, str) else v for column, v in row.items()}


def rules_version_of(key: str) -> str:
    """The rule version a dedupe key was made under (keys read ``<version>|...``)."""
    return key.partition("|")[0]


def now() -> float:
    """Wall-clock time as stored: seconds since the epoch."""
    return time.time()


@dataclass(frozen=True)
class Hop:
    """One redirect: ``source`` answered ``status`` pointing at ``location`` (as sent), which
    resolved against ``source`` gives ``target`` (None when it cannot be followed at all).
    Both URLs come with their dedupe keys (None: the URL has none)."""

    source: str
    source_key: str | None
    status: int
    location: str
    target: str | None
    target_key: str | None
    via: str = VIA_LOCATION
    at: float = field(default_factory=now)

    @property
    def permanent(self) -> bool:
        return self.status in PERMANENT_STATUSES


@dataclass(frozen=True)
class Chain:
    """The redirects one fetch went through, in order, and how it ended.

    ``keys`` holds the dedupe key of every URL of the chain (start first) for loop detection;
    ``outcome`` stays None while the chain is in flight; ``referrer`` is the page whose link
    started it (None for a start URL, or when no ``Referer`` was sent).
    """

    chain_id: str
    start_url: str
    start_key: str | None
    hops: tuple[Hop, ...] = ()
    keys: tuple[str, ...] = ()
    outcome: str | None = None
    final_url: str | None = None
    reason: str | None = None
    flag: str | None = None
    referrer: str | None = None

    @classmethod
    def begin(cls, request: Request, key: str | None) -> Chain:
        """A new chain for a fetch of ``request`` (dedupe key ``key``), with the page whose
        link it came from: its ``Referer``, which Scrapy's ``RefererMiddleware`` sets on the
        requests a page yields, as ``REFERRER_POLICY`` allows."""
        referrer = request.headers.get("Referer")
        return cls(
            uuid.uuid4().hex,
            request.url,
            key,
            keys=(key,) if key else (),
            referrer=referrer.decode("utf-8", "replace") if referrer else None,
        )

    @property
    def urls(self) -> tuple[str, ...]:
        """Every URL requested so far: the start and each followed target."""
        return (self.start_url, *(hop.target for hop in self.hops if hop.target))

    def add(self, hop: Hop) -> Chain:
        keys = self.keys if hop.target_key is None else (*self.keys, hop.target_key)
        return replace(self, hops=(*self.hops, hop), keys=keys)

    def finish(
        self,
        outcome: str,
        final_url: str | None,
        reason: str | None = None,
        flag: str | None = None,
    ) -> Chain:
        return replace(self, outcome=outcome, final_url=final_url, reason=reason, flag=flag)

    def to_meta(self) -> dict[str, Any]:
        """JSON-safe form for ``request.meta``."""
        data = asdict(self)
        data["hops"] = [asdict(hop) for hop in self.hops]
        data["keys"] = list(self.keys)
        return data

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Chain | None:
        """The chain stored in a request's meta, if any."""
        data = meta.get(REDIRECT_CHAIN_META)
        if not data:
            return None
        hops = tuple(Hop(**hop) for hop in data["hops"])
        return cls(**{**data, "hops": hops, "keys": tuple(data["keys"])})


@dataclass(frozen=True)
class PageRecord:
    """A response the crawl kept: asked for as ``fetch_url`` (the chain start), answered at
    ``final_url``. ``flag`` marks a page that stands in for another (a redirect to a login
    page, a country selector or the home page)."""

    fetch_url: str
    final_url: str
    key: str | None
    status: int
    chain_id: str | None = None
    flag: str | None = None
    at: float = field(default_factory=now)


@dataclass(frozen=True)
class CanonicalHint:
    """One rel=canonical value a page announced (``source``: ``link-element`` or
    ``link-header``), as written (``href``) and resolved (``canonical_url``), with the
    verdict."""

    page_url: str
    page_key: str | None
    source: str
    href: str
    canonical_url: str | None
    canonical_key: str | None
    valid: bool
    reason: str
    at: float = field(default_factory=now)


@dataclass(frozen=True)
class UrlAlias:
    """A URL the crawl fetched or was redirected through, and the key it had under
    ``rules_version``: what a Bloom filter is rebuilt from after a rule change."""

    url: str
    key: str
    rules_version: str
    source: str
    at: float = field(default_factory=now)


@dataclass(frozen=True)
class ShortenerAnswer:
    """What a link shortener answered for ``short_url``: its status and ``Location`` (None
    when it sent none), at ``at``."""

    short_url: str
    status: int
    location: str | None
    at: float = field(default_factory=now)


@dataclass(frozen=True)
class KeyAlias:
    """``from_key`` names the same resource as ``to_key`` (``via``: ``canonical``)."""

    from_key: str
    to_key: str
    via: str
    rules_version: str
    at: float = field(default_factory=now)


@dataclass(frozen=True)
class MatchFeatures:
    """What migration matching reads of a 200 HTML page (:mod:`bloom_frontier.content.features`):
    its title, the ``h1``-``h3`` headings of its main content, the main content's exact hash
    (32 hex digits) and MinHash signature (boilerplate left out), its length in words and
    distinct 4-word shingles, and its links on its own host."""

    title: str
    headings: tuple[str, ...]
    main_hash: str
    main_minhash: bytes
    main_length: int
    main_shingles: int
    outlinks: tuple[str, ...]

    def row(self) -> dict[str, Any]:
        """The ``match_features`` columns (lists as JSON)."""
        return {
            "title": self.title,
            "headings": json.dumps(list(self.headings), ensure_ascii=False),
            "main_hash": self.main_hash,
            "main_minhash": self.main_minhash,
            "main_length": self.main_length,
            "main_shingles": self.main_shingles,
            "outlinks": json.dumps(list(self.outlinks), ensure_ascii=False),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> MatchFeatures:
        return cls(
            title=row["title"],
            headings=tuple(json.loads(row["headings"])),
            main_hash=row["main_hash"],
            main_minhash=bytes(row["main_minhash"]),
            main_length=row["main_length"],
            main_shingles=row["main_shingles"],
            outlinks=tuple(json.loads(row["outlinks"])),
        )


@dataclass(frozen=True)
class ContentRecord:
    """A document's content fingerprints (:mod:`bloom_frontier.content.fingerprint`): ``exact``
    (32 hex digits), ``minhash`` (None for bodies that are not text), the normalization
    they were made under, and the document's ``kind`` for learning (``ok``, ``empty``,
    ``error``, ``soft-404``); ``features``: what migration matching needs (200 HTML pages)."""

    exact: str
    minhash: bytes | None
    norm: str
    kind: str
    features: MatchFeatures | None = None


#: Learned parameter rule states: waiting for the user, in force, withdrawn.
PROPOSED, APPLIED, REVOKED = "proposed", "applied", "revoked"


@dataclass(frozen=True)
class ParamRule:
    """Parameter ``param`` carries no content within ``scope`` (a host, or ``host/prefix*``):
    ``evidence`` holds the URL pairs that differ by it alone and had equal content;
    ``counter_example`` the pair (and why) that revoked it, if any."""

    scope: str
    param: str
    state: str
    evidence: tuple[tuple[str, str], ...]
    counter_example: dict[str, Any] | None = None
    rules_version: str | None = None
    created_at: float = field(default_factory=now)
    updated_at: float = field(default_factory=now)

    @property
    def name(self) -> str:
        """How commands and settings name the rule: ``scope?param``."""
        return f"{self.scope}?{self.param}"

    def row(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "param": self.param,
            "state": self.state,
            "evidence_count": len(self.evidence),
            "evidence": json.dumps([list(pair) for pair in self.evidence]),
            "counter_example": None
            if self.counter_example is None
            else json.dumps(self.counter_example, sort_keys=True),
            "rules_version": self.rules_version,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ParamRule:
        counter = row.get("counter_example")
        return cls(
            scope=row["scope"],
            param=row["param"],
            state=row["state"],
            evidence=tuple((a, b) for a, b in json.loads(row["evidence"])),
            counter_example=json.loads(counter) if counter else None,
            rules_version=row.get("rules_version"),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


def write_rows(
    rows: Iterable[dict[str, Any]], fmt: str, columns: Sequence[str], out: TextIO
) -> int:
    """Write ``rows`` as JSON lines (``jsonl``, every key) or CSV (``csv``, ``columns``
    with a header); return how many were written."""
    count = 0
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            count += 1
    elif fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    else:
        raise ValueError(f"unknown format {fmt!r}")
    return count
