"""Content fingerprints of fetched documents (:mod:`crawler.content.fingerprint`) and the
extension that computes and stores them off the reactor (:mod:`crawler.content.extension`)."""
