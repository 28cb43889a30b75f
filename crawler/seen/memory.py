"""In-process scalable Bloom filter: the default seen filter of an embedded crawl."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import xxhash
from rbloom import Bloom

from bloom_frontier.seen import check_filter_parameters

if TYPE_CHECKING:
    from typing import Self

    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

_SIGN_BIT = 1 << 127
_WRAP = 1 << 128
#: Each new layer gets this share of the previous layer's error rate, so the sum over all
#: layers stays below the configured rate (the scalable Bloom filter of Almeida et al. 2007,
#: as RedisBloom does it).
_TIGHTENING = 0.5
_MANIFEST = "seen-filter.json"


def _hash128(key: str) -> int:
    """A stable 128-bit hash (rbloom wants a signed i128; Python's hash() is per-process)."""
    value = xxhash.xxh3_128_intdigest(key.encode())
    return value - _WRAP if value >= _SIGN_BIT else value


def _identity(value: int) -> int:
    """rbloom hash function for keys that are already 128-bit hashes."""
    return value


@dataclass(slots=True)
class _Layer:
    bloom: Bloom
    capacity: int
    count: int = 0


class MemoryBloomSeenFilter:
    """A scalable Bloom filter held in this process.

    Starts with one layer of ``capacity`` keys at ``error_rate * (1 - 0.5)``; when a layer is
    full, a new one ``expansion`` times larger with half the error rate is added, so the
    overall false-positive rate stays below ``error_rate`` however far the crawl grows.
    With ``directory`` (Scrapy's ``JOBDIR``) the filter is saved on :meth:`close` and loaded
    again on start, so a paused crawl resumes without refetching.
    """

    def __init__(
        self,
        capacity: int,
        error_rate: float,
        expansion: int = 2,
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        check_filter_parameters(capacity, error_rate, expansion)
        self.capacity = capacity
        self.error_rate = error_rate
        self.expansion = expansion
        self.directory = Path(directory) if directory else None
        self._layers: list[_Layer] = []
        if self.directory and (self.directory / _MANIFEST).exists():
            self._load(self.directory)
        else:
            self._add_layer()

    @classmethod
    def from_settings(cls, settings: BaseSettings, directory: str | None = None) -> Self:
        return cls(
            capacity=settings.getint("SEEN_FILTER_CAPACITY"),
            error_rate=settings.getfloat("SEEN_FILTER_ERROR_RATE"),
            expansion=settings.getint("SEEN_FILTER_EXPANSION"),
            directory=directory,
        )

    def __len__(self) -> int:
        """Number of keys added (new ones only)."""
        return sum(layer.count for layer in self._layers)

    @property
    def size_in_bytes(self) -> int:
        return sum(layer.bloom.size_in_bits for layer in self._layers) // 8

    def add_many(self, keys: Sequence[str]) -> list[bool]:
        layers = self._layers
        current = layers[-1]
        fresh: list[bool] = []
        for key in keys:
            hashed = _hash128(key)
            if any(hashed in layer.bloom for layer in layers):
                fresh.append(False)
                continue
            if current.count >= current.capacity:
                current = self._add_layer()
            current.bloom.add(hashed)
            current.count += 1
            fresh.append(True)
        return fresh

    def contains_many(self, keys: Sequence[str]) -> list[bool]:
        """Per key, True if the filter (probably) holds it; adds nothing."""
        return [self.contains(key) for key in keys]

    def contains(self, key: str) -> bool:
        """True if the filter (probably) holds ``key``; adds nothing. Asked for each link a
        page yields (:meth:`bloom_frontier.frontier.memory.MemoryFrontier.seen_before`)."""
        hashed = _hash128(key)
        layers = self._layers
        if len(layers) == 1:  # the usual case, without a generator: asked for every link
            return hashed in layers[0].bloom
        return any(hashed in layer.bloom for layer in layers)

    def close(self) -> None:
        if self.directory:
            self._save(self.directory)

    def _add_layer(self) -> _Layer:
        index = len(self._layers)
        capacity = self.capacity * self.expansion**index
        rate = self.error_rate * (1 - _TIGHTENING) * _TIGHTENING**index
        layer = _Layer(Bloom(capacity, rate, hash_func=_identity), capacity)
        self._layers.append(layer)
        return layer

    def _save(self, directory: Path) -> None:
        """Write every layer, then the manifest (atomically), so a crash mid-save leaves the
        previous state readable."""
        directory.mkdir(parents=True, exist_ok=True)
        layers = []
        for index, layer in enumerate(self._layers):
            name = f"seen-filter.{index}.bloom"
            layer.bloom.save(str(directory / f"{name}.tmp"))
            os.replace(directory / f"{name}.tmp", directory / name)
            layers.append({"file": name, "capacity": layer.capacity, "count": layer.count})
        manifest = {
            "format": 1,
            "hash": "xxh3_128",
            "capacity": self.capacity,
            "error_rate": self.error_rate,
            "expansion": self.expansion,
            "layers": layers,
        }
        tmp = directory / f"{_MANIFEST}.tmp"
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, directory / _MANIFEST)
        logger.info("Saved seen filter (%d keys) to %s", len(self), directory)

    def _load(self, directory: Path) -> None:
        manifest = json.loads((directory / _MANIFEST).read_text())
        if manifest.get("format") != 1 or manifest.get("hash") != "xxh3_128":
            raise ValueError(f"{directory / _MANIFEST}: unknown seen-filter format")
        self.capacity = manifest["capacity"]
        self.error_rate = manifest["error_rate"]
        self.expansion = manifest["expansion"]
        for entry in manifest["layers"]:
            bloom = Bloom.load(str(directory / entry["file"]), _identity)
            self._layers.append(_Layer(bloom, entry["capacity"], entry["count"]))
        logger.info("Resumed seen filter (%d keys) from %s", len(self), directory)
