"""One process at a time on a ``JOBDIR``: an embedded crawl, or ``scrapy rebuild-filter``.

Scrapy's ``JOBDIR`` is not made for two processes: a crawl writes its seen filter and request
queue there, and ``scrapy rebuild-filter`` replaces the filter. Whoever uses it holds an
exclusive ``fcntl.flock`` on ``JOBDIR/crawl.lock`` (released by the kernel when the process
ends, even by ``kill -9``: no stale lock to clean up); whoever comes second is refused with
:class:`JobdirBusy`, naming the holder written in the file.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

#: The lock file in ``JOBDIR``.
LOCK_FILE = "crawl.lock"


class JobdirBusy(RuntimeError):
    """Another process holds the ``JOBDIR``."""


class JobdirLock:
    """The exclusive lock on a ``JOBDIR``, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, jobdir: Path | str) -> None:
        self.path = Path(jobdir, LOCK_FILE)
        self._file: IO[str] | None = None

    def acquire(self, holder: str) -> None:
        """Take the lock for ``holder`` (what this process is, e.g. ``scrapy crawl``), or
        :class:`JobdirBusy` at once if another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = self.path.open("a+")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            other = file.read().strip() or "another process"
            file.close()
            raise JobdirBusy(
                f"{self.path.parent} is in use by {other}: stop it first (Ctrl-C pauses a "
                "crawl), then run again"
            ) from None
        file.seek(0)
        file.truncate()
        file.write(f"{holder} (pid {os.getpid()})\n")
        file.flush()
        self._file = file

    def release(self) -> None:
        """Let go of the lock (closing the file releases it)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> JobdirLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
