"""A local site of redirects with awkward URLs, crawled to build redirect maps for real servers.

``$`` (including ``$abc``, a would-be nginx variable), quotes and spaces, unicode and
``%``-escapes (``%2F`` and ``%5C`` too), ``;`` and braces, a 300-character path, case-only
twins (both redirecting, or one redirecting and one a page), a query source, targets
carrying tracking parameters, a chain mixing 301/308/302/307, a permanent chain joined
half-way by another source, a loop, private targets, a soft-404 to the home page, a
chain ending on a 404, and a spiral (``/spiral?n=1`` -> ``?n=2`` -> ... without end) linked
from :data:`SECTION`, not from the home page.

:data:`EXPECTED` is what a map must do with each source (request path as sent, status,
target path); :data:`NOT_ENTRIES` are the sources no map may redirect.
"""

from __future__ import annotations

from urllib.parse import unquote

from tests.httpserver import Page, Route, html, redirect

LONG = "/old/" + "x" * 300
#: Redirects by request path (as a crawler sends it): status and Location.
REDIRECTS = {
    "/old/price$5": (301, "/new/cost$5"),
    "/old/cost$abc": (301, "/new/cost$abc"),
    "/old/say%20%22hi%22": (301, "/new/say%20%22hi%22"),
    "/old/caf%C3%A9": (301, "/new/caf%C3%A9"),
    "/old/50%25off": (302, "/new/50%25off"),
    "/old/semi;colon%7Bx%7D": (301, "/new/semi;colon"),
    LONG: (301, "/new/long"),
    "/old/a%2Fb": (301, "/new/slash"),
    "/old/it's": (308, "/new/its"),
    "/old/back%5Cslash": (301, "/new/backslash"),
    "/old/why%3F": (301, "/new/answer?id=2"),  # %3F in the path, ? in the target
    "/old/Foo.html": (301, "/new/foo-upper"),
    "/old/foo.html": (308, "/new/foo-lower"),
    "/old/Case.html": (301, "/new/case"),
    "/old/q?x=1&y=2": (301, "/new/q?y=2&x=1&utm_source=nl"),
    "/old/tracked": (301, "/new/tracked?id=7&utm_campaign=spring"),
    "/mix/1": (301, "/mix/2"),
    "/mix/2": (308, "/mix/3"),
    "/mix/3": (302, "/mix/4"),
    "/mix/4": (307, "/new/mix"),
    "/perm/1": (308, "/perm/2"),
    "/perm/2": (308, "/new/perm"),
    "/perm/a": (301, "/perm/2"),
    "/loop/x": (302, "/loop/y"),
    "/loop/y": (301, "/loop/x"),
    "/old/meta": (302, "http://169.254.169.254/latest/meta-data/"),
    "/old/two": (301, "/old/two/next"),
    "/old/two/next": (302, "http://10.0.0.1/admin"),
    "/old/home": (301, "/"),
    "/old/gone": (301, "/new/gone"),
}
#: A page the home page links to, and the only one linking to the spiral.
SECTION = "/section/"
#: The spiral's first URL: ``?n=N`` redirects to ``?n=N+1``, forever.
SPIRAL = "/spiral?n=1"
#: Sources only reached through another source's chain (not linked from the home page).
IN_CHAIN = frozenset({"/mix/2", "/mix/3", "/mix/4", "/perm/2", "/old/two/next", "/loop/y"})
#: Pages (by request path) that answer 200; /new/gone answers 404.
PAGES = [
    "/new/cost$5",
    "/new/cost$abc",
    "/new/say%20%22hi%22",
    "/new/caf%C3%A9",
    "/new/50%25off",
    "/new/semi;colon",
    "/new/long",
    "/new/slash",
    "/new/its",
    "/new/backslash",
    "/new/answer?id=2",
    "/new/foo-upper",
    "/new/foo-lower",
    "/new/case",
    "/old/case.html",
    "/new/q?y=2&x=1&utm_source=nl",
    "/new/tracked?id=7&utm_campaign=spring",
    "/new/mix",
    "/new/perm",
]
#: Source request path -> (status, target path) every map must send it to.
#: One hop to a page without tracking parameters: the Location is the whole answer.
STRAIGHT = [
    "/old/price$5", "/old/cost$abc", "/old/say%20%22hi%22", "/old/caf%C3%A9", "/old/50%25off",
    "/old/semi;colon%7Bx%7D", LONG, "/old/a%2Fb", "/old/it's", "/old/back%5Cslash",
    "/old/why%3F", "/old/Foo.html", "/old/foo.html", "/old/Case.html",
]  # fmt: skip
EXPECTED = {
    **{path: REDIRECTS[path] for path in STRAIGHT},
    "/old/q?x=1&y=2": (301, "/new/q?y=2&x=1"),  # utm_source dropped, as the key drops it
    "/old/tracked": (301, "/new/tracked?id=7"),
    "/mix/1": (302, "/new/mix"),  # 301 308 302 307: temporary, method may change
    "/mix/2": (302, "/new/mix"),
    "/mix/3": (302, "/new/mix"),
    "/mix/4": (307, "/new/mix"),
    "/perm/1": (308, "/new/perm"),  # 308 308: permanent, method kept
    "/perm/2": (308, "/new/perm"),
    "/perm/a": (301, "/new/perm"),  # 301 308: permanent, method may change
}
#: Requests that must reach the same target as the source they vary.
VARIANTS = {
    "/old/q?y=2&x=1": "/old/q?x=1&y=2",
    "/old/q?x=1&y=2&utm_source=nl": "/old/q?x=1&y=2",
    "/old/q?utm_medium=mail&y=2&fbclid=abc&x=1": "/old/q?x=1&y=2",
    "/old/tracked?utm_source=nl&gclid=1": "/old/tracked",
    "/mix/1?utm_source=x": "/mix/1",
    "/old/caf%c3%a9": "/old/caf%C3%A9",  # lower-case escapes decode to the same path
}
#: Requests no map may redirect: dead ends, flagged, 404 ends, other pages and other queries.
NOT_ENTRIES = [
    "/loop/x",
    "/loop/y",
    "/old/meta",
    "/old/two",
    "/old/two/next",
    "/old/home",
    "/old/gone",
    "/old/case.html",  # a page whose case twin redirects
    "/old/FOO.html",
    "/old/q?x=1&y=2&z=3",  # another page to the crawl
    "/old/q?x=1",
    "/old/price$6",
]


def awkward_site() -> dict[str, Route]:
    """The routes, looked up by decoded path so any spelling of a URL finds its page."""
    pages: dict[str, Page] = {
        unquote(path): redirect(loc, st) for path, (st, loc) in REDIRECTS.items()
    }
    for path in PAGES:
        pages[unquote(path)] = html(title=path)
    # A canonical hint naming a URL that redirects: the audit report lists it.
    pages["/new/long"] = html(head='<link rel="canonical" href="/old/tracked">')
    linked = [path for path in REDIRECTS if path not in IN_CHAIN]
    pages["/"] = html(*linked, "/old/case.html", SECTION)
    pages[SECTION] = html(SPIRAL)
    spiral = SPIRAL.removesuffix("1")

    def route(path: str) -> Page | None:
        if path.startswith(spiral) and path.removeprefix(spiral).isdigit():
            return redirect(f"{spiral}{int(path.removeprefix(spiral)) + 1}", 302)
        return pages.get(unquote(path))

    return {"/*": route, "/": pages["/"]}
