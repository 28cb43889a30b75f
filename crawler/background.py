"""Blocking I/O off Twisted's loop: one worker thread per resource, results back on the loop.

Redis calls (a stopped or failing-over server blocks a socket for seconds) and database
writes (a locked SQLite file) run in a :class:`BackgroundThread`; the loop only hands them
over and gets a Deferred fired, on the loop, with the result. One thread per resource keeps
its calls in the order they were handed over (answers to the frontier, flushes of the
record store), which their guarantees rely on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

T = TypeVar("T")


def pause_off_loop(seconds: float) -> None:
    """Wait ``seconds`` between two attempts of blocking work (a write retried on a locked
    database), in a :class:`BackgroundThread` or with no loop running (a command). Refused
    on Twisted's running loop, where it would freeze every download: such work belongs in a
    :class:`BackgroundThread`."""
    from twisted.internet import reactor
    from twisted.python import threadable

    if reactor.running and threadable.isInIOThread():  # type: ignore[attr-defined]
        raise RuntimeError("a blocking wait on Twisted's loop: run the work in a BackgroundThread")
    time.sleep(seconds)


class BackgroundThread:
    """Runs calls one at a time, in order, in a thread of its own (started on first use)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, function: Callable[..., T], *args: Any) -> Deferred[T]:
        """Call ``function(*args)`` in the thread; the Deferred fires on the loop with its
        result or its exception."""
        from twisted.internet import reactor

        deferred: Deferred[T] = Deferred()
        future = self._pool().submit(function, *args)

        def settle(done: Future[T]) -> None:
            error = done.exception()
            if error is None:
                deferred.callback(done.result())
            else:
                deferred.errback(error)

        future.add_done_callback(
            lambda done: reactor.callFromThread(settle, done)  # type: ignore[attr-defined]
        )
        return deferred

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=self.name)
            return self._executor

    def close(self) -> None:
        """Wait for the calls handed over so far; later calls start a new thread."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)


class PeriodicThread:
    """Calls ``function()`` every ``interval`` seconds in a thread of its own, whatever the
    loop is doing: for a deadline that a loop kept busy for seconds (a huge page parsed on a
    loaded machine) must not miss, such as extending leases before they expire. :meth:`wake`
    has it call ``function()`` at once instead (``interval`` None: only then), once for all
    the wake-ups that came while it was busy. The function hands anything for the loop back
    with ``reactor.callFromThread``."""

    def __init__(self, name: str, interval: float | None, function: Callable[[], object]) -> None:
        self.name = name
        self.interval = interval
        self.function = function
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Call the function now (from any thread), without waiting for it."""
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval)
            if self._stop.is_set():
                return
            self._wake.clear()  # before the call: a wake-up during it calls again
            try:
                self.function()
            except Exception:  # keep going: the next call may succeed
                logger.exception("%s failed", self.name)

    def stop(self, wait: float = 1.0) -> None:
        """Stop after the call under way (waiting for it up to ``wait`` seconds)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(wait)
            self._thread = None
