"""URL canonicalization: pure functions, no I/O.

Two separately tested stages turn a link into a dedupe key:

1. :func:`canonicalize` - structural RFC 3986 normalization, provider-agnostic; fails closed
   (raises :class:`InvalidURL`) on hosts it cannot vouch for.
2. :func:`dedupe_key` - semantic rules on top of stage 1: provider identities
   (:func:`identify`, e.g. ``youtube:<id>``), tracking parameters, session ids, slash runs,
   per-host allowlists. Keys carry :data:`RULES_VERSION` so a rule change is visible.

:func:`resolve_link` turns an ``href`` into the fetch URL (as close as possible to what the
site linked) or ``None`` for junk.
"""

from bloom_frontier.canonical.errors import InvalidURL
from bloom_frontier.canonical.identity import Identity, identify
from bloom_frontier.canonical.resolve import resolve_link
from bloom_frontier.canonical.rules import RULES_VERSION, KeyExplanation, dedupe_key, explain
from bloom_frontier.canonical.structural import canonicalize

__all__ = [
    "RULES_VERSION",
    "Identity",
    "InvalidURL",
    "KeyExplanation",
    "canonicalize",
    "dedupe_key",
    "explain",
    "identify",
    "resolve_link",
]
