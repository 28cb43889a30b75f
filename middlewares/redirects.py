"""Redirects followed hop by hop, every hop recorded, loops caught by dedupe key.

:class:`RedirectChainMiddleware` replaces Scrapy's ``RedirectMiddleware`` and
``MetaRefreshMiddleware`` (same settings: ``REDIRECT_ENABLED``, ``METAREFRESH_ENABLED``,
``METAREFRESH_MAXDELAY``, ``METAREFRESH_IGNORE_TAGS``, ``dont_redirect``,
``handle_httpstatus_list``; the ``redirect_urls``/``redirect_reasons`` meta keys are kept).
It also follows the HTTP ``Refresh`` header, which browsers honour like a meta refresh.

Each hop (source, status, ``Location`` as sent, the target resolved with
:func:`~bloom_frontier.canonical.resolve_link`, time) is appended to the chain carried in
``request.meta["redirect_chain"]`` (JSON-safe). A chain ends, and is stored, as:

* ``fetched``: a response that is not a followed redirect;
* ``seen``: the target's dedupe key was already known, so it is not fetched again (the
  target goes through the frontier like any link, which also marks its key seen); a target
  with the same key as its source (``http`` -> ``https``, a tracking parameter stripped) is
  followed without that check;
* ``loop``: the target has the key of an earlier URL of the chain (or is that very URL);
* ``too-many-hops``: the hop cap reached (:func:`hop_cap`: ``REDIRECT_MAX_HOPS`` hops
  recorded, or ``REDIRECT_MAX_TIMES`` redirects followed when the project sets it, as
  Scrapy's ``RedirectMiddleware`` counts them); the last target is not fetched;
* ``blocked``: the SSRF guard refused the target;
* ``error``: a junk ``Location``, a target that cannot be keyed, or a failed download
  (recorded by :class:`ChainFailureMiddleware`).

A chain that lands on a login page, a country selector or the home page is flagged
(``soft-404:login``, ``soft-404:country-selector``, ``soft-404:homepage``,
:mod:`bloom_frontier.soft404`): the page is kept as what it is, not as the moved resource.
Pages, chains and the keys URLs had go to the crawl's recorder.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.downloadermiddlewares.redirect import BaseRedirectMiddleware, RedirectMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse
from scrapy.http.request import NO_CALLBACK
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.response import get_meta_refresh

from bloom_frontier.canonical import InvalidURL, dedupe_key, resolve_link
from bloom_frontier.canonical.rules import DEFAULT_RULES, RuleSet
from bloom_frontier.frontier import handle_page
from bloom_frontier.frontier.keys import carry_key, url_key
from bloom_frontier.meta import DEDUPE_CHECKED_META, REDIRECT_CHAIN_META
from bloom_frontier.middlewares.ssrf import AddressBlocked
from bloom_frontier.pipelines.records import (
    BLOCKED,
    ERROR,
    FETCHED,
    LOOP,
    SEEN,
    TOO_MANY_HOPS,
    VIA_LOCATION,
    VIA_META_REFRESH,
    VIA_REFRESH_HEADER,
    Chain,
    Hop,
    PageRecord,
    UrlAlias,
    rules_version_of,
)
from bloom_frontier.services import services_of
from bloom_frontier.soft404 import soft_404_flag
from bloom_frontier.ssrf import DNS_FAILURES

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

    from bloom_frontier.services import CrawlServices

logger = logging.getLogger(__name__)

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: ``Refresh: 5; url=/next`` (the URL part may be quoted; without it the page reloads itself).
REFRESH_HEADER = re.compile(
    r"""^\s*(?P<delay>\d+(?:\.\d*)?)\s*[;,]?\s*(?:url\s*=\s*)?(?P<quote>['"]?)(?P<url>[^'"]*)(?P=quote)\s*$""",
    re.IGNORECASE,
)


def hop_cap(settings: BaseSettings) -> int:
    """Hops a chain may record: ``REDIRECT_MAX_HOPS``, or fewer when the project sets
    Scrapy's ``REDIRECT_MAX_TIMES`` (redirects followed: the hop after the last one followed
    is recorded, so ``REDIRECT_MAX_TIMES + 1`` hops). Scrapy's own default of the latter
    (20) leaves ``REDIRECT_MAX_HOPS`` alone.

    >>> from scrapy.settings import Settings
    >>> hop_cap(Settings({"REDIRECT_MAX_HOPS": 10, "REDIRECT_MAX_TIMES": 1}))
    2
    """
    hops = settings.getint("REDIRECT_MAX_HOPS")
    if (settings.getpriority("REDIRECT_MAX_TIMES") or 0) > SETTINGS_PRIORITIES["default"]:
        return min(hops, settings.getint("REDIRECT_MAX_TIMES") + 1)
    return hops


def key_or_error(
    url: str, rules: RuleSet = DEFAULT_RULES, request: Request | None = None
) -> tuple[str | None, str | None]:
    """(dedupe key under ``rules``, None) or (None, the reason it has none). When ``url`` is
    ``request``'s URL, the key the request carries is used (or computed once and carried)."""
    try:
        return (dedupe_key(url, rules) if request is None else url_key(request, url, rules)), None
    except InvalidURL as exc:
        return None, exc.reason


@dataclass(frozen=True)
class Announcement:
    """A response's request to go elsewhere: status (the response's own for refreshes),
    the location as sent, and how it was sent."""

    status: int
    location: str
    via: str


class RedirectChainMiddleware(BaseRedirectMiddleware):
    """Follows redirects and refreshes, recording every hop; see the module docstring."""

    def __init__(self, settings: BaseSettings) -> None:
        super().__init__(settings)
        self.max_hops = hop_cap(settings)
        self.follow_refresh = settings.getbool("METAREFRESH_ENABLED")
        self.refresh_ignore_tags = settings.getlist("METAREFRESH_IGNORE_TAGS")
        self.refresh_max_delay = settings.getfloat("METAREFRESH_MAXDELAY")
        self.ssrf_enabled = settings.getbool("SSRF_GUARD_ENABLED")
        #: Scrapy's RedirectMiddleware, to build each followed request as Scrapy does.
        self.builder: RedirectMiddleware
        self.services: CrawlServices

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        middleware = super().from_crawler(crawler)
        middleware.builder = RedirectMiddleware.from_crawler(crawler)
        middleware.services = services_of(crawler)
        return middleware

    @property
    def rules(self) -> RuleSet:
        """The rules the crawl's links are keyed with now (its keyer's: ``CANON_HOST_RULES``,
        the seen filter's version prefix and the learned rules in force), so the keys
        of loops, "seen" and the recorded hops agree with the links' keys."""
        return self.services.frontier.keyer.current_rules()

    # --- what the response asks for ------------------------------------------------------

    def process_response(self, request: Request, response: Response) -> Request | Response:
        announcement = self.status_redirect(request, response) or self.refresh(request, response)
        if announcement is None:
            self.record_fetch(request, response)
            return response
        return self.follow(request, response, announcement)

    def status_redirect(self, request: Request, response: Response) -> Announcement | None:
        """A 3xx with a ``Location`` the request lets us follow (Scrapy's rules)."""
        if (
            request.meta.get("dont_redirect", False)
            or response.status not in REDIRECT_STATUSES
            or "Location" not in response.headers
            or response.status in getattr(self.crawler.spider, "handle_httpstatus_list", ())
            or response.status in request.meta.get("handle_httpstatus_list", ())
            or request.meta.get("handle_httpstatus_all", False)
        ):
            return None
        location = response.headers["Location"] or b""
        return Announcement(
            response.status, location.decode("utf-8", "surrogateescape"), VIA_LOCATION
        )

    def refresh(self, request: Request, response: Response) -> Announcement | None:
        """A ``Refresh`` header or ``<meta http-equiv="refresh">`` pointing elsewhere, with a
        delay below ``METAREFRESH_MAXDELAY``."""
        if (
            not self.follow_refresh
            or request.meta.get("dont_redirect", False)
            or request.method == "HEAD"
            or urlparse_cached(request).scheme not in {"http", "https"}
        ):
            return None
        header = response.headers.get("Refresh")
        if header:
            match = REFRESH_HEADER.match(header.decode("latin-1"))
            if match and match["url"] and float(match["delay"]) < self.refresh_max_delay:
                return Announcement(response.status, match["url"].strip(), VIA_REFRESH_HEADER)
        if isinstance(response, HtmlResponse):
            delay, url = get_meta_refresh(response, ignore_tags=self.refresh_ignore_tags)
            if url and delay is not None and delay < self.refresh_max_delay:
                return Announcement(response.status, url, VIA_META_REFRESH)
        return None

    # --- following -----------------------------------------------------------------------

    def follow(
        self, request: Request, response: Response, announcement: Announcement
    ) -> Request | Response:
        target = resolve_link(response.url, announcement.location)
        if request.callback is NO_CALLBACK:
            # robots.txt and other engine-internal downloads: followed as Scrapy would,
            # not part of the crawl's records or its frontier.
            internal = None
            if target is not None and len(request.meta.get("redirect_urls", ())) < self.max_hops:
                internal = self.redirect_request(request, response, announcement, target)
            if internal is None:
                raise IgnoreRequest("unfollowable redirect of an internal request")
            return internal

        chain = Chain.from_meta(request.meta) or Chain.begin(
            request, key_or_error(request.url, self.rules, request)[0]
        )
        source_key = key_or_error(response.url, self.rules, request)[0]
        target_key, key_error = key_or_error(target, self.rules) if target else (None, None)
        earlier_urls, earlier_keys = chain.urls, chain.keys
        chain = chain.add(
            Hop(
                source=response.url,
                source_key=source_key,
                status=announcement.status,
                location=announcement.location,
                target=target,
                target_key=target_key,
                via=announcement.via,
            )
        )
        self.remember_keys([(response.url, source_key), (target or "", target_key)], "redirect")
        stats = self.crawler.stats
        assert stats is not None
        stats.inc_value("redirect/hops")

        end: tuple[str, str | None] | None = None
        redirected: Request | None = None
        if target is None:
            end = ERROR, "unfollowable-location"
        elif target_key is None:
            end = ERROR, f"invalid-target:{key_error}"
        elif self.ssrf_enabled and (refusal := self.services.ssrf_policy.refusal(target)):
            end = BLOCKED, refusal
            stats.inc_value(f"ssrf/blocked/{refusal}")
        elif target in earlier_urls or (target_key in earlier_keys and target_key != source_key):
            end = LOOP, None
        elif len(chain.hops) >= self.max_hops:
            end = TOO_MANY_HOPS, None
        else:
            redirected = self.redirect_request(request, response, announcement, target)
            if redirected is None:
                end = ERROR, "not-followed"
        if end is not None:
            outcome, reason = end
            self.finish(chain.finish(outcome, target, reason))
            handled = handle_page(self.crawler, response)
            self.services.frontier.fail(request, f"redirect-{outcome}", after=handled)
            raise IgnoreRequest(f"redirect chain from {chain.start_url} ended: {outcome}")

        assert target is not None and target_key is not None and redirected is not None
        redirected.meta[REDIRECT_CHAIN_META] = chain.to_meta()
        # Keyed once: the frontier and the next hop read it (a 307 POST's key is not its URL's).
        if redirected.url == target and redirected.method == "GET":
            carry_key(redirected, target_key)
        if target_key == source_key or redirected.dont_filter:
            redirected.meta[DEDUPE_CHECKED_META] = target
            return redirected

        def target_seen(_: object = None) -> None:
            self.finish(chain.finish(SEEN, target, flag=soft_404_flag(chain.start_url, target)))
            handle_page(self.crawler, response)

        # A shared frontier may answer later (from its background thread): then the
        # request goes on, and is not queued if the answer says seen.
        admitted = self.services.frontier.admit(
            request, [redirected], on_late_duplicates=target_seen
        )
        if admitted:
            return admitted[0]
        target_seen()
        raise IgnoreRequest(f"redirect target {target} already seen")

    def redirect_request(
        self, request: Request, response: Response, announcement: Announcement, target: str
    ) -> Request | None:
        """The request for ``target``, built by Scrapy's own ``RedirectMiddleware`` (method
        change for 303 and POST redirects, cookie, authorization and proxy handling,
        Referer) through its public ``process_response``, from the response as if it had
        redirected to ``target`` (a refresh as a 303: Scrapy follows refreshes with GET).
        None when Scrapy would not follow it (its hop counters are left out: the chain's
        cap, :func:`hop_cap`, applies)."""
        status = announcement.status if announcement.via == VIA_LOCATION else 303
        headers = response.headers.copy()
        headers["Location"] = target
        # Without the hop counters: the chain's own cap (hop_cap) applies.
        meta = {
            k: v for k, v in request.meta.items() if k not in ("redirect_times", "redirect_ttl")
        }
        try:
            redirected = self.builder.process_response(
                request.replace(meta=meta), response.replace(status=status, headers=headers)
            )
        except IgnoreRequest:
            return None
        if not isinstance(redirected, Request):
            return None
        reason = announcement.status if announcement.via == VIA_LOCATION else announcement.via
        redirected.meta["redirect_times"] = request.meta.get("redirect_times", 0) + 1
        redirected.meta["redirect_urls"] = [*request.meta.get("redirect_urls", []), request.url]
        redirected.meta["redirect_reasons"] = [*request.meta.get("redirect_reasons", []), reason]
        redirected.meta.pop("redirect_ttl", None)
        return redirected

    # --- recording -----------------------------------------------------------------------

    def record_fetch(self, request: Request, response: Response) -> None:
        """The response ends its chain (if any): store the page and the chain."""
        if request.callback is NO_CALLBACK:
            return
        chain = Chain.from_meta(request.meta)
        key = key_or_error(response.url, self.rules, request)[0]
        flag = soft_404_flag(chain.start_url, response.url) if chain else None
        if chain is not None:
            self.finish(chain.finish(FETCHED, response.url, flag=flag))
        self.remember_keys([(response.url, key)], "fetched")
        self.services.recorder.page(
            PageRecord(
                fetch_url=chain.start_url if chain else request.url,
                final_url=response.url,
                key=key,
                status=response.status,
                chain_id=chain.chain_id if chain else None,
                flag=flag,
            )
        )

    def finish(self, chain: Chain) -> None:
        self.services.recorder.chain(chain)

    def remember_keys(self, pairs: list[tuple[str, str | None]], source: str) -> None:
        """Record the key each URL had (the input of a Bloom filter rebuild)."""
        self.services.recorder.url_keys(
            [
                UrlAlias(url, key, rules_version_of(key), source)
                for url, key in pairs
                if key is not None
            ]
        )


class ChainFailureMiddleware:
    """Ends a chain whose next download failed for good as ``error``.

    Installed below ``RetryMiddleware`` so that it only sees the exceptions retries gave up
    on. Refusals by the SSRF guard are recorded there, as ``blocked``.
    """

    def __init__(self, services: CrawlServices) -> None:
        self.services = services

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(services_of(crawler))

    def process_exception(self, request: Request, exception: Exception) -> None:
        chain = Chain.from_meta(request.meta)
        if chain is None or isinstance(exception, AddressBlocked):
            return
        host = urlsplit(request.url).hostname or ""
        if isinstance(exception, DNS_FAILURES) and self.services.ssrf_policy.name_refusal(host):
            return
        reason = f"{type(exception).__name__}: {exception}"[:500]
        self.services.recorder.chain(chain.finish(ERROR, request.url, reason))
