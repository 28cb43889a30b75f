"""CPU-seconds of content fingerprints per normalization over a corpus of HTML pages.

Fingerprints (:func:`bloom_frontier.content.fingerprint.fingerprint`) every ``*.html`` file under
``--root`` (default: the Python docs of Debian's ``python3.11-doc``, ~530 pages of ~95 kB,
the clean site of ``bench/throughput.py``) under each normalization, best of ``--repeat``
passes of process CPU time, and counts distinct exact fingerprints (each page of the docs is
a different document: fewer would be a merge).

Then the accuracy of each signature's Jaccard estimate: ``--pairs`` pairs of pages, half a
page and a copy with up to 5% of its words replaced, half two random pages; for each, the
estimate (share of equal MinHash values) against the true Jaccard similarity of the 4-word
shingle sets (Python sets of words, no hashing). ``rms z`` is the error in units of the
estimate's standard error ``sqrt(J(1-J)/128)``: about 1 when the hashing adds no error.

    .venv/bin/python -m bench.fingerprints [--root DIR] [--repeat 3] [--pairs 400]

Figures (2026-12-01, branch i12-fp, the shared 2-CPU machine at load average 2.0-2.3, best
of 3, 530 pages): n1 as before this branch (e21152f's module) 2.21 CPU-s, n1 now 2.06
(MinHash one row per permutation), n2 0.94 CPU-s: 0.43x of before; 530 distinct exact
fingerprints under each. This script's own run, same load: n1 2.08, n2 0.96 (0.46x).
Accuracy, 400 pairs (true similarity 0.01-1.00): n1 mean error -0.005, mean absolute 0.019,
max 0.123, rms z 0.92; n2 mean error +0.002, mean absolute 0.019, max 0.148, rms z 0.94:
n2's numpy word hash estimates as well as n1's xxh32, both unbiased.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bloom_frontier.content.fingerprint import (
    N1,
    N2,
    NORMALIZATIONS,
    fingerprint,
    normalize_markup,
    normalize_n2,
    similarity,
    visible_words,
)

DOCS = Path("/usr/share/doc/python3.11/html")


#: The words each normalization's signature shingles, made without hashing.
WORDS: dict[str, Callable[[str], list[str]]] = {
    N1: lambda page: visible_words(normalize_markup(page)),
    N2: lambda page: [
        word.decode()
        for word in normalize_n2(page)[0].encode().lower().split()  # ASCII
    ],
}


def shingles(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + 4]) for i in range(len(words) - 3)}


def pairs_of(pages: list[str], count: int) -> list[tuple[str, str]]:
    """Half a page and a copy with up to 5% of its words replaced, half two random pages."""
    chosen = random.Random(7)
    pairs = []
    for _ in range(count // 2):
        page = chosen.choice(pages)
        words = page.split(" ")
        for i in chosen.sample(range(len(words)), int(len(words) * chosen.random() * 0.05)):
            words[i] = f"zz{i}"
        pairs.append((page, " ".join(words)))
    return pairs + [tuple(chosen.sample(pages, 2)) for _ in range(count - count // 2)]


def accuracy(norm: str, pairs: list[tuple[str, str]]) -> str:
    errors, zs, truths = [], [], []
    for a, b in pairs:
        left, right = shingles(WORDS[norm](a)), shingles(WORDS[norm](b))
        truth = len(left & right) / len(left | right)
        found = [fingerprint(b"", page, norm=norm).minhash for page in (a, b)]
        error = similarity(*found) - truth  # type: ignore[arg-type]
        errors.append(error)
        truths.append(truth)
        if 0 < truth < 1:
            zs.append(error / (truth * (1 - truth) / 128) ** 0.5)
    return (
        f"mean error {statistics.mean(errors):+.4f}, mean absolute "
        f"{statistics.mean(map(abs, errors)):.4f}, max {max(map(abs, errors)):.4f}, rms z "
        f"{statistics.mean(z * z for z in zs) ** 0.5:.2f}"
        f" (true {min(truths):.2f}-{max(truths):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=DOCS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=400)
    options = parser.parse_args()
    pages = [path.read_text(errors="replace") for path in sorted(options.root.rglob("*.html"))]
    if not pages:
        raise SystemExit(f"no *.html under {options.root} (apt-get install -y python3.11-doc)")
    size = sum(map(len, pages)) / len(pages) / 1000
    print(f"{len(pages)} pages of {size:.0f} kB (characters) on average, {options.root}")
    best: dict[str, float] = {}
    distinct: dict[str, int] = {}
    for _ in range(options.repeat):
        for norm in NORMALIZATIONS:
            started = time.process_time()
            exact = {fingerprint(b"", page, norm=norm).exact for page in pages}
            spent = time.process_time() - started
            best[norm] = min(best.get(norm, spent), spent)
            distinct[norm] = len(exact)
    for norm in NORMALIZATIONS:
        print(f"{norm}: {best[norm]:.2f} CPU-s, {distinct[norm]} distinct exact fingerprints")
    n1, n2 = best.get("n1"), best.get("n2")
    if n1 and n2:
        print(f"n2 / n1: {n2 / n1:.2f}x")
    if options.pairs:
        pairs = pairs_of(pages, options.pairs)
        for norm in NORMALIZATIONS:
            print(f"{norm} Jaccard estimate, {len(pairs)} pairs: {accuracy(norm, pairs)}")


if __name__ == "__main__":
    main()
