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

from crawler.canonical.errors import InvalidURL
from crawler.canonical.identity import Identity, identify
from crawler.canonical.resolve import resolve_link
from crawler.canonical.rules import RULES_VERSION, KeyExplanation, dedupe_key, explain
from crawler.canonical.structural import canonicalize

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
