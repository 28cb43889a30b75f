"""Redirect maps from the record store: what a map says (:mod:`.semantics`), how servers match
a source (:mod:`.matching`), one writer per server (:mod:`.nginx`, :mod:`.apache`) and the
audit report (:mod:`.report`). ``scrapy redirects`` puts them together."""
