"""The Lua boundary's types (bloom_frontier.frontier.redis.protocol) against the real scripts
on RedisBloom: what a script answers parses into named fields, and a reply that is not what
its script answers fails with one clear error, not an IndexError deep in the lease code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from scrapy import Request

from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.frontier.redis.protocol import (
    BatchAnswer,
    LeaseReply,
    MalformedReply,
    Sizes,
    StageReply,
    Status,
)
from bloom_frontier.redis_client import text
from tests.test_frontier_redis import make_worker


@pytest.fixture
def worker(redis_url: str) -> Iterator[RedisFrontier]:
    frontier = make_worker(redis_url)
    yield frontier
    frontier.close()


def test_a_lease_reply_names_what_the_script_did_and_what_it_leased(
    worker: RedisFrontier,
) -> None:
    worker.admit(None, [Request("https://a.example/1"), Request("https://b.example/2")])
    raw = worker.partitions.run(0, "lease", worker.leases.lease_args(5))
    reply = LeaseReply.from_reply(raw)
    assert [row.host for row in reply.requests] == ["a.example", "b.example"]
    assert "https://a.example/1" in text(reply.requests[0].record)
    assert (reply.queued, reply.leased, reply.requeued, reply.given_up) == (0, 2, 0, 0)
    assert reply.soonest_ms == -1 and reply.quarantined == 0
    # The worker holds what it is handed, under the ids the reply names.
    held = worker.leases.take_delivery([(0, reply)])
    assert [request.meta["frontier_lease"] for request in held] == [
        row.request_id for row in reply.requests
    ]


def test_a_lease_reply_cut_short_fails_the_lease_call_with_a_redis_error(
    worker: RedisFrontier, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker.admit(None, [Request("https://a.example/1")])
    run = worker.partitions.run

    def cut(partition: int, name: str, args: Any = ()) -> Any:
        reply = run(partition, name, args)
        return reply[:-1] if name == "lease" else reply

    monkeypatch.setattr(worker.partitions, "run", cut)
    with pytest.raises(MalformedReply, match="malformed lease reply") as raised:
        worker.lease(1)
    assert isinstance(raised.value, redis.RedisError)  # handled as Redis' fault


@pytest.mark.parametrize(
    ("reply", "what"),
    [
        ([b"1"] * 9, "lease"),
        ([b"x", *[b"0"] * 9], "lease"),
        (b"0", "lease"),
        ([b"0"] * 4, "counts"),
    ],
)
def test_replies_of_the_wrong_shape_are_refused(reply: Any, what: str) -> None:
    parse = LeaseReply.from_reply if what == "lease" else Sizes.from_reply
    with pytest.raises(MalformedReply, match=f"malformed {what} reply"):
        parse(reply)


def test_batch_verdicts_and_statuses_parse_as_the_scripts_answer() -> None:
    assert BatchAnswer.from_reply(b"101").new == (True, False, True)
    assert BatchAnswer.from_reply(b"stale").stale
    assert BatchAnswer.from_reply("refused").refused
    assert StageReply.from_reply(b"0000000000002a") == StageReply("0000000000002a", Status.OK)
    assert StageReply.from_reply(b"refused").status is Status.REFUSED
    assert Status.from_reply(b"late") is Status.LATE
    for bad in (b"10x", b"maybe"):
        with pytest.raises(MalformedReply):
            BatchAnswer.from_reply(bad)
    with pytest.raises(MalformedReply):
        Status.from_reply(b"done")
