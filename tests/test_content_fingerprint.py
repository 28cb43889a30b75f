"""Content fingerprints: the normalization pinned by vectors, exact and near-duplicate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasketch import MinHash

from crawler.content.fingerprint import (
    EMPTY,
    ERROR,
    NORMALIZATION,
    NUM_PERM,
    OK,
    RAW,
    SEED,
    SOFT_404,
    fingerprint,
    normalize_markup,
    shingle_hashes,
    signature_bytes,
    signature_of,
    similarity,
    visible_words,
)

VECTORS = json.loads((Path(__file__).parent / "data" / "content_normalization.json").read_text())


@pytest.mark.parametrize("case", VECTORS["normalize"], ids=lambda case: case["name"])
def test_normalization_vectors(case: dict[str, str]) -> None:
    assert normalize_markup(case["input"]) == case["normalized"]


@pytest.mark.parametrize("case", VECTORS["pairs"], ids=lambda case: case["name"])
def test_equal_documents_share_the_exact_fingerprint(case: dict[str, object]) -> None:
    a, b = str(case["a"]), str(case["b"])
    same = fingerprint(a.encode(), a).exact == fingerprint(b.encode(), b).exact
    assert same is case["same"]


@pytest.mark.parametrize("case", VECTORS["exact"], ids=lambda case: case["input"][:20])
def test_exact_fingerprint_is_stable(case: dict[str, str]) -> None:
    found = fingerprint(case["input"].encode(), case["input"])
    assert (found.exact, found.norm) == (case["exact"], NORMALIZATION)


ARTICLE = " ".join(
    f"<p>Paragraph {i} tells the story of item number {i} in detail.</p>" for i in range(60)
)


def test_minhash_tells_near_duplicates_from_other_documents() -> None:
    page = fingerprint(ARTICLE.encode(), ARTICLE)
    edited = ARTICLE.replace("Paragraph 7 ", "Paragraph seven ")
    near = fingerprint(edited.encode(), edited)
    other_text = " ".join(
        f"<li>Entry {i}: a different list entirely, row {i}</li>" for i in range(60)
    )
    other = fingerprint(other_text.encode(), other_text)
    assert page.exact != near.exact
    assert page.minhash is not None and near.minhash is not None and other.minhash is not None
    assert similarity(page.minhash, near.minhash) >= 0.9
    assert similarity(page.minhash, other.minhash) < 0.2
    assert similarity(page.minhash, page.minhash) == 1.0


@pytest.mark.parametrize(
    "text", [ARTICLE, "", "<p>two words</p>", "<p>Naïve café, 4 words</p>" * 3]
)
def test_signatures_are_datasketchs_minhash_of_the_shingles(text: str) -> None:
    """The stored format: computed without datasketch on the crawl's path (it imports
    scipy), the values are those of its ``affine32`` MinHash, seed 1, of the same hashes."""
    sketch = MinHash(num_perm=NUM_PERM, seed=SEED, scheme="affine32", hashfunc=int)
    sketch.update_batch(shingle_hashes(visible_words(normalize_markup(text))).tolist())
    stored = fingerprint(text.encode(), text).minhash
    assert stored == signature_bytes(sketch.hashvalues)
    assert stored is not None
    assert signature_of(stored).jaccard(sketch) == 1.0


@pytest.mark.parametrize(
    ("body", "status", "flag", "kind"),
    [
        ("<title>Guide</title><p>Text</p>", 200, None, OK),
        ("<title>Guide</title><p>Text</p>", 500, None, ERROR),
        ("<title>Gone</title><p>Text</p>", 404, None, ERROR),
        ("<html><head><script>x()</script></head><body> </body></html>", 200, None, EMPTY),
        ("<title>Page not found</title><p>Try the search</p>", 200, None, SOFT_404),
        ("<h1>404 - Seite nicht gefunden</h1>", 200, None, SOFT_404),
        ("<title>Home</title><p>Welcome</p>", 200, "soft-404:homepage", SOFT_404),
        ("<title>Error handling in Python</title><p>Text</p>", 200, None, OK),
    ],
)
def test_kind_keeps_errors_empty_pages_and_soft_404s_apart(
    body: str, status: int, flag: str | None, kind: str
) -> None:
    assert fingerprint(body.encode(), body, status, flag).kind == kind


def test_binary_bodies_hash_their_bytes() -> None:
    found = fingerprint(b"\x89PNG\r\n", None)
    assert (found.norm, found.minhash, found.kind) == (RAW, None, OK)
    assert fingerprint(b"\x89PNG\r\n!", None).exact != found.exact
    assert fingerprint(b"", None).kind == EMPTY


@pytest.mark.parametrize(
    ("markup", "normalized"),
    [
        # The whole-document checks that let most pages skip a masking pass count any
        # non-ASCII character as a possible digit: \d is every Unicode decimal digit.
        ("at ١٢:٣٠:٤٥ sharp", "at <time> sharp"),
        ("café 12:00:01", "café <time>"),
        ("é" * 40 + " 3.11.7", "é" * 40 + " 3.11.7"),
        ("id 0123456789abcdef0123456789ABCDEF, v3.11", "id <id>, v3.11"),
        ("almost 0123456789abcdef0123456789ABCDE", "almost 0123456789abcdef0123456789ABCDE"),
        ("epoch 1764600803 then", "epoch <time> then"),
    ],
)
def test_masking_is_the_same_whatever_the_document_holds(markup: str, normalized: str) -> None:
    assert normalize_markup(markup) == normalized
