"""Keys a worker knows the shared seen filter holds: its links' duplicates dropped without
asking Redis.

About 99% of the links a page yields on a real site were seen before (its navigation, on
every page). A worker remembers the keys the filter's answers to it covered (found seen, or
marked by its own admission: in the filter either way, for good), so a page's links with
those keys are dropped as soon as the spider yields them, with no record built and no Redis
call. Keys other workers marked are not known here: their links go to the admission, which
decides (and then they are known). Bounded: past ``capacity`` keys the older half is
forgotten (a forgotten key only costs its admission again, never a page).

Keys are learnt from answers only, never when a batch is sent: a batch still on its way
may be refused (its page's lease expired) or dropped, and if this very worker fetched that
page again, dropping its links as known would lose them. While pages are in flight, links
to keys of batches not answered yet are sent again (a few per page, counted in
``frontier/records_built`` against ``frontier/enqueued``).

Across a change of the crawl's learned rules (:mod:`bloom_frontier.learning.state`): keys keep the
seen filter's prefix (the learned rules' version is not in it, or every URL seen so far would
look new), so a key known here names the same normalized URL under any learned rules, and the
filter holds it under all of them: "known" stays as true as the filter's own answer. What a
rules change makes wrong is a key made under rules a worker has not reloaded yet (a rule
revoked a second ago still merging a variant into its page). So a key a learned rule merged is
never dropped here (:meth:`bloom_frontier.frontier.redis.RedisFrontier.seen_before`): its admission
checks the version (:mod:`bloom_frontier.frontier.redis.admission`); and a key carried in a
request's
``meta`` serves only under the version it was made under
(:data:`bloom_frontier.meta.DEDUPE_KEY_RULES_META`). Marks made under a rule before its revocation
stay in the filter, as everything seen does (the revocation's warning says so).
"""

from __future__ import annotations

from collections.abc import Iterable

#: Keys remembered by default: about 100 MB at 80-character keys (sets of str cost about
#: 100 bytes an entry besides the string), the last 250,000 to 500,000 keys answered.
KNOWN_KEYS_CAPACITY = 500_000


class KnownKeys:
    """A set of keys bounded to ``capacity``, in two generations: when the newer is full
    (half the capacity), the older is dropped and the newer becomes the older.

    >>> known = KnownKeys(capacity=4)
    >>> known.update(["a", "b", "c"])
    >>> "a" in known, "c" in known
    (True, True)
    >>> known.update(["d", "e"])
    >>> "a" in known, "e" in known
    (False, True)
    """

    def __init__(self, capacity: int = KNOWN_KEYS_CAPACITY) -> None:
        self.half = max(1, capacity // 2)
        self._newer: set[str] = set()
        self._older: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self._newer or key in self._older

    def update(self, keys: Iterable[str]) -> None:
        """Remember ``keys`` (each is in the filter)."""
        newer = self._newer
        for key in keys:
            if key in newer:
                continue
            if len(newer) >= self.half:
                self._older, newer = newer, set()
                self._newer = newer
            newer.add(key)
