"""The retry outbox: a worker's answers to the frontier, delivered in order, never dropped
while Redis is away.

An answer (admit a page's links and release its lease, record a failure) is appended to the
outbox and delivered at once when Redis takes it. When Redis is unreachable or refuses
writes (restart, AOF loading, failover, out of memory), it waits, with every later answer
behind it, and is retried with backoff until Redis takes it. A script is never
half-applied: Redis refuses it before its first write, or runs it to the end.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

#: Errors that mean "Redis cannot take this right now" (down, restarting, loading its AOF,
#: failing over, out of memory): retry later, never drop what it was asked.
REDIS_UNAVAILABLE = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)
#: Seconds between attempts to deliver the outbox while Redis is unreachable, doubling.
OUTBOX_RETRY_MIN, OUTBOX_RETRY_MAX = 0.05, 2.0


@dataclass
class Answer:
    """One update waiting in the outbox: how to deliver it and what to do with its reply."""

    #: What it is, for the log.
    name: str
    #: Sends it; raises ``REDIS_UNAVAILABLE`` errors to be called again later.
    deliver: Callable[[], Any]
    #: Handles the reply; returns whether the update changed anything.
    on_reply: Callable[[Any], bool]
    #: None until delivered, then what ``on_reply`` returned.
    outcome: bool | None = None


class Outbox:
    """Answers waiting for Redis, delivered in order (see the module docstring).

    Stats: ``frontier/redis_unavailable`` (attempts Redis refused or missed),
    ``frontier/errors`` (answers Redis rejected for good: a bug, logged, dropped).
    """

    def __init__(self, stats: StatsCollector) -> None:
        self.stats = stats
        self._answers: deque[Answer] = deque()
        self._flushing = False
        self._retry_delay = OUTBOX_RETRY_MIN
        self._retry_call: Any = None

    def __len__(self) -> int:
        """Answers not yet delivered."""
        return len(self._answers)

    def send(self, answer: Answer, now: bool = True) -> None:
        """Deliver ``answer`` after those already waiting; keep it if Redis is away.
        ``now=False`` only queues it (e.g. from a garbage collector callback)."""
        self._answers.append(answer)
        if now:
            self.flush()
        else:
            self._schedule_flush(0)

    def flush(self) -> bool:
        """Deliver waiting answers in order; True when none is left waiting."""
        if self._flushing:
            return not self._answers
        self._flushing = True
        try:
            while self._answers:
                answer = self._answers[0]
                try:
                    reply = answer.deliver()
                except REDIS_UNAVAILABLE as exc:
                    self.stats.inc_value("frontier/redis_unavailable")
                    if self._retry_delay == OUTBOX_RETRY_MIN:
                        logger.warning(
                            "Redis unavailable (%s); %d frontier updates wait and are retried",
                            exc,
                            len(self._answers),
                        )
                    self._schedule_flush(self._retry_delay)
                    self._retry_delay = min(self._retry_delay * 2, OUTBOX_RETRY_MAX)
                    return False
                except redis.RedisError:
                    # A reply no retry can change (a bug, or a key of the wrong type):
                    # say so loudly, keep crawling.
                    logger.exception("Frontier update %s failed; dropped", answer.name)
                    self.stats.inc_value("frontier/errors")
                    self._answers.popleft()
                    continue
                self._answers.popleft()
                answer.outcome = answer.on_reply(reply)
            if self._retry_delay != OUTBOX_RETRY_MIN:
                logger.info("Redis is back; frontier updates delivered")
            self._retry_delay = OUTBOX_RETRY_MIN
            return True
        finally:
            self._flushing = False

    def _schedule_flush(self, delay: float) -> None:
        if self._retry_call is not None and self._retry_call.active():
            return
        from twisted.internet import reactor

        self._retry_call = reactor.callLater(delay, self.flush)  # type: ignore[attr-defined]

    def close(self) -> bool:
        """Deliver what can be delivered and stop retrying; True when nothing is left."""
        delivered = self.flush()
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        return delivered
