"""What a fetched document says, as two fingerprints: exact and near-duplicate.

Two normalizations, stored with each fingerprint (fingerprints of different ones are never
compared): ``n2``, the default, and ``n1``, which stores written before ``n2`` hold.

The **normalization** ``n2`` (:func:`normalize_n2`) keeps what a reader gets: the visible
text (comments, ``script``, ``style``, ``noscript`` and ``template`` elements dropped, tags
read as spaces) and the link targets (``href``, ``src`` and ``action`` values); timestamps and
ids are masked as in ``n1`` below. Every other attribute (nonces, CSRF fields, hidden input
values, ``<meta>`` contents, classes) does not count. Its exact fingerprint is SHA-256 of the
text with ASCII whitespace runs as one space, a newline, the targets; its signature hashes
the text's words (ASCII lower-cased) in numpy at once (:func:`word_hashes`), then shingles
and MinHash them as ``n1`` does: cheaper than ``n1`` (docs/scaling.md, "CPU per page"), with
the same Jaccard estimate (tested against the true similarity of the shingles).

The **normalization** ``n1`` (:func:`normalize_markup`) removes what changes from one request
of a page to the next without changing the document, then collapses whitespace:

* HTML comments (build stamps, cache notes);
* attributes named like a per-request secret (``*csrf*``, ``*xsrf*``, ``*token*``,
  ``*nonce*``: ``nonce="..."``, ``data-csrf="..."``), the ``value`` of hidden inputs and the
  ``content`` of ``<meta>`` tags so named (``<meta name="csrf-token" content="...">``);
* the string assigned to a CSRF/XSRF name in inline script (``csrfToken = "..."``);
* timestamps with a time of day: ISO 8601 (``2026-12-01T14:53:23Z``), HTTP dates
  (``Tue, 01 Dec 2026 14:53:23 GMT``), clock times (``14:53:23``) and Unix epochs of this
  era in seconds or milliseconds (``1764600803``), each replaced by ``<time>``;
* UUIDs and runs of 32+ hex digits (request ids, cache busters), replaced by ``<id>``.

Timestamps are recognized as whole runs of digits and ``:.TZ+-``, so ``3.11.7`` or a price
never changes.

A date alone (``2026-12-01``) is content and stays. The **exact fingerprint** is SHA-256 of
the normalized markup (first 32 hex digits); the **near-duplicate signature** a 128-value
MinHash (datasketch's ``affine32`` scheme, seed 1) of the 4-word shingles of the visible
text (scripts, styles and tags removed), whose share of equal values estimates the Jaccard
similarity of two documents.
Bodies that are not text are fingerprinted as bytes (``raw``), without a signature.
``tests/data/content_normalization.json`` pins all of this with vectors (``n2_pairs`` and
``n2_exact`` for ``n2``).
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable
from itertools import pairwise
from typing import NamedTuple

import numpy as np
import xxhash

# The names and sizes live in a numpy-free module (read before the first request); the two
# this module does not use are re-exported for the commands that import them from here.
from bloom_frontier.content.constants import (
    EMPTY,
    ERROR,
    N1,
    N2,
    NORMALIZATION,
    NUM_PERM,
    OK,
    RAW,
    SHINGLE,
    SOFT_404,
)
from bloom_frontier.content.constants import NEAR_DUPLICATE as NEAR_DUPLICATE
from bloom_frontier.content.constants import NORMALIZATIONS as NORMALIZATIONS
from bloom_frontier.pipelines.records import ContentRecord

_SECRET = r"[\w:.-]*(?:csrf|xsrf|token|nonce)[\w:.-]*"
_VALUE = r"""(?:"[^"]*"|'[^']*'|[^\s"'>]+)"""
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_SECRET_ATTR = re.compile(rf"\s{_SECRET}\s*=\s*{_VALUE}", re.IGNORECASE)
#: Start tags that may hold a per-request secret: inputs, metas, and tags naming one.
_TAG = re.compile(
    r"<(input|meta)\b[^>]*>|<([a-zA-Z][\w-]*)\b[^>]*(?:csrf|xsrf|token|nonce)[^>]*>",
    re.IGNORECASE,
)
#: :data:`_TAG` without its second branch, for documents that do not contain the secret words
#: anywhere (most): that branch looks into every tag, for 4/5 of the normalization's time.
_INPUT_OR_META = re.compile(r"<(input|meta)\b[^>]*>", re.IGNORECASE)
_SECRET_WORDS = ("csrf", "xsrf", "token", "nonce")
_HIDDEN = re.compile(r"""\stype\s*=\s*["']?hidden\b""", re.IGNORECASE)
_NAMED_SECRET = re.compile(
    rf"""\s(?:name|property|http-equiv|id)\s*=\s*["']?{_SECRET}""", re.IGNORECASE
)
_VALUE_ATTR = {
    "input": re.compile(rf"\svalue\s*=\s*{_VALUE}", re.IGNORECASE),
    "meta": re.compile(rf"\scontent\s*=\s*{_VALUE}", re.IGNORECASE),
}
_SCRIPT_SECRET = re.compile(
    r"""((?:csrf|xsrf)[\w-]*["']?\s*[:=]\s*)(?:"[^"]*"|'[^']*')""", re.IGNORECASE
)
#: Runs that may hold a timestamp or an id; each is judged whole by :func:`_mask_run`.
_NUMERIC_RUN = re.compile(r"\d[\d:.TZ+-]*")
_HEX_RUN = re.compile(r"[0-9a-fA-F-]{32,}")
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}:\d{2}:\d{2}(?:\.\d+)?"
    r"|1[5-9]\d{8}(?:\d{3})?(?:\.\d+)?"
)
_HTTP_DATE = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{1,2} \w{3} \d{4} <time>(?: (?:GMT|UTC|[+-]\d{4}))?"
)
_HEX_ID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32,}", re.IGNORECASE
)
_INVISIBLE = re.compile(r"<(script|style|noscript|template)\b.*?</\1\s*>", re.DOTALL | re.I)
_ANY_TAG = re.compile(r"<[^>]*>")
_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title", re.DOTALL | re.IGNORECASE)
_H1 = re.compile(r"<h1\b[^>]*>(.*?)</h1", re.DOTALL | re.IGNORECASE)
#: A title or first heading announcing a missing page (a soft-404 answered 200).
_NOT_FOUND = re.compile(
    r"\b(?:404|not found|page (?:does not|doesn't|no longer) exists?|no longer available"
    r"|nicht gefunden|introuvable|no encontrad[ao])\b",
    re.IGNORECASE,
)


def _clean_tag(match: re.Match[str]) -> str:
    """A start tag without secret-named attributes; an ``<input type=hidden>`` without its
    value, a secret-named ``<meta>`` without its content."""
    tag, name = match.group(), (match.group(1) or "").lower()
    if (name == "input" and _HIDDEN.search(tag)) or (name == "meta" and _NAMED_SECRET.search(tag)):
        tag = _VALUE_ATTR[name].sub("", tag)
    return _SECRET_ATTR.sub("", tag)


def _mask_run(match: re.Match[str]) -> str:
    """A digit run as ``<time>`` when it is a timestamp (trailing ``.:-+`` kept)."""
    run = match.group()
    core = run.rstrip(".:-+")
    return "<time>" + run[len(core) :] if _TIMESTAMP.fullmatch(core) else run


def _mask_hex(match: re.Match[str]) -> str:
    run = match.group()
    core = run.strip("-")
    if not _HEX_ID.fullmatch(core):
        return run
    start = run.index(core)
    return f"{run[:start]}<id>{run[start + len(core) :]}"


def normalize_markup(markup: str) -> str:
    """The document without per-request noise, whitespace collapsed (see the module doc).

    >>> normalize_markup('<p>Hi</p> <!-- 0.2s --><input type="hidden" name="t" value="x9">')
    '<p>Hi</p> <input type="hidden" name="t">'
    >>> normalize_markup('<script nonce="a1">csrfToken = "f00";</script> at 12:00:01')
    '<script>csrfToken = "";</script> at <time>'
    """
    text = _COMMENT.sub("", markup)
    lower = text.lower()
    secrets = any(word in lower for word in _SECRET_WORDS)
    text = (_TAG if secrets else _INPUT_OR_META).sub(_clean_tag, text)
    if secrets and "srf" in text.lower():
        text = _SCRIPT_SECRET.sub(r'\1""', text)
    return " ".join(mask_noise(text).split())


def mask_noise(text: str) -> str:
    """``text`` with its timestamps as ``<time>`` and its ids as ``<id>`` (module doc).

    >>> mask_noise("Built 2026-12-01T14:53:23Z, etag 0123456789abcdef0123456789abcdef")
    'Built <time>, etag <id>'
    """
    if _may_hold(text, _DIGITS, (b"d:d", b"d" * 10)):
        text = _NUMERIC_RUN.sub(_mask_run, text)
        if "<time>" in text:
            text = _HTTP_DATE.sub("<time>", text)
    if _may_hold(text, _HEX_DIGITS, (b"x" * 32,)):
        text = _HEX_RUN.sub(_mask_hex, text)
    return text


def _byte_map(kept: dict[str, str], non_ascii: str) -> bytes:
    """A ``bytes.translate`` table: the ASCII characters of ``kept`` to their letter,
    other ASCII bytes to a space, bytes of non-ASCII characters to ``non_ascii``."""
    return bytes(
        ord(kept.get(chr(byte), " ")) if byte < 0x80 else ord(non_ascii) for byte in range(256)
    )


#: What a timestamp needs (``\d:\d`` or ten ``\d``); non-ASCII characters may be digits.
_DIGITS = _byte_map({**dict.fromkeys("0123456789", "d"), ":": ":"}, "d")
#: What an ``<id>`` needs: 32 of ``[0-9a-fA-F-]`` in a row (ASCII only).
_HEX_DIGITS = _byte_map(dict.fromkeys("0123456789abcdefABCDEF-", "x"), " ")


def _may_hold(text: str, table: bytes, needles: tuple[bytes, ...]) -> bool:
    """False when the masking pass the table stands for certainly finds nothing in ``text``:
    none of ``needles`` in its bytes mapped through ``table``. A whole-document check far
    cheaper than the regex pass, which most pages skip then."""
    mapped = text.encode("utf-8", "surrogatepass").translate(table)
    return any(needle in mapped for needle in needles)


def visible_words(normalized: str) -> list[str]:
    """The words a reader sees, lower-cased: no scripts, styles or tags (entities and
    punctuation are kept as written).

    >>> visible_words('<p>Hello, <b>World</b></p><script>x = 1</script>')
    ['hello,', 'world']
    """
    return _ANY_TAG.sub(" ", _INVISIBLE.sub(" ", normalized)).lower().split()


#: Seed of the MinHash permutations; with NUM_PERM and the scheme, fixed for stored signatures.
SEED = 1


def _draw_permutations(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(a, b)`` of datasketch's ``affine32`` permutations ``h -> a * h + b mod 2**32``
    for ``seed``, drawn as ``MinHash(num_perm=NUM_PERM, seed=seed, scheme="affine32")``
    draws them (``a`` odd), without datasketch, which is not a dependency (it pulls scipy;
    the suite has it, to test these equal)."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, NUM_PERM, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, NUM_PERM, dtype=np.uint32)
    return a, b


#: The permutations, drawn once: drawing them costs more than hashing a page.
_PERMUTATIONS = _draw_permutations(SEED)
#: A signature of no shingle (datasketch's initial values).
_EMPTY = np.full(NUM_PERM, 0xFFFFFFFF, dtype=np.uint32)
_MASK32 = np.uint64(0xFFFFFFFF)
_MIX = np.uint64(0x01000193)  # FNV prime: shingle hash = 4 word hashes folded
#: Shingles a MinHash matrix holds at once (``NUM_PERM`` x this, 32 MiB of uint32).
_BLOCK = 1 << 16
#: MurmurHash3's 32-bit finalizer, the pre-mix of datasketch's ``affine32`` scheme.
_FMIX32 = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35))


def shingle_hashes(words: list[str]) -> np.ndarray:
    """32-bit hashes of the ``SHINGLE``-word shingles of ``words`` (of the words themselves
    when there are fewer), distinct: each word's xxh32, folded with its neighbours' (``n1``)."""
    vocabulary = {
        word: xxhash.xxh32_intdigest(word.encode("utf-8", "surrogatepass")) for word in set(words)
    }
    hashes = np.fromiter(map(vocabulary.__getitem__, words), dtype=np.uint64, count=len(words))
    return _shingles(hashes)


def _shingles(hashes: np.ndarray) -> np.ndarray:
    """Distinct 32-bit hashes of the ``SHINGLE``-word shingles of words hashed ``hashes``
    (uint64 values below 2**32), of the words themselves when there are fewer."""
    return _distinct(_windows(hashes))


def _windows(hashes: np.ndarray) -> np.ndarray:
    """The shingle hash of each ``SHINGLE``-word window of words hashed ``hashes``, in
    order (window ``i`` starts at word ``i``); the word hashes when there are fewer."""
    if len(hashes) < SHINGLE:
        return hashes
    count = len(hashes) - SHINGLE + 1
    folded = np.zeros(count, dtype=np.uint64)
    for offset in range(SHINGLE):
        folded = ((folded * _MIX) ^ hashes[offset : offset + count]) & _MASK32
    return folded


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` (sorted, distinct) by sorting: numpy 2's ``unique`` goes through a
    hash table first, 10-20x slower on a page's few thousand shingle hashes."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]


def minhash_of(words: list[str]) -> np.ndarray:
    """The ``n1`` MinHash values of ``words``: :func:`minhash_of_shingles` of their
    :func:`shingle_hashes`."""
    return minhash_of_shingles(shingle_hashes(words))


def minhash_of_shingles(shingles: np.ndarray) -> np.ndarray:
    """The MinHash values (``NUM_PERM`` uint32) of 32-bit shingle hashes: what
    datasketch's ``MinHash(num_perm=NUM_PERM, seed=SEED, scheme="affine32")`` holds after
    ``update_batch`` of them (``hashfunc=int``), computed on the whole array at once
    (datasketch goes through a Python list of ints: twice the time). Tested equal."""
    hashes = shingles.astype(np.uint32)
    if not len(hashes):
        return _EMPTY.copy()
    shift1, mul1, shift2, mul2 = _FMIX32  # datasketch's one-shot pre-mix of each hash
    hashes ^= hashes >> shift1
    hashes *= mul1
    hashes ^= hashes >> shift2
    hashes *= mul2
    hashes ^= hashes >> shift1
    a, b = _PERMUTATIONS
    found = _EMPTY.copy()
    for start in range(0, len(hashes), _BLOCK):  # a bounded matrix however long the page
        values = np.multiply.outer(a, hashes[start : start + _BLOCK])  # a row a permutation:
        values += b[:, None]  # min along rows is 4x faster than down the columns
        np.minimum(found, values.min(axis=1), out=found)
    return found


def signature_bytes(values: np.ndarray) -> bytes:
    """A signature as stored: ``NUM_PERM`` little-endian uint32 values."""
    return np.asarray(values, dtype="<u4").tobytes()


def similarity(a: bytes, b: bytes) -> float:
    """Estimated Jaccard similarity of two stored signatures (share of equal values)."""
    left, right = np.frombuffer(a, dtype="<u4"), np.frombuffer(b, dtype="<u4")
    if len(left) != len(right) or not len(left):
        return 0.0
    return float(np.count_nonzero(left == right)) / len(left)


def classify(status: int, words: bool, markup: str, flag: str | None = None) -> str:
    """``error`` (status 400+ or a non-2xx), ``empty`` (no visible ``words``), ``soft-404`` (a
    redirect stand-in ``flag`` from the redirect middleware, or a title or first heading
    announcing a missing page), else ``ok``."""
    if not 200 <= status < 300:
        return ERROR
    if not words:
        return EMPTY
    if flag and flag.startswith(SOFT_404):
        return SOFT_404
    for pattern in (_TITLE, _H1):
        match = pattern.search(markup)
        if match and _NOT_FOUND.search(html.unescape(_ANY_TAG.sub(" ", match.group(1)))):
            return SOFT_404
    return OK


def fingerprint(
    body: bytes,
    text: str | None,
    status: int = 200,
    flag: str | None = None,
    norm: str = NORMALIZATION,
) -> ContentRecord:
    """Fingerprints of a response under normalization ``norm`` (``n2`` or ``n1``): ``text``
    is its decoded body for text responses (HTML, XML, plain text), None for others (then
    ``body`` is hashed as bytes)."""
    if text is None:
        exact = hashlib.sha256(body).hexdigest()[:32]
        kind = (ERROR if not 200 <= status < 300 else OK) if body else EMPTY
        return ContentRecord(exact, None, RAW, kind)
    if norm == N2:
        exact, shingles = exact_and_shingles_n2(text)
        return content_record(exact, shingles, N2, text, status, flag)
    normalized = normalize_markup(text)
    exact = hashlib.sha256(normalized.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return content_record(
        exact, shingle_hashes(visible_words(normalized)), N1, normalized, status, flag
    )


def content_record(
    exact: str, shingles: np.ndarray, norm: str, markup: str, status: int, flag: str | None
) -> ContentRecord:
    """The record of a text document's exact fingerprint and shingle hashes."""
    return ContentRecord(
        exact=exact,
        minhash=signature_bytes(minhash_of_shingles(shingles)),
        norm=norm,
        kind=classify(status, bool(len(shingles)), markup, flag),
    )


#: What ``n2`` drops whole: comments and the elements a reader does not see.
_UNSEEN = re.compile(r"<!--.*?-->|<(script|style|noscript|template)\b.*?</\1\s*>", re.S | re.I)
#: What ``n2`` keeps of the markup: where links, images, frames and forms point (one pass
#: per attribute: a regex starting with one literal is searched 3x faster than alternatives).
_TARGETS = tuple(
    re.compile(rf"""{name}\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]+)""")
    for name in ("href", "src", "action")
)


def normalize_n2(markup: str) -> tuple[str, str]:
    """``n2`` before whitespace is collapsed: the visible text (tags as spaces) and the link
    targets (``href``, ``src``, ``action`` values, unquoted, one space apart), timestamps
    and ids masked in both. Comments, scripts, styles, every other attribute (nonces, CSRF
    fields, hidden values, ``<meta>`` contents, classes) and the tags themselves do not count.

    >>> normalize_n2('<p nonce="x1">Hi <b>you</b></p><!-- 2s --><a href="/n">at 12:00:01</a>')
    (' Hi  you    at <time> ', '/n')
    """
    shown = _UNSEEN.sub(" ", markup)
    targets = " ".join(
        value.strip("\"'") for pattern in _TARGETS for value in pattern.findall(shown)
    )
    return mask_noise(_ANY_TAG.sub(" ", shown)), mask_noise(targets)


#: ASCII whitespace, the bytes that separate ``n2`` words.
_SPACE = np.zeros(256, dtype=bool)
_SPACE[list(b" \t\n\r\x0b\x0c")] = True
#: Bytes lower-cased as ASCII (``n2`` words are compared ASCII-case-insensitively).
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[ord("A") : ord("Z") + 1] += 32
#: ``n2`` word hash: polynomial in ``_BASE`` mod 2**64, then MurmurHash3's 64-bit finalizer.
_BASE = 0x100000001B3  # FNV-1a's 64-bit prime (odd, so invertible mod 2**64)
_POWERS: tuple[np.ndarray, np.ndarray] = (np.ones(1, np.uint64), np.ones(1, np.uint64))


def exact_and_shingles_n2(markup: str) -> tuple[str, np.ndarray]:
    """The ``n2`` exact fingerprint (SHA-256 of the text with whitespace runs as one space,
    stripped, a newline, the targets) and the shingle hashes of the text's words."""
    words = n2_words(markup)
    return words.exact, words.other_shingles


#: Spans of ``n2``'s shown markup (comments and unseen elements dropped) that hold a page's
#: main content, each from just after a tag to just before one (``features.main_spans``).
MainSpans = Callable[[str], list[tuple[int, int]]]
#: A timestamp may run across a cut when the text before it ends like the first pattern and
#: the text after it starts like the second (``Tue, 01 Dec 2026`` | ``14:53:23 GMT``).
_CUT_TIMESTAMP = (
    re.compile(r"(?:\d|<time>)\s*$"),
    re.compile(r"\s*(?:\d|<time>|GMT|UTC|[+-]\d)"),
)


class N2Words(NamedTuple):
    """What :func:`n2_words` finds: the exact fingerprint; the page's shingle hashes split
    in two distinct sets, those of windows wholly inside the main content and the others
    (their union is the page's, so its MinHash is the element-wise minimum of theirs: the
    main content's signature costs nothing more, ``features.fingerprint_page``); the hashes
    of the main content's words (None: none asked for or found), its markup (comments and
    unseen elements dropped); the ``href`` values of the page's tags (unquoted, not unescaped)."""

    exact: str
    main_shingles: np.ndarray
    other_shingles: np.ndarray
    main: np.ndarray | None
    main_markup: tuple[str, ...]
    hrefs: list[str]


def n2_words(markup: str, main_spans: MainSpans | None = None) -> N2Words:
    """The ``n2`` exact fingerprint and shingles and, with ``main_spans``, the main
    content's (:class:`N2Words`). The text is masked piece by piece, cut where the main
    content starts and ends (at tags, so a space): the same text as masked whole, checked at
    each cut (a tag or a timestamp that could run across it makes the page masked whole and
    its main content left out)."""
    shown = _UNSEEN.sub(" ", markup)
    found = [[value.strip("\"'") for value in pattern.findall(shown)] for pattern in _TARGETS]
    targets = " ".join(value for values in found for value in values)
    spans = main_spans(shown) if main_spans is not None else []
    cuts = [0, *(edge for span in spans for edge in span), len(shown)]
    pieces = [mask_noise(_ANY_TAG.sub(" ", shown[a:b])) for a, b in pairwise(cuts)]
    if spans and not _clean_cuts(shown, cuts, pieces):
        spans, pieces = [], [mask_noise(_ANY_TAG.sub(" ", shown))]
    encoded = [piece.encode("utf-8", "surrogatepass") for piece in pieces]
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    space = _SPACE[data]
    kept = ~space
    kept[1:] |= ~space[:-1]  # a space right after a word stays, as one space
    collapsed = np.where(space, np.uint8(32), data)[kept].tobytes().strip()
    exact = hashlib.sha256(
        b"%s\n%s" % (collapsed, mask_noise(targets).encode("utf-8", "surrogatepass"))
    ).hexdigest()[:32]
    hashes = word_hashes(_LOWER[data], space)
    windows = _windows(hashes)
    if not spans:
        return N2Words(exact, _EMPTY_SHINGLES, _distinct(windows), None, (), found[0])
    # Piece i holds the words starting in its bytes; the main content: pieces 1, 3, 5...
    word_starts = np.flatnonzero(~space & np.concatenate(([True], space[:-1])))
    first = np.searchsorted(word_starts, np.cumsum([0, *map(len, encoded)]))
    ranges = [(int(first[i]), int(first[i + 1])) for i in range(1, len(pieces), 2)]
    main = np.concatenate([hashes[start:end] for start, end in ranges])
    inside = np.zeros(len(windows), dtype=bool)
    width = SHINGLE - 1 if len(hashes) >= SHINGLE else 0  # a window's words after its first
    for start, end in ranges:
        inside[start : max(start, end - width)] = True
    return N2Words(
        exact,
        _distinct(windows[inside]),
        _distinct(windows[~inside]),
        main,
        tuple(shown[a:b] for a, b in spans),
        found[0],
    )


#: No shingles.
_EMPTY_SHINGLES = np.zeros(0, dtype=np.uint64)


def _clean_cuts(shown: str, cuts: list[int], pieces: list[str]) -> bool:
    """True when masking ``shown`` cut at ``cuts`` gives what masking it whole gives: no
    ``<`` left open before a cut (a tag running across it) and no timestamp that could run
    across one."""
    ends, starts = _CUT_TIMESTAMP
    for position in range(1, len(cuts) - 1):
        before, after = pieces[position - 1], pieces[position]
        if not before or not after:
            continue  # an empty piece: no cut there
        previous, cut = cuts[position - 1], cuts[position]
        if shown.rfind("<", previous, cut) > shown.rfind(">", previous, cut):
            return False
        if ends.search(before[-16:]) and starts.match(after[:16]):
            return False
    return True


def _powers(length: int) -> tuple[np.ndarray, np.ndarray]:
    """``_BASE**-j`` and ``_BASE**j`` mod 2**64 for ``j < length`` (grown by doubling)."""
    global _POWERS
    inverse, forward = _POWERS
    if len(inverse) < length:
        size = 1 << (length - 1).bit_length()
        inverse = np.full(size, pow(_BASE, -1, 1 << 64), dtype=np.uint64)
        forward = np.full(size, _BASE, dtype=np.uint64)
        inverse[0] = forward[0] = 1
        _POWERS = inverse, forward = np.cumprod(inverse), np.cumprod(forward)  # mod 2**64
    return inverse, forward


#: Bytes hashed at once by :func:`word_hashes` (cut after a space): bounds the power tables.
_CHUNK = 1 << 20


def word_hashes(data: np.ndarray, space: np.ndarray) -> np.ndarray:
    """32-bit hashes (as uint64) of the words of the bytes ``data``, a word being a run of
    bytes where ``space`` is False: all words hashed at once in numpy (``sum(byte_j * B**j)``
    over the word's bytes, from prefix sums), no Python per word; ``_CHUNK`` bytes at a time,
    cut after a space (a word longer than that is hashed in pieces).

    >>> data = np.frombuffer(b"word word other", dtype=np.uint8)
    >>> a, b, c = word_hashes(data, data == 32).tolist()
    >>> a == b != c
    True
    """
    parts, start = [], 0
    while start < len(data):
        end = min(start + _CHUNK, len(data))
        if end < len(data):
            blanks = np.flatnonzero(space[start:end])
            end = start + int(blanks[-1]) + 1 if len(blanks) else end
        parts.append(_chunk_word_hashes(data[start:end], space[start:end]))
        start = end
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def _chunk_word_hashes(data: np.ndarray, space: np.ndarray) -> np.ndarray:
    padded = np.concatenate(([True], space, [True]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    starts, ends = edges[0::2], edges[1::2]
    if not len(starts):
        return np.zeros(0, dtype=np.uint64)
    inverse, forward = _powers(len(data) + 1)
    prefix = np.zeros(len(data) + 1, dtype=np.uint64)
    np.cumsum((data + np.uint64(1)) * inverse[: len(data)], out=prefix[1:])
    hashes = (prefix[ends] - prefix[starts]) * forward[starts]
    hashes ^= hashes >> np.uint64(33)  # MurmurHash3's fmix64: every bit of the word counts
    hashes *= np.uint64(0xFF51AFD7ED558CCD)
    hashes ^= hashes >> np.uint64(33)
    hashes *= np.uint64(0xC4CEB9FE1A85EC53)
    hashes ^= hashes >> np.uint64(33)
    return hashes >> np.uint64(32)
