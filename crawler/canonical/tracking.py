"""Curated lists of query parameters that never change what a page shows.

Removing a parameter that *does* matter merges two pages into one key: a page silently never
fetched. Keeping a tracking parameter only costs a refetch. So a name is only listed here when
a public blocklist below lists it as tracking (the sources are cited per name), and it is only
*global* when the name is vendor-specific (a click id or campaign field of a named ad,
analytics or e-mail product) so that no site can plausibly use it for content, and no source
exempts a host where it matters.

Sources (names are facts; the lists themselves are not shipped):

- ``C``: ClearURLs rules, ``data.min.json`` at commit 9317c06 (global provider; ``C:<provider>``
  for a provider-scoped rule).
- ``A``: AdGuard URL Tracking filter, ``TrackParamFilter/sections/general_url.txt`` at 002b066.
- ``B``: Brave query filter, ``components/query_filter/utils.cc`` at 0c7f00e (``B:<domains>`` for
  a parameter Brave only strips on those domains; ``B'`` for a name only in another stored
  version, 4d9ded2).

Deliberately NOT global by name:

- ``si`` and ``ref_src`` (also ``ref_url``, ``igsh``): share tokens of YouTube/Spotify,
  Twitter/X and Instagram. No source lists them globally: Brave scopes ``si`` to youtube.com /
  youtu.be and ``ref_src``/``ref_url`` to twitter.com / x.com; ClearURLs lists ``si`` only under
  its youtube and spotify providers and ``ref_src`` only under twitter / x; AdGuard's general
  list has neither. ``si`` is a two-letter word that other sites use for content ("site id",
  "search index", Spanish "yes"), so stripping it everywhere could merge distinct pages. They are
  stripped by name on their providers' hosts (:data:`PROVIDER_TRACKING`); everywhere else only
  when their *value* has the provider's token shape (:data:`SHAPED_TRACKING`); a site known to
  append them in another shape can be given them with ``CANON_HOST_RULES``
  (``{"host": {"strip": ["si"]}}``).
- ``__s`` (Drip): global for C and B, but AdGuard exempts the univis.* university hosts
  where it carries meaning.
- ``spm``, ``gs_l``, ``[a-z]?mc``, ``ga_*``: single-source, short or pattern-wide names.
- ``ck_subscriber_id``, ``h_sid``, ``h_slt``: Brave keeps them on unsubscribe / e-mail URLs,
  i.e. they select content there.
- generic words (``ref``, ``source``, ``src``, ``id``, ``s``, ``t``, ``from``): content on
  many sites; only ever per host.

``mkt_tok`` stays global (all three list it) although Brave keeps it on Marketo unsubscribe
pages: a crawler gains nothing from fetching one unsubscribe page per recipient token.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import NamedTuple

#: Name prefixes stripped everywhere (compared case-insensitively).
#: ``utm_``: Google Analytics campaign fields (C regex ``utm(?:_[a-z_]*)?``; A lists 31 ``utm_*``).
#: ``mtm_``: Matomo campaign fields (C regex ``mtm(?:_[a-z_]*)?``; A lists 8; B ``mtm_cid``).
GLOBAL_TRACKING_PREFIXES: tuple[str, ...] = ("utm_", "mtm_")

#: Exact names stripped everywhere, with the sources listing each one globally.
GLOBAL_TRACKING_SOURCES: MappingProxyType[str, str] = MappingProxyType(
    {
        # Google Ads / Analytics / Search
        "gclid": "C A B",
        "gclsrc": "A",
        "dclid": "C B",
        "gbraid": "A B'",
        "wbraid": "A B",
        "_ga": "C A",
        "_gl": "C A B",
        "srsltid": "C B",
        # Meta / Facebook
        "fbclid": "C A B",
        "fb_action_ids": "C A B",
        "fb_action_types": "C A",
        "fb_source": "C A",
        "fb_ref": "C A",
        "fb_comment_id": "A B",
        "action_object_map": "C A",
        "action_type_map": "C A",
        "action_ref_map": "C A",
        # Instagram share id: C and B scope it to instagram.com, but the name is Instagram's
        # own and means the same wherever a shared link lands.
        "igshid": "C:instagram B:instagram.com",
        # Microsoft Ads
        "msclkid": "C A B",
        # Twitter / X Ads
        "twclid": "C A B",
        "__twitter_impression": "C",
        # Yandex
        "yclid": "C A B",
        "ysclid": "A B",
        "ymclid": "B",
        "_openstat": "C A B",
        # Mailchimp
        "mc_cid": "C",
        "mc_eid": "C A B",
        # HubSpot
        "_hsenc": "C A B",
        "_hsmi": "C:deeplearning.ai (HubSpot e-mail id, sibling of _hsenc)",
        "__hsfp": "C A B",
        "__hssc": "C A B",
        "__hstc": "C A B",
        "hsctatracking": "C A B",
        "hsa_acc": "A",
        "hsa_ad": "A",
        "hsa_cam": "A",
        "hsa_grp": "A",
        "hsa_kw": "A",
        "hsa_la": "A",
        "hsa_mt": "A",
        "hsa_net": "A",
        "hsa_ol": "A",
        "hsa_src": "A",
        "hsa_tgt": "A",
        "hsa_ver": "A",
        # Marketo
        "mkt_tok": "C A B",
        # Matomo / Piwik (besides the mtm_ prefix)
        "pk_campaign": "A",
        "pk_medium": "A",
        "pk_source": "A",
        "pk_vid": "A",
        "pk_cid": "B",
        # Adobe Analytics, Webtrends, AT Internet
        "s_cid": "C A B",
        "wt_mc": "C A",
        "xtor": "A",
        # Internal-campaign fields (itm_*, as utm_* for on-site promotions)
        "itm_source": "C A",
        "itm_medium": "C A",
        "itm_campaign": "C A",
        "itm_content": "A",
        "itm_term": "A",
        "cmpid": "C A",
        # E-mail and affiliate platforms
        "ml_subscriber": "C A B",
        "ml_subscriber_hash": "C A B",
        "oly_anon_id": "C A B",
        "oly_enc_id": "C A B",
        "rb_clickid": "C A B",
        "vero_conv": "C A B",
        "vero_id": "C A B",
        "wickedid": "C A B",
        "irclickid": "A B",
        "_branch_match_id": "A B",
        "_kx": "A B",
        "bsft_clkid": "A B",
        "bsft_uid": "A B",
        "unicorn_click_id": "A B",
        "ss_email_id": "B",
        "guce_referrer": "A B",
        "guce_referrer_sig": "A B",
        "echobox": "C",
    }
)

#: The global exact names, lower-cased (matching is case-insensitive).
GLOBAL_TRACKING: frozenset[str] = frozenset(GLOBAL_TRACKING_SOURCES)

#: Tracking names that only mean tracking on one provider's hosts (the domain and its
#: subdomains). Each entry: domains -> {name: sources}.
PROVIDER_TRACKING: tuple[tuple[tuple[str, ...], MappingProxyType[str, str]], ...] = (
    (
        ("youtube.com", "youtu.be"),
        MappingProxyType(
            {
                "si": "C:youtube B:youtube.com,youtu.be",
                "feature": "C:youtube",
                "pp": "C:youtube",
                "kw": "C:youtube",
            }
        ),
    ),
    (
        ("twitter.com", "x.com"),
        MappingProxyType(
            {
                "ref_src": "C:twitter,x B:twitter.com,x.com",
                "ref_url": "C:twitter,x B:twitter.com,x.com",
                "src": "C:twitter,x",
                "s": "C:twitter,x",
                "t": "C:twitter,x",
                "cn": "C:twitter,x",
            }
        ),
    ),
    (("instagram.com",), MappingProxyType({"igsh": "C:instagram B:instagram.com"})),
    (("spotify.com",), MappingProxyType({"si": "C:spotify.com"})),
    (
        ("reddit.com",),
        MappingProxyType(
            {
                "share_id": "C:reddit",
                "ref_source": "C:reddit",
                "ref_campaign": "C:reddit",
                "correlation_id": "C:reddit",
                "rdt": "C:reddit",
            }
        ),
    ),
    (
        ("linkedin.com",),
        MappingProxyType({"trk": "C:LinkedIn", "trackingid": "C:LinkedIn", "refid": "C:LinkedIn"}),
    ),
    (("medium.com",), MappingProxyType({"source": "C:medium.com"})),
    (
        ("tiktok.com",),
        MappingProxyType(
            {
                "_d": "C:tiktok.com",
                "_r": "C:tiktok.com",
                "_t": "C:tiktok.com",
                "u_code": "C:tiktok.com",
                "preview_pb": "C:tiktok.com",
                "share_app_name": "C:tiktok.com",
                "share_iid": "C:tiktok.com",
            }
        ),
    ),
    (("facebook.com",), MappingProxyType({"mibextid": "C:facebook", "__tn__": "C:facebook"})),
)


class ValueShape(NamedTuple):
    """A parameter that is tracking only when its value has this shape (see
    :data:`SHAPED_TRACKING`)."""

    name: str  #: lower-case; matched case-insensitively, like the name lists
    value: re.Pattern[str]  #: must match the whole stage-1 (percent-encoded) value
    source: str  #: why the shape identifies a tracker and not content


#: Parameters stripped on every host, but only when the value has a tracker's token shape: a
#: generic name (``si``) is content on some sites, a value in the share widget's own format is
#: not. Values are matched as stage 1 writes them (escapes with uppercase hex). Applied after
#: the name lists, so a provider's host still reports its ``tracking:<name>`` rule; the rule
#: name is ``tracking-shaped:<name>``, switched off per host like any rule.
SHAPED_TRACKING: tuple[ValueShape, ...] = (
    ValueShape(
        "ref_src",
        # "twsrc^" + source, e.g. twsrc^tfw, twsrc^google|twcamp^serp|twgr^author: the format
        # Twitter's share button and embedded-tweet widgets append (the ClearURLs and Brave
        # entries for twitter.com / x.com); no site is known to use that prefix for content.
        re.compile(r"twsrc%5[Ee].*"),
        "Twitter/X share and embed widgets (C:twitter,x B:twitter.com,x.com)",
    ),
    ValueShape(
        "si",
        # Exactly 16 base64url characters: YouTube's share id (youtu.be/ID?si=...), also
        # matching Spotify's current 16-hex share id. Not extended to Spotify's older 22- or
        # 32-character forms: 22 base62 characters is the shape of a Spotify *content* id
        # (track, album), and 32 hex digits that of an MD5 or dashless UUID a site may name
        # its own "si" (site / story id) with; a wrong strip merges pages, a missed one only
        # costs a refetch.
        re.compile(r"[A-Za-z0-9_-]{16}"),
        "YouTube share id (C:youtube B:youtube.com,youtu.be), Spotify 16-hex (C:spotify.com)",
    ),
)

#: Query parameters that carry a server-side session id, compared case-insensitively. Each is
#: the default session name of a server framework, so the name alone identifies a session:
#: ``jsessionid`` (Java Servlet), ``phpsessid`` (PHP ``session.name``), ``cfid``/``cftoken``
#: (ColdFusion client management), ``oscsid`` (osCommerce), ``zenid`` (Zen Cart).
#: NOT ``sid``/``sessionid``/``session_id``: phpBB and some shops use ``sid`` for sessions
#: (ClearURLs scopes it to mozillazine.org, allegro.pl, idealo.de) but elsewhere it names a
#: station, story or section; add it per host with ``CANON_HOST_RULES`` where it is a session.
SESSION_PARAMS: frozenset[str] = frozenset(
    {"jsessionid", "phpsessid", "cfid", "cftoken", "oscsid", "zenid"}
)

#: Session parameter prefixes: classic ASP names its cookie ``ASPSESSIONID<8 letters>``.
SESSION_PREFIXES: tuple[str, ...] = ("aspsessionid",)

#: Path parameters (``/page;name=value``) carrying a session: the Servlet spec's URL rewriting.
SESSION_PATH_PARAMS: tuple[str, ...] = ("jsessionid",)

#: Hosts (and ``host/path`` pages) whose meaningful parameters are known: everything else is
#: dropped there. Kept to a few well-documented, stable URL schemes.
ALLOWLISTS: MappingProxyType[str, frozenset[str]] = MappingProxyType(
    {
        # Hacker News: a story / comment page is ?id=N, a profile ?id=NAME; links shared from
        # it collect utm_*/ref/share parameters the server ignores.
        "news.ycombinator.com/item": frozenset({"id"}),
        "news.ycombinator.com/user": frozenset({"id"}),
        # Google Play app pages: ?id=PACKAGE plus language (hl) and country (gl), which change
        # the page; referrer/pcampaignid and the like are install attribution.
        "play.google.com/store/apps/details": frozenset({"id", "hl", "gl"}),
    }
)
