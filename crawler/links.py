"""A drop-in for Scrapy's default ``LinkExtractor`` that gives the same links, cheaper.

.. code-block:: python

    from bloom_frontier.links import LinkExtractor  # in place of scrapy.linkextractors'

Scrapy's ``LxmlLinkExtractor`` resolves, makes safe and checks every link of every page anew:
``urljoin`` twice, w3lib's ``safe_url_string`` and a ``urlparse`` for the domain and
extension checks, ~100 us a link; a site's pages repeat their navigation, so almost all of
that is done again for the same answer. :class:`LinkExtractor` is a subclass that remembers
each answer under exactly what it depends on (:func:`resolution_key`): a relative link
resolves alike on every page of a directory, an absolute one on every page of its scheme.
The allow/deny, domain, extension and text checks and ``canonicalize`` are remembered per
URL. Everything else is Scrapy's: the same elements (``tags``, ``attrs``, ``deny_tags``,
``deny_attrs``, ``restrict_xpaths``, ``restrict_css``), in document order, the same
``unique`` and ``strip`` behaviour, the same :class:`scrapy.link.Link` objects (URL, text,
``nofollow``; the text a plain ``str``, not lxml's string that keeps the page's tree alive).
A ``process_value`` function, ``tags="*"`` or ``attrs="*"``, or a selection that is not a
tree of elements is handed to Scrapy's own code, unchanged.

The add-on (:mod:`bloom_frontier.userspiders`) puts one in place of each of a
``CrawlSpider``'s plain ``LinkExtractor`` by itself; the import above makes a spider's own
use of one (``LinkExtractor().extract_links(response)`` in a callback) as cheap.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urljoin, urlsplit

from lxml import etree
from scrapy.link import Link
from scrapy.linkextractors.lxmlhtml import LxmlLinkExtractor, LxmlParserLinkExtractor
from scrapy.utils.misc import rel_has_nofollow
from scrapy.utils.python import unique as unique_list
from scrapy.utils.response import get_base_url
from w3lib.html import strip_html5_whitespace
from w3lib.url import canonicalize_url, safe_url_string

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from scrapy.http import TextResponse

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Results remembered per extractor and kind (resolutions, URL verdicts, canonical URLs):
#: when full, it starts afresh. The ``site`` spider's resolver keeps as many
#: (``bloom_frontier.canonical.resolve.RESOLVED_LINKS``): ~10 MB each at 100-character URLs.
MEMO_CAPACITY = 50_000
XHTML_NAMESPACE = "{http://www.w3.org/1999/xhtml}"
_STRING = etree.XPath("string()")
#: An ``href`` (stripped) that starts a path: it resolves against the base's scheme,
#: authority and directory only (no ``:``, so no scheme of its own; not ``?``, ``#``, ``;``,
#: nor ``//`` (an authority, maybe empty), nor a character ``urlsplit`` drops anywhere: so
#: its path is not empty).
_PATH_HREF = re.compile(r"(?!//)[A-Za-z0-9._~%!$&'()*+,=@/-][^:\t\r\n]*\Z")
#: An absolute ``http(s)://`` link whose authority starts with a character ``urlsplit``
#: keeps (so it has one): it depends on the base's scheme only.
_ABSOLUTE_HREF = re.compile(r"https?://[^/?#\\\t\r\n]")
#: What ``_iter_links`` / ``process_attr`` are when a ``LinkExtractor`` is made plainly.
_PLAIN = LxmlParserLinkExtractor()
#: Scrapy's tag and attribute matcher (None if Scrapy matches otherwise: then the
#: extractor is Scrapy's own, unmemoized).
_NAME_MATCHES = getattr(LxmlLinkExtractor().link_extractor.scan_tag, "func", None)
#: A link Scrapy skips with a debug line (``safe_url_string`` refused it).
_BAD = object()


def _kept_in_fragments() -> str:
    """The characters every step keeps as they are in a fragment (w3lib does not quote
    them, ``urlsplit`` neither drops nor splits on them): asked of w3lib itself."""
    candidates = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/?"
    return "".join(
        char
        for char in candidates
        if safe_url_string(f"http://h/#{char}") == f"http://h/#{char}"
        and urljoin("http://h/", f"#{char}") == f"http://h/#{char}"
    )


#: A fragment made only of characters kept as they are: a link ``href#fragment`` resolves
#: to what ``href`` does with ``#fragment`` after it.
_PLAIN_FRAGMENT = re.compile(f"[{re.escape(_kept_in_fragments())}]+\\Z")


def before_plain_fragment(url: str) -> str:
    """``url`` less its fragment when every step keeps that fragment as it is and apart
    (``url`` otherwise): ``safe_url_string`` gives the rest alike, so a dedupe key, which
    drops the fragment, is the same."""
    cut = url.find("#")
    if cut > 0 and url[cut - 1] > " " and _PLAIN_FRAGMENT.match(url, cut + 1):
        return url[:cut]
    return url


def _names(scan: Any) -> frozenset[str] | None:
    """The tag or attribute names a plain extractor's ``scan_tag`` / ``scan_attr`` accepts
    (its ``tags`` less its ``deny_tags``), None if it accepts ``*`` or is not the plain
    matcher."""
    if _NAME_MATCHES is None or getattr(scan, "func", None) is not _NAME_MATCHES:
        return None
    if len(scan.args) != 2:
        return None
    allowed, denied = scan.args
    if "*" in allowed:
        return None
    return frozenset(name for name in allowed if name not in denied)


class LinkPage:
    """What a page's links resolve against, parsed once (:func:`resolution_key`)."""

    __slots__ = (
        "base_url",
        "directory",
        "encoding",
        "full",
        "page_url",
        "response_url",
        "scheme",
    )

    def __init__(self, base_url: str, response_url: str, encoding: str) -> None:
        self.base_url, self.response_url, self.encoding = base_url, response_url, encoding
        self.full = (base_url, response_url, encoding)
        base = urlsplit(base_url)
        response_scheme = urlsplit(response_url).scheme
        self.scheme: tuple[str, ...] = (base.scheme, response_scheme, encoding)
        self.directory: tuple[Any, ...] | None = None
        if base.scheme in ("http", "https") and base.netloc:
            parts = base.path.split("/")
            if parts[-1] != "":
                del parts[-1]
            self.directory = (*self.scheme, base.netloc, tuple(parts))
        #: What a ``#fragment`` link resolves to before its fragment, once one did.
        self.page_url: str | None = None


def resolution_key(page: LinkPage, href: str) -> Hashable:
    """What Scrapy's resolution of the stripped ``href`` on ``page`` depends on (``urljoin``
    on the base, ``safe_url_string`` in the page's encoding, ``urljoin`` on the response's
    URL): a path's, the base's scheme, authority and path segments but the last (what
    ``urljoin`` reads of them) and the response's scheme; an absolute ``http(s)`` link's,
    both schemes; any other link's, the whole base and response URL."""
    if page.directory is not None and _PATH_HREF.match(href):
        return (page.directory, href)
    if _ABSOLUTE_HREF.match(href):
        return (page.scheme, href)
    return (page.full, href)


def resolve_by_parts(
    href: str, page: LinkPage, whole: Callable[[str, LinkPage], str | None]
) -> str | None:
    """``whole(href, page)`` (a resolution of ``href`` that ``urljoin`` starts, None for a
    link skipped), from ``whole`` of its part before ``#`` when its fragment is kept as it
    is: a page's ``#fragment`` links and ``page.html#section`` links cost one resolution."""
    cut = href.find("#")
    if cut >= 0 and _PLAIN_FRAGMENT.match(href, cut + 1):
        joined = _with_fragment(href, cut, page, whole)
        if joined is not None:
            return joined
    return whole(href, page)


def _with_fragment(
    href: str, cut: int, page: LinkPage, whole: Callable[[str, LinkPage], str | None]
) -> str | None:
    """``href``'s URL from the one its part before ``#`` resolves to (remembered for a
    page's ``#fragment`` links), when that part resolves and its end is not one the URL
    parser strips (a space or control character); else None."""
    if cut == 0:
        if page.page_url is None:
            url = whole(href, page)
            if url is not None and url.endswith(href):
                page.page_url = url[: -len(href)]
            return url
        return page.page_url + href
    if href[cut - 1] <= " ":
        return None
    url = whole(href[:cut], page)
    return None if url is None else url + href[cut:]


class LinkExtractor(LxmlLinkExtractor):
    """Scrapy's default link extractor (same arguments, same links), memoized; see the
    module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._setup()

    @classmethod
    def like(cls, extractor: LxmlLinkExtractor) -> LinkExtractor:
        """A memoized extractor configured as ``extractor`` (a plain ``LinkExtractor``,
        its settings read off it, which it keeps)."""
        fast = cls.__new__(cls)
        fast.__dict__.update(extractor.__dict__)
        fast._setup()
        return fast

    def _setup(self) -> None:
        inner = self.link_extractor
        self._tags = _names(inner.scan_tag)
        self._attrs = _names(inner.scan_attr)
        #: True if this extractor's options are ones :meth:`extract_links` memoizes.
        self.memoized = (
            self._tags is not None
            and self._attrs is not None
            and inner.process_attr is _PLAIN.process_attr
            and type(inner) is LxmlParserLinkExtractor
        )
        self._iter_tags = (
            tuple(self._tags) + tuple(XHTML_NAMESPACE + tag for tag in self._tags)
            if self._tags
            else ()
        )
        self._resolved: dict[Hashable, Any] = {}
        self._allowed: dict[Hashable, bool] = {}
        self._canonical: dict[str, str] = {}
        #: Per page directory, each attribute value's outcome (:meth:`_kept_anew`).
        self._kept: dict[Hashable, dict[str, str | bool]] = {}
        self._kept_count = 0

    def extract_links(self, response: TextResponse) -> list[Link]:
        """Scrapy's ``extract_links``: the same :class:`~scrapy.link.Link` list."""
        found = self._found(response)
        if found is None:
            return super().extract_links(response)
        return [self._link(url, element) for url, element in found]

    def extract_links_except(
        self, response: TextResponse, verdict: Callable[[str], T | None]
    ) -> tuple[list[Link], list[tuple[T, Any]]]:
        """:meth:`extract_links` less the links whose URL ``verdict`` answers (not None),
        given apart with the answer and what :meth:`link_of` makes their
        :class:`~scrapy.link.Link` of: a link set aside costs no text, no ``Link``, unless
        it is asked for."""
        found = self._found(response)
        kept: list[Link] = []
        aside: list[tuple[T, Any]] = []
        if found is None:
            for link in super().extract_links(response):
                answer = verdict(link.url)
                if answer is None:
                    kept.append(link)
                else:
                    aside.append((answer, link))
            return kept, aside
        make = self._link
        for pair in found:
            answer = verdict(pair[0])
            if answer is None:
                kept.append(make(*pair))
            else:
                aside.append((answer, pair))
        return kept, aside

    def link_of(self, source: Any) -> Link:
        """The :class:`~scrapy.link.Link` of a link :meth:`extract_links_except` set aside
        (its URL and element, or the ``Link`` itself)."""
        return source if isinstance(source, Link) else self._link(*source)

    def _found(self, response: TextResponse) -> list[tuple[str, Any]] | None:
        """The URL and element of each link :meth:`extract_links` gives, in its order;
        None when Scrapy's own code must run (options not memoized, a selection that is not
        a tree of elements)."""
        if not self.memoized:
            return None
        if self.restrict_xpaths:
            roots = [sub.root for x in self.restrict_xpaths for sub in response.xpath(x)]
        else:
            roots = [response.selector.root]
        if not all(hasattr(root, "iter") for root in roots):
            return None
        page = LinkPage(get_base_url(response), response.url, response.encoding)
        unique = self.link_extractor.unique
        every: list[tuple[str, Any]] = []
        for root in roots:
            if self.restrict_text:
                links = self._links_of(root, page)
                if unique:
                    links = unique_list(links, key=_first)
                links = self._allowed_links(links)
            else:
                links = self._kept_links_of(root, page, unique)
            every.extend(links)
        # One root's links are unique already (:meth:`_allowed_links`).
        return unique_list(every, key=_first) if unique and len(roots) > 1 else every

    def _links_of(self, root: Any, page: LinkPage) -> list[tuple[str, Any]]:
        """``LxmlParserLinkExtractor._extract_links`` before its de-duplication: each
        link's URL and element."""
        links: list[tuple[str, Any]] = []
        if not self._iter_tags or not self._attrs:
            return links
        attrs = self._attrs
        single = next(iter(attrs)) if len(attrs) == 1 else None
        resolve = self._resolve
        for element in root.iter(*self._iter_tags):
            if single is not None:
                value = element.get(single)
                values = () if value is None else (value,)
            else:
                values = tuple(v for name, v in element.items() if name in attrs)
            for value in values:
                url = resolve(value, page)
                if url is not None:
                    links.append((url, element))
        return links

    def _kept_links_of(self, root: Any, page: LinkPage, unique: bool) -> list[tuple[str, Any]]:
        """:meth:`_allowed_links` of :meth:`_links_of`'s links (de-duplicated if
        ``unique``) without a text filter: each link's URL as it is kept (allowed,
        canonicalized if asked) and its element. Filtering and canonicalizing by URL alone
        commute with de-duplicating by it (the first of a URL's links stays first), so each
        attribute value's outcome is remembered per page directory (:meth:`_kept_anew`): a
        site's navigation costs one lookup a link."""
        links: list[tuple[str, Any]] = []
        if not self._iter_tags or not self._attrs:
            return links
        memo: dict[str, str | bool] | None = None
        if page.directory is not None:
            memo = self._kept.get(page.directory)
            if memo is None:
                memo = self._kept[page.directory] = {}
        attrs = self._attrs
        single = next(iter(attrs)) if len(attrs) == 1 else None
        # What a plain ``#fragment`` link is kept as, less its fragment (None until one
        # was resolved): without URL patterns nor canonicalization, the page's URL and
        # its outcome are the same for each (the filters read no fragment).
        here: str | bool | None = None
        by_fragment = not (self.allow_res or self.deny_res or self.canonicalize)
        urls: set[str] = set()
        for element in root.iter(*self._iter_tags):
            if single is not None:
                value = element.get(single)
                if value is None:
                    continue
                values: tuple[str, ...] = (value,)
            else:
                values = tuple(v for name, v in element.items() if name in attrs)
            for value in values:
                url: str | bool | None
                if value[:1] == "#" and by_fragment and _PLAIN_FRAGMENT.match(value, 1):
                    if here is None:
                        url = self._kept_anew(value, page, element, None)
                        here = self._fragment_base(url, value, page)
                    else:
                        url = here and here + value  # type: ignore[operator]
                else:
                    url = None if memo is None else memo.get(value)
                    if url is None:
                        url = self._kept_anew(value, page, element, memo)
                if not url:
                    continue
                if unique:
                    if url in urls:
                        continue
                    urls.add(url)  # type: ignore[arg-type]
                links.append((url, element))  # type: ignore[arg-type]
        return links

    @staticmethod
    def _fragment_base(url: str | bool, value: str, page: LinkPage) -> str | bool | None:
        """What the plain fragment link ``value``, kept as ``url``, tells of the page's
        other ones: its URL before the fragment, False if they are filtered out, None if
        they must be resolved each (it did not resolve to the page's URL and ``value``)."""
        if url is False:
            return False if page.page_url is not None else None
        return url[: -len(value)] if url.endswith(value) else None  # type: ignore[union-attr]

    def _kept_anew(
        self, value: str, page: LinkPage, element: Any, memo: dict[str, str | bool] | None
    ) -> str | bool:
        """The URL the attribute ``value`` is kept as on ``page``, False if its link is
        skipped or filtered out; remembered in ``memo`` (``page``'s directory's) when it
        resolves and that resolution depends on the directory alone
        (:func:`resolution_key`). A link Scrapy skips as bad is not remembered: Scrapy
        logs it every time."""
        url = self._resolve(value, page)
        if url is None:
            return False
        kept = self._allowed_links([(url, element)])
        outcome: str | bool = kept[0][0] if kept else False
        if memo is not None:
            href = strip_html5_whitespace(value) if self.link_extractor.strip else value
            if _PATH_HREF.match(href) or _ABSOLUTE_HREF.match(href):
                if self._kept_count >= MEMO_CAPACITY:
                    memo.clear()
                    self._kept, self._kept_count = {page.directory: memo}, 0
                memo[value] = outcome
                self._kept_count += 1
        return outcome

    @staticmethod
    def _link(url: str, element: Any) -> Link:
        """Scrapy's ``Link`` for ``url`` found on ``element``: its text, ``nofollow``."""
        text = _STRING(element) if len(element) else element.text
        rel = element.get("rel")
        return Link(
            url, str(text) if text else "", nofollow=rel is not None and rel_has_nofollow(rel)
        )

    def _resolve(self, value: str, page: LinkPage) -> str | None:
        """The URL Scrapy makes of the attribute ``value`` on ``page``; None for a link it
        skips."""
        href = strip_html5_whitespace(value) if self.link_extractor.strip else value
        return resolve_by_parts(href, page, self._resolve_whole)

    def _resolve_whole(self, href: str, page: LinkPage) -> str | None:
        """:meth:`_resolve_anew`, remembered under :func:`resolution_key`."""
        key = resolution_key(page, href)
        memo = self._resolved
        url = memo.get(key)
        if url is None:
            url = memo[key] = self._resolve_anew(href, page)
            if len(memo) > MEMO_CAPACITY:
                self._resolved = {key: url}
        if url is _BAD or url is False:
            if url is _BAD:
                logger.debug(f"Skipping extraction of link with bad URL {href!r}")
            return None
        return url  # type: ignore[no-any-return]

    @staticmethod
    def _resolve_anew(href: str, page: LinkPage) -> Any:
        """Scrapy's steps (``LxmlParserLinkExtractor._extract_links``): the URL, False for
        a bogus link, :data:`_BAD` for one ``safe_url_string`` refuses."""
        try:
            url = urljoin(page.base_url, href)
        except ValueError:
            return False
        try:
            url = safe_url_string(url, encoding=page.encoding)
        except ValueError:
            return _BAD
        return urljoin(page.response_url, url)

    def _allowed_links(self, links: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """``LxmlLinkExtractor._process_links`` of :meth:`_links_of`'s links: those its
        filters keep, canonicalized if asked, de-duplicated if ``unique``."""
        allowed = self._allowed
        by_text = bool(self.restrict_text)
        # Without patterns, only the URL's scheme, host and path are checked: its
        # fragment does not count.
        by_url = bool(self.allow_res or self.deny_res)
        kept: list[tuple[str, Any]] = []
        for link in links:
            url, element = link
            if not by_url:
                before = url.partition("#")[0]
                if "://" in before:
                    url = before
            key: Hashable = (url, self._link(*link).text) if by_text else url
            verdict = allowed.get(key)
            if verdict is None:
                verdict = allowed[key] = self._link_allowed(self._link(*link))
                if len(allowed) > MEMO_CAPACITY:
                    self._allowed = allowed = {key: verdict}
            if verdict:
                kept.append(link)
        if self.canonicalize:
            canonical = self._canonical
            for index, (url, element) in enumerate(kept):
                canonical_url = canonical.get(url)
                if canonical_url is None:
                    canonical_url = canonical[url] = canonicalize_url(url)
                    if len(canonical) > MEMO_CAPACITY:
                        self._canonical = canonical = {}
                kept[index] = (canonical_url, element)
        # Filtering unique links leaves them unique: only canonical URLs may meet again.
        if self.link_extractor.unique and self.canonicalize:
            return unique_list(kept, key=_first)
        return kept


def _first(link: tuple[str, Any]) -> str:
    return link[0]


def fast_extractor(extractor: object) -> LinkExtractor | None:
    """A memoized :class:`LinkExtractor` for ``extractor`` if it is Scrapy's own (not a
    subclass: its methods may differ) with options :class:`LinkExtractor` memoizes."""
    if type(extractor) is not LxmlLinkExtractor:
        return None
    fast = LinkExtractor.like(extractor)
    return fast if fast.memoized else None
