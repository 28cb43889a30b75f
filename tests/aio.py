"""Running a coroutine to its end in a test, leaving the thread's current event loop alone."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_on_own_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine``'s result, run on a loop of its own. Unlike :func:`asyncio.run`, which
    leaves the thread with no current loop, so that a later test's Scrapy component calling
    :func:`asyncio.get_event_loop` (the downloader's slot collector) fails."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()
