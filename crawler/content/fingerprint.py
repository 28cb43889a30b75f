"""What a fetched document says, as two fingerprints: exact and near-duplicate.

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
``tests/data/content_normalization.json`` pins all of this with vectors.
"""

from __future__ import annotations

import hashlib
import html
import re
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from pipelines.records import ContentRecord

if TYPE_CHECKING:
    from datasketch import MinHash

#: Version of :func:`normalize_markup`; fingerprints of different versions never compare.
NORMALIZATION = "n1"
#: Fingerprints of bodies that are not text (hash of the bytes, no signature).
RAW = "raw"
NUM_PERM = 128
SHINGLE = 4
#: MinHash similarity at or above which two documents count as near-duplicates.
NEAR_DUPLICATE = 0.9

#: What a document is good for when learning parameter rules: only ``ok`` documents count.
OK, EMPTY, ERROR, SOFT_404 = "ok", "empty", "error", "soft-404"

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
    if _may_hold(text, _DIGITS, (b"d:d", b"d" * 10)):
        text = _NUMERIC_RUN.sub(_mask_run, text)
        if "<time>" in text:
            text = _HTTP_DATE.sub("<time>", text)
    if _may_hold(text, _HEX_DIGITS, (b"x" * 32,)):
        text = _HEX_RUN.sub(_mask_hex, text)
    return " ".join(text.split())


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
    none of ``needles`` in its bytes mapped through ``table``. A whole-document check ten
    times cheaper than the regex pass, which most pages skip then."""
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
    draws them (``a`` odd), without importing datasketch: it imports scipy for its LSH
    index, 0.7 CPU-seconds at every crawl's start. Tested equal."""
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
#: MurmurHash3's 32-bit finalizer, the pre-mix of datasketch's ``affine32`` scheme.
_FMIX32 = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35))


def shingle_hashes(words: list[str]) -> np.ndarray:
    """32-bit hashes of the ``SHINGLE``-word shingles of ``words`` (of the words themselves
    when there are fewer), distinct: each word's xxh32, folded with its neighbours'."""
    vocabulary = {
        word: xxhash.xxh32_intdigest(word.encode("utf-8", "surrogatepass")) for word in set(words)
    }
    hashes = np.fromiter(map(vocabulary.__getitem__, words), dtype=np.uint64, count=len(words))
    if len(words) >= SHINGLE:
        count = len(words) - SHINGLE + 1
        folded = np.zeros(count, dtype=np.uint64)
        for offset in range(SHINGLE):
            folded = ((folded * _MIX) ^ hashes[offset : offset + count]) & _MASK32
        hashes = folded
    return np.unique(hashes)


def minhash_of(words: list[str]) -> np.ndarray:
    """The MinHash values (``NUM_PERM`` uint32) of the shingles of ``words``: what
    datasketch's ``MinHash(num_perm=NUM_PERM, seed=SEED, scheme="affine32")`` holds after
    ``update_batch`` of their hashes (``hashfunc=int``), computed on the whole array at once
    (datasketch goes through a Python list of ints: twice the time). Tested equal."""
    hashes = shingle_hashes(words).astype(np.uint32)
    if not len(hashes):
        return _EMPTY.copy()
    shift1, mul1, shift2, mul2 = _FMIX32  # datasketch's one-shot pre-mix of each hash
    hashes ^= hashes >> shift1
    hashes *= mul1
    hashes ^= hashes >> shift2
    hashes *= mul2
    hashes ^= hashes >> shift1
    a, b = _PERMUTATIONS
    return np.minimum(_EMPTY, (hashes.reshape(-1, 1) * a + b).min(axis=0))


def signature_bytes(values: np.ndarray) -> bytes:
    """A signature as stored: ``NUM_PERM`` little-endian uint32 values."""
    return np.asarray(values, dtype="<u4").tobytes()


def signature_of(stored: bytes) -> MinHash:
    """A stored signature as a datasketch MinHash again (for its LSH index)."""
    from datasketch import MinHash

    return MinHash(
        num_perm=NUM_PERM,
        seed=SEED,
        scheme="affine32",
        hashfunc=int,
        hashvalues=np.frombuffer(stored, dtype="<u4"),
        permutations=_PERMUTATIONS,
    )


def similarity(a: bytes, b: bytes) -> float:
    """Estimated Jaccard similarity of two stored signatures (share of equal values)."""
    left, right = np.frombuffer(a, dtype="<u4"), np.frombuffer(b, dtype="<u4")
    if len(left) != len(right) or not len(left):
        return 0.0
    return float(np.count_nonzero(left == right)) / len(left)


def classify(status: int, words: list[str], markup: str, flag: str | None = None) -> str:
    """``error`` (status 400+ or a non-2xx), ``empty`` (no visible word), ``soft-404`` (a
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
    body: bytes, text: str | None, status: int = 200, flag: str | None = None
) -> ContentRecord:
    """Fingerprints of a response: ``text`` is its decoded body for text responses (HTML,
    XML, plain text), None for others (then ``body`` is hashed as bytes)."""
    if text is None:
        exact = hashlib.sha256(body).hexdigest()[:32]
        kind = (ERROR if not 200 <= status < 300 else OK) if body else EMPTY
        return ContentRecord(exact, None, RAW, kind)
    normalized = normalize_markup(text)
    words = visible_words(normalized)
    return ContentRecord(
        exact=hashlib.sha256(normalized.encode("utf-8", "surrogatepass")).hexdigest()[:32],
        minhash=signature_bytes(minhash_of(words)),
        norm=NORMALIZATION,
        kind=classify(status, words, normalized, flag),
    )
