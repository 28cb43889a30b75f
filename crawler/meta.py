"""Every ``request.meta`` key the frontier sets or reads, in one place.

Each constant is named after its key, upper-cased, with ``_META``. The key strings are part
of the stored format: requests queued in Redis and in a ``JOBDIR`` carry them, so a key is
never renamed (its constant may be). Scrapy's own keys the frontier only reads
(``allow_offsite``, ``dont_redirect``, ``proxy``...) are spelled where they are read, except
``download_slot``, which the politeness code keys hosts by.
"""

from __future__ import annotations

# --- Dedupe keys (bloom_frontier.frontier.keys) ------------------------------------------
#: The request's dedupe key, once computed (carried by its copies and stored with it).
DEDUPE_KEY_META = "dedupe_key"
#: The URL ``dedupe_key`` was computed for: a copy with another URL (a redirect,
#: ``request.replace(url=...)``) carries the old key, so it is keyed again.
DEDUPE_KEY_URL_META = "dedupe_key_url"
#: Flag: the key was already checked in a page's batch of links; not checked again.
DEDUPE_CHECKED_META = "dedupe_checked"
#: The learned rules' version the carried key was made under (never stored: a key of
#: another version is made again, see ``RequestKeyer._carried``).
DEDUPE_KEY_RULES_META = "dedupe_key_rules"

# --- Shared frontier (bloom_frontier.frontier.redis, bloom_frontier.frontier.politeness) ----
#: Flag: already queued in the shared frontier; its scheduler skips it.
FRONTIER_QUEUED_META = "frontier_queued"
#: The id of the lease a request was handed out under.
FRONTIER_LEASE_META = "frontier_lease"
#: A queued request's host (``politeness_key``), stored with it so that the Lua scripts
#: know it (``set_host`` in politeness.lua).
FRONTIER_HOST_META = "frontier_host"
#: A leased request's politeness turn: ``[time.monotonic() when leased, seconds its host
#: observes between two requests]``. Never stored in Redis.
FRONTIER_TURN_META = "frontier_turn"
#: On a robots.txt request this worker fetches for all: the URL its copy is shared under
#: (a redirected request keeps it).
FRONTIER_ROBOTS_CLAIM_META = "frontier_robots_claim"
#: Scrapy's: the downloader slot a request goes through (else its host's).
DOWNLOAD_SLOT_META = "download_slot"

# --- Redirects, hints, shorteners, learning -----------------------------------------------
#: The redirect chain a request is part of (a JSON-safe dict, ``Chain.to_meta()``).
REDIRECT_CHAIN_META = "redirect_chain"
#: On the follow-up request of a ``rel=canonical`` hint: the URL of the page that named it.
CANONICAL_OF_META = "canonical_of"
#: On a shortener resolution request: the short URL it resolves (a request built from it for
#: another URL, the redirect to the target, is not one).
SHORTENER_META = "shortener"
#: On a re-check fetch of a learned rule: the key it was merged into and the dropped names.
LEARN_RECHECK_META = "learn_recheck"
