"""Content fingerprints of fetched documents (:mod:`bloom_frontier.content.fingerprint`) and the
extension that computes and stores them off the reactor
(:mod:`bloom_frontier.content.extension`)."""
