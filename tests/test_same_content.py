"""``scrapy same-content``'s near-duplicate candidates: the project's own LSH banding finds
what datasketch's ``MinHashLSH`` (the suite's reference, not a dependency) finds."""

from __future__ import annotations

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH
from datasketch.lsh import _optimal_param

from bloom_frontier.content.fingerprint import NUM_PERM, SEED, signature_bytes
from bloom_frontier.content.lsh import BandIndex, band_shape


@pytest.mark.parametrize("threshold", [round(0.05 * step, 2) for step in range(1, 21)])
def test_bands_are_those_datasketch_chooses(threshold: float) -> None:
    assert band_shape(threshold) == _optimal_param(threshold, NUM_PERM, 0.5, 0.5)


def test_near_one_means_every_value_equal() -> None:
    """One band of every value (datasketch's index refuses a single band)."""
    index: BandIndex[str] = BandIndex(1.0)
    values = np.arange(NUM_PERM, dtype=np.uint32)
    index.insert("page", signature_bytes(values))
    assert index.query(signature_bytes(values)) == {"page"}
    values[-1] += 1
    assert index.query(signature_bytes(values)) == set()


def signatures(count: int, seed: int) -> list[np.ndarray]:
    """``count`` signatures of documents related by chance: each a copy of one of 5 bases
    with a random share of its values replaced, so similarities spread over 0-1."""
    rng = np.random.default_rng(seed)
    bases = rng.integers(0, 1 << 32, (5, NUM_PERM), dtype=np.uint32)
    found = []
    for _ in range(count):
        values = bases[rng.integers(5)].copy()
        changed = rng.random(NUM_PERM) < rng.random() * 0.6
        values[changed] = rng.integers(0, 1 << 32, int(changed.sum()), dtype=np.uint32)
        found.append(values)
    return found


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.9, 0.95])
def test_candidates_are_those_of_datasketchs_index(threshold: float) -> None:
    ours: BandIndex[int] = BandIndex(threshold)
    theirs = MinHashLSH(threshold=threshold, num_perm=NUM_PERM)
    found = 0
    for number, values in enumerate(signatures(300, seed=int(threshold * 100))):
        stored = signature_bytes(values)
        sketch = MinHash(num_perm=NUM_PERM, seed=SEED, scheme="affine32", hashvalues=values)
        candidates = ours.query(stored)
        assert candidates == set(theirs.query(sketch)), number
        found += len(candidates)
        ours.insert(number, stored)
        theirs.insert(number, sketch)
    assert found > 0
