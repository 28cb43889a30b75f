"""What a page says about itself in its head and headers: the canonical URLs it names
(``<link rel="canonical">`` in ``<head>``, ``Link: <...>; rel="canonical"``) and whether it
may be indexed (``<meta name="robots">`` / ``googlebot``, ``X-Robots-Tag``).

Read by the crawl's canonical hints (:mod:`bloom_frontier.middlewares.canonical_hints`) and
by ``scrapy validate-map`` (:mod:`bloom_frontier.migration.validate`), which both need the
same reading: it lives in the core, named by its job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from lxml import etree

from bloom_frontier.spiders.site import page_tree

if TYPE_CHECKING:
    from scrapy.http import TextResponse

#: One ``<uri>; params`` entry of a ``Link`` header.
_LINK_VALUE = re.compile(r"<([^>]*)>([^<]*)")
#: The ``<link>`` elements that may name a canonical URL.
HEAD_LINKS = "//head//link[@rel and @href]"
_HEAD_LINKS = etree.XPath(HEAD_LINKS)
_LINK_PARAM = re.compile(r';\s*([A-Za-z0-9!#$&+.^_`|~*-]+)\s*=\s*(?:"([^"]*)"|([^;,\s]*))')
#: ``<meta name=...>`` whose content holds indexing directives for every crawler or Google's.
ROBOTS_META_NAMES = frozenset({"robots", "googlebot"})
ROBOTS_TAGS = "//meta[@name and @content]"
_ROBOTS_TAGS = etree.XPath(ROBOTS_TAGS)
#: Directives that keep a page out of the index (``none`` is ``noindex, nofollow``).
NOINDEX = frozenset({"noindex", "none"})
#: ``X-Robots-Tag: googlebot: noindex``: a directive list scoped to one user agent.
_AGENT_PREFIX = re.compile(r"^\s*([A-Za-z][\w-]*)\s*:(?!//)\s*")


def link_header_canonicals(values: Iterable[bytes]) -> list[str]:
    """The targets of every ``rel="canonical"`` link in ``Link`` header values."""
    hrefs = []
    for value in values:
        for match in _LINK_VALUE.finditer(value.decode("latin-1")):
            for param in _LINK_PARAM.finditer(match[2]):
                rel = param[2] if param[2] is not None else param[3]
                if param[1].lower() == "rel" and "canonical" in rel.lower().split():
                    hrefs.append(match[1])
                    break
    return hrefs


def head_canonicals(response: TextResponse) -> list[str]:
    """The ``href`` of every ``<link>`` in ``<head>`` whose ``rel`` includes canonical
    (read off the lxml tree Scrapy parsed, without a parsel ``Selector`` per ``<link>``)."""
    root = page_tree(response)
    if root is None:
        links = [link.attrib for link in response.xpath(HEAD_LINKS)]
    else:
        links = [link.attrib for link in _HEAD_LINKS(root)]
    return [
        link["href"] for link in links if "canonical" in (link.get("rel") or "").lower().split()
    ]


def header_noindex(values: Iterable[bytes]) -> bool:
    """An ``X-Robots-Tag`` value keeps the page out of the index, for every crawler or for
    Googlebot (``noindex``, ``none``, ``googlebot: noindex``; another agent's is ignored).

    >>> header_noindex([b"noarchive", b"googlebot: noindex"]), header_noindex([b"otherbot: none"])
    (True, False)
    """
    for value in values:
        text = value.decode("latin-1")
        agent = _AGENT_PREFIX.match(text)
        if agent and agent[1].lower() not in ROBOTS_META_NAMES:
            continue
        directives = text[agent.end() :] if agent else text
        if NOINDEX & {part.strip().lower() for part in directives.split(",")}:
            return True
    return False


def meta_noindex(response: TextResponse) -> bool:
    """The page's ``<meta name="robots">`` (or ``googlebot``) keeps it out of the index."""
    root = page_tree(response)
    metas = (
        [meta.attrib for meta in response.xpath(ROBOTS_TAGS)]
        if root is None
        else [meta.attrib for meta in _ROBOTS_TAGS(root)]
    )
    return any(
        (meta.get("name") or "").strip().lower() in ROBOTS_META_NAMES
        and NOINDEX & {part.strip().lower() for part in (meta.get("content") or "").split(",")}
        for meta in metas
    )
