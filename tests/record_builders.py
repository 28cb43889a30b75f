"""Redirect records for store and command tests, keyed the way the crawl keys them."""

from __future__ import annotations

from bloom_frontier.canonical import dedupe_key
from bloom_frontier.pipelines.records import VIA_LOCATION, Chain, Hop

A, B, C = "https://e.org/a", "https://e.org/b", "https://e.org/c"


def hop(source: str, target: str, status: int = 301) -> Hop:
    """``source`` redirecting to ``target`` by a ``Location`` header."""
    return Hop(source, dedupe_key(source), status, target, target, dedupe_key(target), VIA_LOCATION)


def chain(chain_id: str, outcome: str, *hops: Hop, flag: str | None = None) -> Chain:
    """The chain that followed ``hops`` from the first one's source and ended in ``outcome``."""
    state = Chain(chain_id, hops[0].source, dedupe_key(hops[0].source))
    for one in hops:
        state = state.add(one)
    return state.finish(outcome, hops[-1].target, flag=flag)
