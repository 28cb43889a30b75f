"""Candidates for near-duplicate content: MinHash LSH banding over stored signatures.

A signature of ``NUM_PERM`` values is cut into ``b`` bands of ``r`` values; two documents are
candidates when one band of theirs is equal, which happens with probability
``1 - (1 - s**r)**b`` for a Jaccard similarity ``s``. :func:`band_shape` chooses ``(b, r)``
for a threshold as datasketch's ``MinHashLSH`` does (the least sum of the false-positive
area below the threshold and the false-negative area above it, weighted equally), so
``scrapy same-content`` finds the same candidates without datasketch and scipy (tested
equal). Candidates are then checked on their whole signatures by the caller.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from functools import lru_cache
from typing import Generic, TypeVar

import numpy as np

from bloom_frontier.content.fingerprint import NUM_PERM

K = TypeVar("K", bound=Hashable)

#: Gauss-Legendre nodes and weights on [-1, 1]: exact for polynomials of degree up to
#: 2 * 65 - 1, and the candidate probability of ``b`` bands of ``r`` values has degree
#: ``b * r <= NUM_PERM``.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(NUM_PERM // 2 + 1)


def _integral(values_at: np.ndarray, low: float, high: float) -> np.ndarray:
    """Integrals over ``[low, high]`` of polynomials given by ``values_at(points)``, one
    row per polynomial, a column per Gauss-Legendre node."""
    return values_at @ _WEIGHTS * (high - low) / 2


@lru_cache(maxsize=64)
def band_shape(threshold: float, num_perm: int = NUM_PERM) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows <= num_perm`` whose candidate probability best
    separates similarities below ``threshold`` from those above it (module docstring).

    >>> band_shape(0.9)
    (5, 25)
    """
    shapes = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]
    bands = np.array([b for b, _ in shapes], dtype=float)[:, None]
    rows = np.array([r for _, r in shapes], dtype=float)[:, None]

    def points(low: float, high: float) -> np.ndarray:
        return (high - low) / 2 * _NODES + (high + low) / 2

    below, above = points(0.0, threshold), points(threshold, 1.0)
    false_positive = _integral(1 - (1 - below**rows) ** bands, 0.0, threshold)
    false_negative = _integral((1 - above**rows) ** bands, threshold, 1.0)
    error = false_positive * 0.5 + false_negative * 0.5
    return shapes[int(np.argmin(error))]  # the first of equal errors, as datasketch


class BandIndex(Generic[K]):
    """Signatures by their bands, for :meth:`query`: the keys inserted so far that share a
    band with a signature."""

    def __init__(self, threshold: float, num_perm: int = NUM_PERM) -> None:
        self.bands, self.rows = band_shape(threshold, num_perm)
        self._tables: list[defaultdict[bytes, list[K]]] = [
            defaultdict(list) for _ in range(self.bands)
        ]

    def _bands(self, signature: bytes) -> list[bytes]:
        """The band slices of a stored signature (little-endian uint32 values)."""
        width = 4 * self.rows
        return [signature[i * width : (i + 1) * width] for i in range(self.bands)]

    def insert(self, key: K, signature: bytes) -> None:
        for table, band in zip(self._tables, self._bands(signature), strict=True):
            table[band].append(key)

    def query(self, signature: bytes) -> set[K]:
        found: set[K] = set()
        for table, band in zip(self._tables, self._bands(signature), strict=True):
            found.update(table.get(band, ()))
        return found
