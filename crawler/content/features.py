"""What migration matching needs of a page (:class:`MatchFeatures`), recorded at crawl time.

A whole-page fingerprint changes with the boilerplate a migration changes (header, navigation,
footer, cookie banner, "last updated" date), so matching reads the **main content** instead:

* the first element marked ``role="main"``, else the first ``<main>``, else the first
  ``<article>``, with what follows it outside boilerplate elements (a page merged into
  another is often appended after its main element); else the ``<body>`` without
  ``<header>``, ``<nav>``, ``<footer>``, ``<aside>``, ``<form>`` and elements whose
  ``id``, ``class`` or ``role`` name boilerplate (cookie, consent, banner, sidebar, menu,
  breadcrumb, navigation, footer, header): a "last updated" date goes with its footer;
* within it, the visible text as ``n2`` reads it (comments, scripts, styles dropped, tags
  as spaces, timestamps and ids masked; a date in the main text is content).

Of that text: its words' 4-word shingles MinHashed as ``n2`` does (same permutations, so
:func:`~bloom_frontier.content.fingerprint.similarity` and the LSH index apply), the exact hash
of its words, its length in words and its count of distinct shingles (with two signatures'
similarity, how much of the one the other contains: a merged page). Also the ``<title>`` and
the ``h1``-``h3`` headings of the main content (entities decoded, whitespace collapsed), and
the page's links on its own host (resolved against ``<base href>``, fragments dropped,
first occurrence order). Regular expressions and numpy only: computed in the content
fingerprint thread, never on the loop.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import replace
from functools import lru_cache
from urllib.parse import urljoin, urlsplit

import numpy as np

from bloom_frontier.content.fingerprint import (
    N2,
    N2Words,
    classify,
    fingerprint,
    minhash_of_shingles,
    n2_words,
    signature_bytes,
)
from bloom_frontier.pipelines.records import ContentRecord, MatchFeatures

#: Links kept per page (a page's outlinks beyond this say nothing more about where it sits).
MAX_OUTLINKS = 2000

_ROLE_MAIN = re.compile(r"""\srole\s*=\s*["']?main\b""", re.I)
_TAG_NAME = re.compile(r"[a-zA-Z][\w-]*")
_MAIN = re.compile(r"<(main)\b[^>]*>", re.I)
_ARTICLE = re.compile(r"<(article)\b[^>]*>", re.I)
_BODY = re.compile(r"<body\b[^>]*>", re.I)
_BOILERPLATE_WORDS = (
    r"cookie|consent|banner|sidebar|side-bar|menu|breadcrumb|navigation|navbar|footer|header"
)
#: An element that is boilerplate by its tag, or by a word in its id, class or role.
_BOILERPLATE = re.compile(
    r"<(header|nav|footer|aside|form)\b[^>]*>"
    rf"""|<([a-zA-Z][\w-]*)\b[^>]*\b(?:id|class|role)\s*=\s*["']?[^"'>]*(?:{_BOILERPLATE_WORDS})"""
    r"[^>]*>",
    re.I,
)
_ANY_TAG = re.compile(r"<[^>]*>")
_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title", re.S | re.I)
_HEADING = re.compile(r"<h([1-3])\b[^>]*>(.*?)</h\1\s*>", re.S | re.I)
_BASE = re.compile(r"""<base\b[^>]*?\shref\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]+)""", re.I)
_SCHEME = re.compile(r"([a-zA-Z][\w+.-]*):")
_WEB = ("http", "https")


@lru_cache(maxsize=64)
def _tags_of(tag: str) -> re.Pattern[str]:
    """Start and end tags of elements named ``tag``."""
    return re.compile(rf"<(/?){re.escape(tag)}\b[^>]*>", re.I)


def _element_end(markup: str, tag: str, start: int) -> int:
    """Where the element of ``tag`` opened just before ``start`` closes (its nested
    elements of the same tag counted); the end of ``markup`` when it never does."""
    depth = 1
    for match in _tags_of(tag).finditer(markup, start):
        depth += -1 if match.group(1) else 1
        if depth == 0:
            return match.start()
    return len(markup)


def _role_main(shown: str) -> tuple[str, int] | None:
    """The tag name of the first element marked ``role="main"`` and where its content
    starts (searched from the attribute, a literal: far cheaper than looking into every
    tag)."""
    for found in _ROLE_MAIN.finditer(shown):
        opening = shown.rfind("<", 0, found.start())
        tag = _TAG_NAME.match(shown, opening + 1) if opening >= 0 else None
        closing = shown.find(">", found.end())
        if tag and closing >= 0 and shown.find(">", opening, found.start()) < 0:
            return tag.group(), closing + 1
    return None


def main_spans(shown: str) -> list[tuple[int, int]]:
    """Where the main content of ``shown`` (a page's markup without comments and unseen
    elements) is: the first ``role="main"``, ``<main>`` or ``<article>`` element's content
    and what follows it outside boilerplate elements (content a page appends after it: a
    merged page), else the ``<body>`` cut around its boilerplate elements (module
    docstring). Each span starts and ends at a tag's edge."""
    main = None
    if (role := _role_main(shown)) is not None:
        tag, start = role
        main = start, _element_end(shown, tag, start)
    else:
        for pattern in (_MAIN, _ARTICLE):
            if (found := pattern.search(shown)) is not None:
                main = found.end(), _element_end(shown, found.group(1), found.end())
                break
    if main is None:
        body = _BODY.search(shown)
        return _outside_boilerplate(shown, body.end() if body else 0)
    after = _outside_boilerplate(shown, main[1])
    if after and after[0][0] == main[1]:
        return [(main[0], after[0][1]), *after[1:]]
    return [main, *after]


def _outside_boilerplate(shown: str, position: int) -> list[tuple[int, int]]:
    """The spans of ``shown`` from ``position`` on that are outside boilerplate elements."""
    spans = []
    while (found := _BOILERPLATE.search(shown, position)) is not None:
        spans.append((position, found.start()))
        tag = found.group(1) or found.group(2)
        close = _element_end(shown, tag, found.end())
        position = shown.find(">", close) + 1 or len(shown)
    spans.append((position, len(shown)))
    return [(start, end) for start, end in spans if end > start]


def _text(fragment: str) -> str:
    """Visible text of a fragment: tags as spaces, entities decoded, whitespace collapsed."""
    return " ".join(html.unescape(_ANY_TAG.sub(" ", fragment)).split())


@lru_cache(maxsize=1 << 16)
def _resolved(base: str, href: str) -> str | None:
    """``href`` resolved against ``base`` (None: not a URL); cached, since the pages of a
    folder share most of their links (navigation) and ``urljoin`` costs ~30 us."""
    try:
        return urljoin(base, href)
    except ValueError:
        return None


def _outlinks(markup: str, url: str, values: list[str]) -> tuple[str, ...]:
    """The ``href`` ``values`` of a page's tags that point at its own host, absolute, without
    fragments (each distinct target resolved once: most links of a page differ by fragment
    alone)."""
    base_match = _BASE.search(markup)
    base = urljoin(url, html.unescape(base_match.group(1).strip("\"'"))) if base_match else url
    folder = base[: base.rfind("/") + 1] if base.count("/") > 2 else base
    host = urlsplit(url).hostname
    hrefs = (value.partition("#")[0] for value in values)
    found: dict[str, None] = {}
    for value in dict.fromkeys(hrefs):
        href = html.unescape(value).strip() if "&" in value else value.strip()
        scheme = _SCHEME.match(href)
        if not href or (scheme and scheme.group(1).lower() not in _WEB):
            continue
        # A relative path resolves against the base's folder alone (a shared cache key).
        target = _resolved(base if href[0] in "?;" else folder, href)
        if target is None:
            continue
        if scheme or href.startswith("//"):
            try:
                if urlsplit(target).hostname != host:
                    continue
            except ValueError:
                continue
        found[target] = None
        if len(found) >= MAX_OUTLINKS:
            break
    return tuple(found)


def match_features(
    markup: str, url: str, words: N2Words | None = None, signature: np.ndarray | None = None
) -> MatchFeatures:
    """The features of an HTML page fetched at ``url``, from its ``n2`` words found with
    :func:`main_spans` (:func:`~bloom_frontier.content.fingerprint.n2_words`) and its
    main content's MinHash values, each computed here when not given."""
    if words is None:
        words = n2_words(markup, main_spans)
    main = words.main if words.main is not None else np.zeros(0, dtype=np.uint64)
    shingles = words.main_shingles
    if signature is None:
        signature = minhash_of_shingles(shingles)
    title_match = _TITLE.search(markup)
    headings = tuple(
        text
        for part in words.main_markup
        for _, inner in _HEADING.findall(part)
        if (text := _text(inner))
    )
    return MatchFeatures(
        title=_text(title_match.group(1)) if title_match else "",
        headings=headings,
        main_hash=hashlib.sha256(main.astype("<u8").tobytes()).hexdigest()[:32],
        main_minhash=signature_bytes(signature),
        main_length=len(main),
        main_shingles=len(shingles),
        outlinks=_outlinks(markup, url, words.hrefs),
    )


def fingerprint_page(
    body: bytes, text: str | None, status: int, flag: str | None, norm: str, url: str
) -> ContentRecord:
    """:func:`~bloom_frontier.content.fingerprint.fingerprint`, with the
    :class:`MatchFeatures` of a 200 HTML page (what a migration map is matched on), from
    the same pass over the text under ``n2``: the page's signature is the element-wise
    minimum of its main content's and the rest's (the MinHash of their union)."""
    if status != 200 or text is None or "<" not in text[:4096]:
        return fingerprint(body, text, status, flag, norm)
    words = n2_words(text, main_spans)
    main = minhash_of_shingles(words.main_shingles)
    if norm == N2:
        page = np.minimum(main, minhash_of_shingles(words.other_shingles))
        any_words = bool(len(words.main_shingles) or len(words.other_shingles))
        kind = classify(status, any_words, text, flag)
        content = ContentRecord(words.exact, signature_bytes(page), N2, kind)
    else:
        content = fingerprint(body, text, status, flag, norm)
    return replace(content, features=match_features(text, url, words, main))
