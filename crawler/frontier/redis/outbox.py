"""The retry outbox: a worker's answers to the frontier, delivered in order, never dropped
while Redis is away.

An answer (admit a page's links and release its lease, record a failure) is appended to the
outbox and delivered at once when Redis takes it: in a crawl, by the frontier's
:class:`bloom_frontier.background.BackgroundThread`, so Twisted's loop never waits on Redis (its
reply is handled back on the loop); elsewhere (commands, tests) in the caller's thread. An
answer may wait for a Deferred first (``after``: the page's records committed to the store
before its lease is released), and every later answer waits behind it. The answers ready at
the head go to the background thread together (up to ``BATCH_MAX``) in one hand-over:
delivered one loop turn each, a busy worker got a few answers a second through, while the
leases they release still counted against their host's crawl-wide concurrency. A lease whose
answer waits here is still this worker's: the heartbeat extends it (:meth:`Outbox.leases`).

When Redis is unreachable or refuses writes (restart, AOF loading, failover, out of
memory), an answer waits, with every later answer behind it, and is retried with backoff
until Redis takes it. A script is never half-applied: Redis refuses it before its first
write, or runs it to the end. When the crawl's state in Redis is gone
(:class:`.protocol.FrontierGone`: restarted without persistence, flushed, evicted, a key
holding requests overwritten), no answer can land: the outbox drops them, and the worker
stops (:meth:`Outbox.gone`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from bloom_frontier.frontier.redis.protocol import FrontierGone

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector
    from twisted.internet.defer import Deferred

    from bloom_frontier.background import BackgroundThread

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
#: Most answers handed to the background thread at once (a heartbeat queued behind them
#: waits for all of them, a few milliseconds each).
BATCH_MAX = 64


@dataclass
class Answer:
    """One update waiting in the outbox: how to deliver it and what to do with its reply."""

    #: What it is, for the log.
    name: str
    #: Sends it; raises ``REDIS_UNAVAILABLE`` errors to be called again later.
    deliver: Callable[[], Any]
    #: Handles the reply; returns whether the update changed anything.
    on_reply: Callable[[Any], bool]
    #: Fired when the answer may be sent (None: at once).
    after: Deferred[Any] | None = None
    #: The lease it releases (None: none), extended by the heartbeat while it waits.
    lease: str | None = None
    #: The outbox flushes again when ``after`` fires.
    awaited: bool = False
    #: When it was sent (``time.monotonic()``).
    sent_at: float = field(default_factory=time.monotonic)
    #: None until delivered, then what ``on_reply`` returned.
    outcome: bool | None = None
    #: An attempt is under way in the background thread.
    started: bool = False
    #: Set in the background thread: an attempt ended, with ``reply`` or ``error``.
    attempted: bool = False
    reply: Any = None
    error: BaseException | None = None

    def attempt(self) -> None:
        """One delivery attempt (in the background thread), its result kept."""
        try:
            self.reply, self.error = self.deliver(), None
        except BaseException as error:  # handed back to the loop, which decides
            self.reply, self.error = None, error
        self.attempted = True


class Outbox:
    """Answers waiting for Redis, delivered in order (see the module docstring).

    Stats: ``frontier/redis_unavailable`` (attempts Redis refused or missed),
    ``frontier/errors`` (answers Redis rejected for good: a bug, logged, dropped),
    ``frontier/answer_longest_wait_ms`` (from sent to delivered, its ``after`` included).
    """

    def __init__(self, stats: StatsCollector, background: BackgroundThread | None = None) -> None:
        self.stats = stats
        #: Where answers are sent from; None: in the caller's thread.
        self.background = background
        self._answers: deque[Answer] = deque()
        self._flushing = False
        self._retry_delay = OUTBOX_RETRY_MIN
        self._retry_call: Any = None
        #: Called on the loop after answers released leases (their hosts have room again).
        self.on_released: Callable[[], None] | None = None
        #: Stops the worker when the crawl's state is gone (None: :meth:`gone` raises).
        self.on_gone: Callable[[FrontierGone], None] | None = None
        #: Why the crawl's state is gone, once it is (the worker stops; nothing is drained).
        self.lost: FrontierGone | None = None

    def __len__(self) -> int:
        """Answers not yet delivered."""
        return len(self._answers)

    def send(self, answer: Answer) -> None:
        """Deliver ``answer`` after those already waiting; keep it if Redis is away."""
        self._answers.append(answer)
        self.flush()

    def leases(self, *, unsent: bool = False) -> list[str]:
        """The leases the waiting answers release, still this worker's until delivered
        (``unsent``: of those not handed to the background thread yet). Safe to call from
        another thread (the heartbeat's)."""
        answers = tuple(self._answers)  # one step under the GIL: the loop may append
        return [
            answer.lease
            for answer in answers
            if answer.lease is not None and not (unsent and answer.started)
        ]

    def waiting_for(self) -> list[Deferred[Any]]:
        """The ``after`` of every waiting answer that may not be sent yet."""
        return [a.after for a in self._answers if a.after is not None and not a.after.called]

    def flush(self) -> bool:
        """Deliver waiting answers in order; True when none is left waiting. In the
        background, only starts the next deliveries (False while some are under way)."""
        if self._flushing:
            return not self._answers
        self._flushing = True
        try:
            if self.background is not None:
                if self._answers:
                    self._start()
                return not self._answers
            while self._answers:
                answer = self._answers[0]
                if answer.after is not None and not answer.after.called:
                    return False  # kept: its lease expires unless it fires (records unsaved)
                answer.attempt()
                if not self._settle(answer):
                    return False
            return True
        finally:
            self._flushing = False

    def _start(self) -> None:
        """Hand the answers ready at the head (up to ``BATCH_MAX``) to the background
        thread in one call, unless some are there already; their results come back to
        :meth:`_settled`. An answer still waiting for its ``after`` ends the batch."""
        if self._answers[0].started:
            return
        batch: list[Answer] = []
        for answer in self._answers:
            if answer.after is not None and not answer.after.called:
                if not batch and not answer.awaited:  # flush again once it may be sent
                    answer.awaited = True
                    answer.after.addBoth(self._after_fired)
                break
            batch.append(answer)
            if len(batch) == BATCH_MAX:
                break
        if not batch:
            return
        for answer in batch:
            answer.started = True
        assert self.background is not None
        self.background.run(_attempt_in_order, batch).addBoth(lambda _: self._settled(batch))

    def _after_fired(self, _: object) -> None:
        """What the answer waited for is done (its receivers logged any error)."""
        self.flush()

    def _settled(self, batch: list[Answer]) -> None:
        """Back on the loop: handle the attempts' results in order, go on with the next
        answers."""
        for answer in batch:
            answer.started = False
        settled = self._settle_attempted()
        released = any(answer.lease and answer.outcome for answer in batch)
        if released and self.on_released is not None:
            self.on_released()
        if settled:
            self.flush()

    def _settle_attempted(self) -> bool:
        """Handle the attempted answers at the head, in order; False when Redis is away."""
        while self._answers and self._answers[0].attempted:
            if not self._settle(self._answers[0]):
                return False
        return True

    def _settle(self, answer: Answer) -> bool:
        """Handle the result of an attempt at the first answer; True to go on with the
        next one, False when Redis is away (retried later)."""
        answer.attempted = False
        error = answer.error
        if isinstance(error, REDIS_UNAVAILABLE):
            self.stats.inc_value("frontier/redis_unavailable")
            if self._retry_delay == OUTBOX_RETRY_MIN:
                logger.warning(
                    "Redis unavailable (%s); %d frontier updates wait and are retried",
                    error,
                    len(self._answers),
                )
            self._schedule_flush(self._retry_delay)
            self._retry_delay = min(self._retry_delay * 2, OUTBOX_RETRY_MAX)
            return False
        self._answers.popleft()
        if isinstance(error, FrontierGone):
            self.gone(error)
        elif isinstance(error, redis.RedisError):
            # A reply no retry can change (a bug, or a key of the wrong type): say so
            # loudly, keep crawling.
            logger.error("Frontier update %s failed; dropped: %r", answer.name, error)
            self.stats.inc_value("frontier/errors")
        elif error is not None:
            raise error
        else:
            answer.outcome = answer.on_reply(answer.reply)
            waited_ms = round((time.monotonic() - answer.sent_at) * 1000)
            self.stats.max_value("frontier/answer_longest_wait_ms", waited_ms)
        if self._retry_delay != OUTBOX_RETRY_MIN and not self._answers:
            logger.info("Redis is back; frontier updates delivered")
            self._retry_delay = OUTBOX_RETRY_MIN
        return True

    def gone(self, error: FrontierGone) -> None:
        """The crawl's state in Redis is gone: the first time, stop the worker
        (:attr:`on_gone`), or raise ``error`` without one (a command, a test); answers
        meeting it later are dropped silently (the worker says it once)."""
        if self.lost is not None:
            return
        self.lost = error
        self.stats.set_value("frontier/lost", 1)
        if self.on_gone is None:
            raise error
        self.on_gone(error)

    def _schedule_flush(self, delay: float) -> None:
        if self._retry_call is not None and self._retry_call.active():
            return
        from twisted.internet import reactor

        self._retry_call = reactor.callLater(delay, self.flush)  # type: ignore[attr-defined]

    def close(self) -> bool:
        """Deliver what can be delivered, from now on in the caller's thread, and stop
        retrying; True when nothing is left. An answer whose ``after`` has not fired (its
        page's records not committed: a crawl stopped by a signal, or a store that cannot
        write) stays undelivered, with those behind it: their leases expire and the pages
        are fetched again."""
        if self.background is not None:
            self.background.close()  # the attempt under way ends
            self.background = None
            self._settle_attempted()
        delivered = self.flush()
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        return delivered


def _attempt_in_order(batch: list[Answer]) -> None:
    """Attempt each answer of ``batch`` in order (in the background thread), stopping at the
    first Redis cannot take: a later answer is never delivered before an earlier one."""
    for answer in batch:
        answer.attempt()
        if isinstance(answer.error, REDIS_UNAVAILABLE):
            return
