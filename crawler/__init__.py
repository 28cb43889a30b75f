"""A distributed Scrapy crawler frontier with canonical URL keys and Bloom-filter dedup.

The one line a Scrapy project adds to its ``settings.py``::

    ADDONS = {"bloom_frontier.Addon": 0}

``bloom_frontier.Addon`` is :class:`bloom_frontier.addon.BloomFrontierAddon`, imported on
first use, so that ``import bloom_frontier.canonical`` (pure URL functions) does not import
Scrapy's crawling machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bloom_frontier.addon import BloomFrontierAddon as Addon

__all__ = ["Addon"]


def __getattr__(name: str) -> Any:
    if name == "Addon":
        from bloom_frontier.addon import BloomFrontierAddon

        return BloomFrontierAddon
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
