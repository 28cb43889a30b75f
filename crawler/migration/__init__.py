"""Migration maps: every old document of one crawl matched to the page of another crawl that
now holds its content (:mod:`.answers` is what a match says; the matcher, the command and the
map validation build on it). Works from the two record stores alone."""
