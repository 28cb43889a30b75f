"""Content fingerprints: the normalization pinned by vectors, exact and near-duplicate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from datasketch import MinHash

from bloom_frontier.commands.same_content import groups
from bloom_frontier.content import fingerprint as content_fingerprint
from bloom_frontier.content.fingerprint import (
    EMPTY,
    ERROR,
    N1,
    N2,
    NORMALIZATION,
    NORMALIZATIONS,
    NUM_PERM,
    OK,
    RAW,
    SEED,
    SOFT_404,
    exact_and_shingles_n2,
    fingerprint,
    normalize_markup,
    shingle_hashes,
    signature_bytes,
    similarity,
    visible_words,
)

VECTORS = json.loads((Path(__file__).parent / "data" / "content_normalization.json").read_text())


@pytest.mark.parametrize("case", VECTORS["normalize"], ids=lambda case: case["name"])
def test_normalization_vectors(case: dict[str, str]) -> None:
    assert normalize_markup(case["input"]) == case["normalized"]


@pytest.mark.parametrize("norm", NORMALIZATIONS)
@pytest.mark.parametrize("case", VECTORS["pairs"], ids=lambda case: case["name"])
def test_equal_documents_share_the_exact_fingerprint(case: dict[str, object], norm: str) -> None:
    a, b = str(case["a"]), str(case["b"])
    found = [fingerprint(text.encode(), text, norm=norm).exact for text in (a, b)]
    assert (found[0] == found[1]) is case["same"]


@pytest.mark.parametrize("case", VECTORS["n2_pairs"], ids=lambda case: case["name"])
def test_n2_counts_text_and_link_targets_not_per_request_noise(case: dict[str, object]) -> None:
    """``n2``: CSRF tokens, nonces, hidden values, comments, times and ids do not count; a
    word, a link, image or form target, a date or a version does."""
    a, b = str(case["a"]), str(case["b"])
    same = fingerprint(a.encode(), a, norm=N2).exact == fingerprint(b.encode(), b, norm=N2).exact
    assert same is case["same"]


@pytest.mark.parametrize(
    ("norm", "case"),
    [(N1, case) for case in VECTORS["exact"]] + [(N2, case) for case in VECTORS["n2_exact"]],
    ids=lambda value: value if isinstance(value, str) else value["input"][:20],
)
def test_exact_fingerprint_is_stable(norm: str, case: dict[str, str]) -> None:
    found = fingerprint(case["input"].encode(), case["input"], norm=norm)
    assert (found.exact, found.norm) == (case["exact"], norm)


def test_fingerprints_are_made_under_n2_by_default() -> None:
    assert NORMALIZATION == N2
    assert fingerprint(b"<p>Hi</p>", "<p>Hi</p>").norm == N2


ARTICLE = " ".join(
    f"<p>Paragraph {i} tells the story of item number {i} in detail.</p>" for i in range(60)
)


@pytest.mark.parametrize("norm", NORMALIZATIONS)
def test_minhash_tells_near_duplicates_from_other_documents(norm: str) -> None:
    page = fingerprint(ARTICLE.encode(), ARTICLE, norm=norm)
    edited = ARTICLE.replace("Paragraph 7 ", "Paragraph seven ")
    near = fingerprint(edited.encode(), edited, norm=norm)
    other_text = " ".join(
        f"<li>Entry {i}: a different list entirely, row {i}</li>" for i in range(60)
    )
    other = fingerprint(other_text.encode(), other_text, norm=norm)
    assert page.exact != near.exact
    assert page.minhash is not None and near.minhash is not None and other.minhash is not None
    assert similarity(page.minhash, near.minhash) >= 0.9
    assert similarity(page.minhash, other.minhash) < 0.2
    assert similarity(page.minhash, page.minhash) == 1.0


def _shingle_set(markup: str) -> set[tuple[str, ...]]:
    """The 4-word shingles of the visible words, made with plain Python (no hashing)."""
    words = visible_words(markup)
    return {tuple(words[i : i + 4]) for i in range(len(words) - 3)}


@pytest.mark.parametrize("changed", [0, 3, 10, 20, 30, 45, 60])
def test_n2_signatures_estimate_the_jaccard_similarity_of_the_shingles(changed: int) -> None:
    """The numpy word hash does not bias the estimate: with 128 values its standard error is
    at most 0.044, and the estimate stays within 3 of them of the true Jaccard similarity."""
    edited = ARTICLE
    for i in range(changed):
        edited = edited.replace(f"item number {i} ", f"thing no. {i} ")
    a, b = _shingle_set(ARTICLE), _shingle_set(edited)
    truth = len(a & b) / len(a | b)
    found = [fingerprint(text.encode(), text, norm=N2).minhash for text in (ARTICLE, edited)]
    assert found[0] is not None and found[1] is not None
    assert abs(similarity(found[0], found[1]) - truth) <= 3 * 0.5 / NUM_PERM**0.5


def test_long_pages_are_hashed_in_bounded_pieces_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pages longer than a chunk or a MinHash block give what one pass would give."""
    whole = fingerprint(ARTICLE.encode(), ARTICLE)
    monkeypatch.setattr(content_fingerprint, "_CHUNK", 64)
    monkeypatch.setattr(content_fingerprint, "_BLOCK", 7)
    assert fingerprint(ARTICLE.encode(), ARTICLE) == whole


@pytest.mark.parametrize(
    "text",
    ["", "<p>one</p>", "<p>a b a b a b a b a</p>", "<nav>home docs</nav>" * 50 + ARTICLE],
)
@pytest.mark.parametrize("norm", NORMALIZATIONS)
def test_a_pages_shingles_are_counted_once_in_order(text: str, norm: str) -> None:
    """Repeated shingles (a page's navigation, boilerplate) count once: the signature is
    that of the set, held sorted, as ``np.unique`` gives it."""
    if norm == N1:
        words = visible_words(normalize_markup(text))
        shingles = shingle_hashes(words)
        hashes = content_fingerprint.shingle_hashes(words + words)
    else:
        shingles = exact_and_shingles_n2(text)[1]
        hashes = exact_and_shingles_n2(text + " " + text)[1]
    assert shingles.tolist() == sorted(set(shingles.tolist()))
    assert set(shingles.tolist()) <= set(hashes.tolist())
    assert content_fingerprint._distinct(np.concatenate([shingles, shingles[::-1]])).tolist() == (
        np.unique(shingles).tolist()
    )


def test_n2_words_are_hashed_alike_wherever_they_stand() -> None:
    """Word hashes depend on the word only: a shingle keeps its hash when text moves."""
    _, alone = exact_and_shingles_n2("<p>alpha beta gamma delta</p>")
    _, moved = exact_and_shingles_n2("<p>x y z</p><p>Alpha BETA gamma delta</p>")
    assert set(alone.tolist()) < set(moved.tolist())


@pytest.mark.parametrize(
    "text", [ARTICLE, "", "<p>two words</p>", "<p>Naïve café, 4 words</p>" * 3]
)
@pytest.mark.parametrize("norm", NORMALIZATIONS)
def test_signatures_are_datasketchs_minhash_of_the_shingles(text: str, norm: str) -> None:
    """The stored format: computed without datasketch on the crawl's path (it imports
    scipy), the values are those of its ``affine32`` MinHash, seed 1, of the same hashes."""
    sketch = MinHash(num_perm=NUM_PERM, seed=SEED, scheme="affine32", hashfunc=int)
    if norm == N1:
        shingles = shingle_hashes(visible_words(normalize_markup(text)))
    else:
        shingles = exact_and_shingles_n2(text)[1]
    sketch.update_batch(shingles.tolist())
    stored = fingerprint(text.encode(), text, norm=norm).minhash
    assert stored == signature_bytes(sketch.hashvalues)


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
@pytest.mark.parametrize("norm", NORMALIZATIONS)
def test_kind_keeps_errors_empty_pages_and_soft_404s_apart(
    body: str, status: int, flag: str | None, kind: str, norm: str
) -> None:
    assert fingerprint(body.encode(), body, status, flag, norm).kind == kind


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


def test_same_content_never_compares_fingerprints_of_two_normalizations() -> None:
    """A store holding pages fingerprinted before ``n2`` (``n1``) and after: equal hashes or
    signatures of different normalizations group nothing, equal ones of one do."""
    signature = fingerprint(ARTICLE.encode(), ARTICLE).minhash

    def page(query: str, norm: str, exact: str) -> dict[str, object]:
        return {
            "final_url": f"https://e.org/a?{query}",
            "key": f"r2|https://e.org/a?{query}",
            "content_kind": OK,
            "content_norm": norm,
            "content_hash": exact,
            "content_minhash": signature,
        }

    assert groups([page("x=1", N1, "f" * 32), page("x=2", N2, "f" * 32)]) == []
    alike = groups([page("x=1", N2, "f" * 32), page("x=2", N2, "e" * 32)])
    assert [group["match"] for group in alike] == ["near"]
    assert groups([page("x=1", N2, "f" * 32), page("x=2", N2, "f" * 32)])[0]["match"] == "exact"


def test_the_crawl_fingerprints_under_the_normalization_it_is_set_to() -> None:
    """``CONTENT_NORMALIZATION``: ``n2`` by default, ``n1`` kept for stores made before it,
    anything else refused with a one-line error."""
    from scrapy.utils.test import get_crawler

    from bloom_frontier.content.extension import ContentFingerprints

    addon = {"ADDONS": {"bloom_frontier.Addon": 0}}
    assert ContentFingerprints.from_crawler(get_crawler(settings_dict=addon)).norm == N2
    n1 = get_crawler(settings_dict={**addon, "CONTENT_NORMALIZATION": "n1"})
    assert ContentFingerprints.from_crawler(n1).norm == N1
    with pytest.raises(ValueError, match="CONTENT_NORMALIZATION must be one of"):
        n9 = get_crawler(settings_dict={**addon, "CONTENT_NORMALIZATION": "n9"})
        ContentFingerprints.from_crawler(n9)
