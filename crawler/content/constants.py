"""The content fingerprints' names and sizes, without numpy.

Settings validation, the learner and the record store need these names before the first
request; :mod:`bloom_frontier.content.fingerprint` (which imports numpy, ~0.1 s) re-exports
them and is imported only when the first document is fingerprinted.
"""

#: Version of the normalization; fingerprints of different versions never compare.
N1, N2 = "n1", "n2"
#: The normalization fingerprints are made under (``CONTENT_NORMALIZATION``).
NORMALIZATION = N2
NORMALIZATIONS = (N2, N1)
#: Fingerprints of bodies that are not text (hash of the bytes, no signature).
RAW = "raw"
NUM_PERM = 128
SHINGLE = 4
#: MinHash similarity at or above which two documents count as near-duplicates.
NEAR_DUPLICATE = 0.9

#: What a document is good for when learning parameter rules: only ``ok`` documents count.
OK, EMPTY, ERROR, SOFT_404 = "ok", "empty", "error", "soft-404"
