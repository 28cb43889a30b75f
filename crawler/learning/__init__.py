"""Parameter rules proven by content: learn which query parameters change nothing.

* :mod:`bloom_frontier.learning.evidence`: pairs of fetched URLs that differ by one parameter,
  compared by content fingerprint, and the drop rules they prove (pure, no I/O);
* :mod:`bloom_frontier.learning.state`: the crawl's active learned rules and their version, in
  process (embedded) or in Redis beside the frontier (shared), and the live ruleset every
  batch of keys is made with;
* :mod:`bloom_frontier.learning.extension`: the Scrapy extension tying fingerprints, evidence,
  the record store and the shared state together (``CANON_LEARN``);
* :mod:`bloom_frontier.learning.gate`: a request leaving the queue is keyed again under the
  rules in force (learned, or a rebuilt filter's) and dropped if they make it a duplicate;
* :mod:`bloom_frontier.learning.recheck`: the sampled re-check of applied rules.
"""
