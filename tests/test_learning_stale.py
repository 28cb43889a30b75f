"""A worker keying with learned rules a moment old never merges pages with them (issue 11:
"a worker on an older version reloads, never keys with stale rules").

Two workers of one crawl, on a real redis-server with RedisBloom: worker A revokes a learned
rule (a counter-example) while worker B still holds the old version (its background read has
not come back). B's batch, keyed under the revoked rule, must not drop the variant page as a
duplicate: the admission scripts answer "stale", B reloads the rules, keys the batch again and
sends it again under the same lease. With one filter key (admit.lua) and with a sharded
filter (stage.lua, commit.lua). With a partitioned queue, whose scripts cannot see the crawl's
version atomically, the stale batch is queued whole instead (fetched again, never merged)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.frontier.keys import carry_key
from bloom_frontier.frontier.redis import RedisFrontier
from bloom_frontier.learning.gate import LearnedRuleGate
from bloom_frontier.learning.state import LiveRules, RedisRuleState
from bloom_frontier.meta import FRONTIER_LEASE_META
from tests.test_frontier_redis import ExampleSpider, stat, urls
from tests.test_frontier_sharded import make_worker

SITE = "https://example.com"
RULE = {"example.com": ["ref"]}
BASE, VARIANT = f"{SITE}/a", f"{SITE}/a?ref=nav"

MakeWorker = Callable[..., RedisFrontier]


class ReadNotBack:
    """A frontier's background thread whose version read has not come back yet: the worker
    keeps keying with the version it last loaded."""

    def run(self, *args: Any) -> Deferred[Any]:
        return Deferred()


def with_learned_rules(frontier: RedisFrontier) -> LiveRules:
    """Key ``frontier``'s batches with the crawl's learned rules, as the learning extension
    sets a crawl up, version reads lagging (:class:`ReadNotBack`)."""
    state = RedisRuleState(frontier.client, frontier.keys.prefix, ReadNotBack())  # type: ignore[arg-type]
    live = LiveRules(Settings(), state)
    live.key_version = frontier.keyer.rules.version
    live.reload()
    frontier.keyer.use_rules(live)
    return live


@pytest.fixture
def workers(redis_url: str) -> Iterator[MakeWorker]:
    """Workers of one crawl with learned rules (``shards`` > 1: a sharded seen filter)."""
    made: list[RedisFrontier] = []

    def make(shards: int = 1, **more: Any) -> RedisFrontier:
        made.append(make_worker(redis_url, shards, 60.0, **more))
        with_learned_rules(made[-1])
        return made[-1]

    yield make
    for worker in made:
        worker.close()


def live(worker: RedisFrontier) -> LiveRules:
    assert worker.keyer.live is not None
    return worker.keyer.live


def publish(worker: RedisFrontier, rules: dict[str, list[str]]) -> int:
    """``worker`` changes the crawl's learned rules (as its learning extension does when a
    rule is applied or revoked); the new version."""
    state = live(worker).state
    version, _ = state.load()
    assert state.publish(version, rules)
    return version + 1


def leased_page(first: RedisFrontier, second: RedisFrontier) -> Request:
    """A page ``second`` holds the lease of (a link ``first`` admitted)."""
    first.admit(None, [Request(f"{SITE}/page")])
    [page] = second.lease(1)
    return page


def queued_urls(worker: RedisFrontier) -> list[str]:
    return sorted(urls(worker.lease(100)))


@pytest.mark.parametrize("shards", [1, 6], ids=["admit", "staged"])
def test_a_worker_on_a_revoked_rules_version_keys_the_batch_again(
    workers: MakeWorker, shards: int
) -> None:
    first, second = workers(shards), workers(shards)
    page = leased_page(first, second)
    assert publish(first, RULE) == 1
    live(first).reload()
    live(second).reload()  # both key with "ref" dropped on example.com now
    assert urls(second.admit(None, [Request(BASE)])) == [BASE]

    assert publish(first, {}) == 2  # first found a counter-example: the rule is revoked
    assert live(second).version == 1  # second has not heard yet
    # Its key for the variant is the base page's, which the filter holds: under the old rules
    # the variant would be dropped as a duplicate and never fetched. That key is carried in
    # the link's meta (as the early drop leaves it): it must not serve under the new rules.
    variant = Request(VARIANT)
    assert second.keyer.key_of(variant) == second.keyer.key_of(Request(BASE))

    admitted = second.admit(page, [variant, Request(f"{SITE}/b")])
    assert sorted(urls(admitted)) == [VARIANT, f"{SITE}/b"]
    assert stat(second, "frontier/stale_rules") == 1
    assert live(second).version == 2 and live(second).learned == {}
    assert stat(second, "frontier/acked") == 1  # the page's lease, released with the batch
    assert second.counts()["leased"] == 0
    assert queued_urls(first) == [BASE, VARIANT, f"{SITE}/b"]
    assert second.pending_answers == 0


class Loop:
    """A frontier's background thread and Twisted's loop, run step by step: each call
    handed over runs, and its Deferred fires, only when :meth:`step` says so."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...], Deferred[Any]]] = []

    def run(self, function: Callable[..., Any], *args: Any) -> Deferred[Any]:
        self.calls.append((function, args, Deferred()))
        return self.calls[-1][2]

    def step(self) -> None:
        function, args, done = self.calls.pop(0)
        done.callback(function(*args))

    def close(self) -> None:
        """The worker closes: the calls handed over are done."""
        while self.calls:
            self.step()


def test_in_a_crawl_the_page_lease_is_held_until_the_batch_keyed_again_is_accepted(
    workers: MakeWorker,
) -> None:
    """Answers go from the background thread: the admit call returns before the stale
    answer comes; the rules are reloaded there, the batch sent again, and the page's lease
    released only with it. Until then the worker is not drained."""
    first, second = workers(), workers()
    page = leased_page(first, second)
    publish(first, RULE)
    live(second).reload()
    second.admit(None, [Request(BASE)])
    publish(first, {})
    loop = Loop()
    second.outbox.background = loop  # type: ignore[assignment]
    late: list[Request] = []
    returned = second.admit(page, [Request(VARIANT)], on_late_duplicates=late.extend)
    assert urls(returned) == [VARIANT]  # not answered yet: every link handed back
    lease = page.meta[FRONTIER_LEASE_META]
    assert second.leases.to_extend() == [lease]  # its answer waits: still heartbeated
    loop.step()  # admit: stale, nothing done
    assert stat(second, "frontier/stale_rules") == 1 and second.counts()["leased"] == 1
    assert second.pending_answers == 1 and not second.seems_drained()  # reloading the rules
    assert second.leases.to_extend() == [lease]
    loop.step()  # the rules loaded, in the background thread
    assert live(second).version == 2
    assert second.leases.to_extend() == [lease]  # the batch keyed again waits
    loop.step()  # the batch keyed again: accepted
    assert second.leases.to_extend() == []
    assert loop.calls == [] and second.pending_answers == 0
    assert second.counts()["leased"] == 0 and late == []
    assert queued_urls(first) == [BASE, VARIANT]


def test_a_link_a_learned_rule_merged_is_never_dropped_early_on_what_the_worker_knows(
    workers: MakeWorker,
) -> None:
    """The known-keys cache answers "seen" without Redis and without a version check: a key
    made by a learned rule (maybe revoked a moment ago) goes to the admission instead."""
    first, second = workers(), workers()
    page = leased_page(first, second)
    publish(first, RULE)
    live(second).reload()
    second.admit(None, [Request(BASE)])
    assert second.seen_before(Request(BASE)) is not None  # known: dropped early
    assert second.seen_before(Request(f"{BASE}?utm_source=x")) is not None  # no learned rule
    assert second.seen_before(Request(VARIANT)) is None  # merged by "ref": admission decides
    # The same for links judged by URL, before any request is built for them.
    keyer = second.keyer
    assert second.seen_link(BASE, keyer.link_key(BASE))
    assert not second.seen_link(VARIANT, keyer.link_key(VARIANT))

    publish(first, {})
    assert urls(second.admit(page, [Request(VARIANT)])) == [VARIANT]
    assert stat(second, "frontier/stale_rules") == 1


def test_a_newly_applied_rule_merges_once_the_worker_reloaded_it(workers: MakeWorker) -> None:
    first, second = workers(), workers()
    page = leased_page(first, second)
    second.admit(None, [Request(BASE)])
    publish(first, RULE)  # applied by first; second keys without it
    assert second.admit(page, [Request(VARIANT)]) == []  # keyed again: the base page's key
    assert stat(second, "frontier/stale_rules") == 1
    assert stat(second, "seen/duplicate") == 1
    assert queued_urls(first) == [BASE]


def test_rules_that_change_under_every_attempt_still_converge(workers: MakeWorker) -> None:
    """Each stale answer reloads the rules and sends the batch again; it is accepted once
    the rules hold still, its page's lease released then, and nothing is sent twice."""
    first, second = workers(), workers()
    page = leased_page(first, second)
    admit = second.scripts._scripts["admit"]
    changes = iter([RULE, {}, RULE])

    def admit_while_rules_change(*args: Any, **kwargs: Any) -> Any:
        rules = next(changes, None)
        if rules is not None:
            publish(first, rules)
        return admit(*args, **kwargs)

    second.scripts._scripts["admit"] = admit_while_rules_change  # type: ignore[assignment]
    assert urls(second.admit(page, [Request(VARIANT)])) == [VARIANT]
    assert stat(second, "frontier/stale_rules") == 3
    assert live(second).version == 3 and live(second).learned == RULE
    assert stat(second, "frontier/acked") == 1 and second.counts()["leased"] == 0
    assert second.pending_answers == 0
    assert queued_urls(first) == [VARIANT]


def test_a_mangled_version_reads_as_zero_alike_in_workers_and_scripts(
    workers: MakeWorker,
) -> None:
    """No value someone writes over the version makes every batch stale forever, nor over
    the rules stops the worker."""
    first, second = workers(), workers()
    page = leased_page(first, second)
    publish(first, RULE)
    live(second).reload()
    assert live(second).version == 1
    second.client.set(f"{second.keys.prefix}:learned_version", "not a number")
    second.client.set(f"{second.keys.prefix}:learned", "{not json")
    assert urls(second.admit(page, [Request(VARIANT)])) == [VARIANT]
    assert stat(second, "frontier/stale_rules") == 1  # reloaded once: version 0, accepted
    assert live(second).version == 0 and live(second).learned == {}  # merging nothing
    assert second.counts()["leased"] == 0


def test_rules_revoked_between_stage_and_commit_queue_the_whole_batch(
    workers: MakeWorker,
) -> None:
    """With a sharded filter the keys are marked between stage and commit, out of the
    scripts' reach: a commit whose rules moved meanwhile does not trust which keys were
    seen, and queues every request (a page fetched twice at worst, never one merged)."""
    first, second = workers(6), workers(6)
    page = leased_page(first, second)
    publish(first, RULE)
    live(second).reload()
    second.admit(None, [Request(BASE)])
    mark = second.seen.add_many

    def revoked_while_marking(*args: Any, **kwargs: Any) -> list[bool]:
        publish(first, {})
        return mark(*args, **kwargs)

    second.seen.add_many = revoked_while_marking  # type: ignore[method-assign]
    assert urls(second.admit(page, [Request(VARIANT)])) == [VARIANT]
    assert stat(second, "frontier/staged_recovered") == 1
    assert stat(second, "frontier/stale_rules") == 0
    assert second.counts()["leased"] == 0
    assert queued_urls(first) == [BASE, VARIANT]


def test_the_gate_never_drops_a_queued_variant_under_a_rule_revoked_a_moment_ago(
    workers: MakeWorker,
) -> None:
    """The gate keys a leased request again when a learned rule touches its host, and drops
    it when its new key is seen: a rule revoked since the worker's last version read must
    not do that (it reloads the rules first)."""
    first, second = workers(), workers()
    publish(first, RULE)
    live(second).reload()
    second.admit(None, [Request(BASE)])
    publish(first, {})  # revoked; second has not heard
    queued = Request(VARIANT)  # as first queued it, under the rules without "ref"
    carry_key(queued, dedupe_key(VARIANT, live(second).without_learned()))
    # The gate of second's crawl: its services give second's frontier and learned rules.
    learner = SimpleNamespace(live=live(second), mode="apply", has_applied=True)
    services = SimpleNamespace(frontier=second, learner=learner)
    LearnedRuleGate(get_crawler(ExampleSpider), services).process_request(queued)  # type: ignore[arg-type]
    assert live(second).version == 2
    assert stat(second, "learn/dropped_queued") == 0


def test_a_partitioned_worker_on_a_revoked_rules_version_merges_nothing(
    workers: MakeWorker,
) -> None:
    first, second = workers(FRONTIER_PARTITIONS=3), workers(FRONTIER_PARTITIONS=3)
    page = leased_page(first, second)
    assert publish(first, RULE) == 1
    live(first).reload()
    live(second).reload()
    assert urls(second.admit(None, [Request(BASE)])) == [BASE]
    assert publish(first, {}) == 2  # revoked while second still keys with "ref" dropped
    variant = Request(VARIANT)
    assert second.keyer.key_of(variant) == second.keyer.key_of(Request(BASE))

    admitted = second.admit(page, [variant, Request(f"{SITE}/b")])
    assert VARIANT in urls(admitted)
    assert stat(second, "frontier/stale_rules") == 1
    assert VARIANT in queued_urls(first) + queued_urls(second)
