"""Soft 404s: a redirect chain that lands on a login page, a country selector or the home
page, where sites send requests for things they no longer have. The page is kept as what it
is, not as the moved resource; the chain and the page carry the flag."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

HOME_PATHS = re.compile(r"/(?:(?:index|default|home)(?:\.[a-z]+)?)?", re.IGNORECASE)
LOGIN_PATH = re.compile(
    r"(?:^|/)(?:log-?in|sign-?in|signon|sso|auth|authenticate|session/new|users/sign_in"
    r"|wp-login\.php|account/login)(?:/|\.|$)",
    re.IGNORECASE,
)
COUNTRY_SELECTOR_PATH = re.compile(
    r"(?:^|/)(?:(?:choose|select|change)[-_]?(?:your[-_]?)?(?:country|region|locale|location)"
    r"|(?:country|region|locale)[-_]?(?:selector|select|chooser|picker|gateway)"
    r"|international|intl)(?:/|\.|$)",
    re.IGNORECASE,
)


def is_home_page(url: str) -> bool:
    """``url`` is a site's root (``/``, ``/index.html``, ``/default.aspx``...) without a
    query: where sites send requests for things they no longer have."""
    parts = urlsplit(url)
    return not parts.query and HOME_PATHS.fullmatch(parts.path or "/") is not None


def soft_404_flag(start_url: str, final_url: str) -> str | None:
    """Why the page a chain landed on stands in for a missing resource, or None."""
    path = urlsplit(final_url).path
    if LOGIN_PATH.search(path):
        return "soft-404:login"
    if COUNTRY_SELECTOR_PATH.search(path):
        return "soft-404:country-selector"
    if is_home_page(final_url) and not is_home_page(start_url):
        return "soft-404:homepage"
    return None
