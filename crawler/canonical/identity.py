"""Provider video identities: which video a URL addresses, however the link spells it.

``identify(url)`` reads YouTube, Vimeo, Dailymotion and Bilibili links and returns an
:class:`Identity` (``youtube:kJQP7kiw5Fk``) or ``None``. A wrong identity merges two videos
(or a dead link with a live video) in the seen filter, so every id is shape-checked and any
doubt gives ``None``: the URL then keeps its structural key, merely less deduplicated.

Policy, decided once here:

* Only first-party hosts. Mirrors and front-ends (invidious, vid.plus, lequipe.fr, ...) and
  hosts no provider documents (``www.player.vimeo.com``) give ``None``.
* Only URLs whose *fetch* yields the video page or player: thumbnails (``i.ytimg.com``), API
  feeds and ids hidden in a fragment (never sent to the server) give ``None``.
* Relative references and bare ids are not URLs: ``None``. Scheme-relative ``//host/...`` is
  read as https because its host is unambiguous.
* A query naming the id twice with different values is ambiguous (canonicalization may reorder
  it), so ``None``; equal repeats are fine.
* Vimeo's unlisted hash (``vimeo.com/ID/HASH``, ``?h=HASH``) is an access token for the same
  clip, not a different video: the identity is the numeric clip id alone.
* Bilibili keys on the BV form: ``av`` numbers are converted with the public XOR/base-58
  algorithm (valid for 1 <= av < 2**51) and a BV id is accepted only if it round-trips.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

PROVIDERS = frozenset({"youtube", "vimeo", "dailymotion", "bilibili"})


@dataclass(frozen=True, slots=True)
class Identity:
    """One provider video.

    ``id`` is the provider's own id in one canonical form (Bilibili: the BV id, also for ``av``
    links); ``part`` is a Bilibili page number >= 2, since part 1 is the video itself.
    """

    provider: str
    id: str
    part: int | None = None

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"unknown provider {self.provider!r}")
        if self.part is not None and self.part < 1:
            raise ValueError(f"part must be >= 1, got {self.part}")
        if self.part == 1:
            object.__setattr__(self, "part", None)

    @property
    def key(self) -> str:
        """``provider:id`` plus ``:pN`` for a part, the string the seen filter stores."""
        base = f"{self.provider}:{self.id}"
        return base if self.part is None else f"{base}:p{self.part}"


# A parser gets the decoded path segments and the query; it returns the identity, the URL a
# first-party redirect wrapper leads to (``str``), or None.
Query = dict[str, set[str]]
Parser = Callable[[list[str], Query], "Identity | str | None"]

# Scheme and authority of an http(s) or scheme-relative URL, after the C0-and-space junk WHATWG
# strips. The userinfo runs to the last "@"; a backslash ends the authority, as in browsers.
_AUTHORITY = re.compile(
    r"[\x00-\x20]*(?:https?:)?//(?:[^/?#\\]*@)?(?P<host>[^/?#\\:]*)(?::(?P<port>[^/?#\\]*))?",
    re.IGNORECASE,
)
_DEFAULT_PORTS = frozenset({None, "", "80", "443"})
_URL_JUNK = "".join(map(chr, range(0x21)))
# Browsers drop tabs and newlines anywhere in a URL and read "\\" as "/" in http(s) paths.
_BROWSER_CLEANUP = str.maketrans({"\t": None, "\n": None, "\r": None, "\\": "/"})

# --- YouTube ---------------------------------------------------------------------------------

# 11 chars of base64url; the last one carries only 4 bits, so it is one of 16 letters.
_YOUTUBE_ID = re.compile(r"[A-Za-z0-9_-]{10}[AEIMQUYcgkosw048]")
_YOUTUBE_NOT_IDS = frozenset({"videoseries"})  # /embed/videoseries?list=...: a playlist player
_YOUTUBE_QUERY_PAGES = frozenset({"watch", "watch_popup", "details"})  # details: legacy mobile
_YOUTUBE_PATH_PAGES = frozenset({"shorts", "embed", "live", "v"})


def _youtube_id(candidate: str | None) -> str | None:
    if candidate and _YOUTUBE_ID.fullmatch(candidate) and candidate not in _YOUTUBE_NOT_IDS:
        return candidate
    return None


def _youtube(provider_id: str | None) -> Identity | None:
    return Identity("youtube", provider_id) if provider_id else None


def _youtube_site(segments: list[str], query: Query) -> Identity | str | None:
    """www/m/music.youtube.com and youtubekids.com pages."""
    if len(segments) == 1:
        page = segments[0]
        if page in _YOUTUBE_QUERY_PAGES:
            return _youtube(_youtube_id(_unique(query, "v")))
        if page == "attribution_link":
            target = _unique(query, "u")
            if target and target.startswith("/") and not target.startswith("//"):
                return "https://www.youtube.com" + target
    elif len(segments) == 2 and segments[0] in _YOUTUBE_PATH_PAGES:
        return _youtube(_youtube_id(segments[1]))
    return None


def _youtube_short(segments: list[str], query: Query) -> Identity | None:
    """youtu.be/ID"""
    return _youtube(_youtube_id(segments[0])) if len(segments) == 1 else None


def _youtube_embed(segments: list[str], query: Query) -> Identity | None:
    """youtube-nocookie.com/embed/ID"""
    if len(segments) == 2 and segments[0] == "embed":
        return _youtube(_youtube_id(segments[1]))
    return None


def _youtube_flash(segments: list[str], query: Query) -> Identity | None:
    """youtube.googleapis.com/v/ID, the old embedded player."""
    if len(segments) == 2 and segments[0] == "v":
        return _youtube(_youtube_id(segments[1]))
    return None


def _youtube_consent(segments: list[str], query: Query) -> str | None:
    """consent.youtube.com/m?continue=URL: the cookie wall in front of a YouTube page."""
    return _unique(query, "continue") if segments == ["m"] else None


# --- Vimeo -----------------------------------------------------------------------------------

_VIMEO_ID = re.compile(r"[1-9][0-9]{0,11}")
_VIMEO_HASH = re.compile(r"[0-9a-f]{10}")


def _vimeo(candidate: str | None) -> Identity | None:
    if candidate and _VIMEO_ID.fullmatch(candidate):
        return Identity("vimeo", candidate)
    return None


def _vimeo_site(segments: list[str], query: Query) -> Identity | None:
    """vimeo.com clip pages, including clips shown inside a channel/group/album/event."""
    match segments:
        case [clip]:
            if clip == "moogaloop.swf":
                return _vimeo(_unique(query, "clip_id"))
            return _vimeo(clip)
        case [clip, unlisted_hash] if _VIMEO_HASH.fullmatch(unlisted_hash):
            return _vimeo(clip)
        case ["channels", _, clip]:
            return _vimeo(clip)
        case ["groups", _, "videos", clip] | ["event", _, "videos", clip]:
            return _vimeo(clip)
        case ["album" | "showcase", _, "video", clip]:
            return _vimeo(clip)
        case [_, "review", clip, unlisted_hash] if _VIMEO_HASH.fullmatch(unlisted_hash):
            return _vimeo(clip)
    return None


def _vimeo_player(segments: list[str], query: Query) -> Identity | None:
    """player.vimeo.com/video/ID"""
    return _vimeo(segments[1]) if len(segments) == 2 and segments[0] == "video" else None


def _vimeo_pro(segments: list[str], query: Query) -> Identity | None:
    """vimeopro.com/USER/PROJECT/video/ID"""
    return _vimeo(segments[3]) if len(segments) == 4 and segments[2] == "video" else None


# --- Dailymotion -----------------------------------------------------------------------------

# Public ids are base-36 counters after an "x"; private ids are "k" + 18 alphanumerics.
_DAILYMOTION_ID = re.compile(r"x[0-9a-z]{2,7}|k[0-9A-Za-z]{18}")
_DAILYMOTION_PLAYER = re.compile(r"x[0-9a-z]+\.html")


def _dailymotion(segment: str | None) -> Identity | None:
    """``ID`` or ``ID_title-slug``: the slug is decoration, not identity."""
    if not segment:
        return None
    candidate = segment.partition("_")[0]
    return Identity("dailymotion", candidate) if _DAILYMOTION_ID.fullmatch(candidate) else None


def _dailymotion_site(segments: list[str], query: Query) -> Identity | None:
    """dailymotion.com/video/ID and its embed, crawler and old flash variants."""
    match segments:
        case ["video", clip] | ["embed" | "crawler" | "swf", "video", clip]:
            return _dailymotion(clip)
        case ["swf", clip]:
            return _dailymotion(clip)
    return None


def _dailymotion_player(segments: list[str], query: Query) -> Identity | None:
    """geo.dailymotion.com/player[/PLAYER].html?video=ID"""
    if segments == ["player.html"] or (
        len(segments) == 2
        and segments[0] == "player"
        and _DAILYMOTION_PLAYER.fullmatch(segments[1])
    ):
        return _dailymotion(_unique(query, "video"))
    return None


def _dailymotion_short(segments: list[str], query: Query) -> Identity | None:
    """dai.ly/ID"""
    return _dailymotion(segments[0]) if len(segments) == 1 else None


# --- Bilibili --------------------------------------------------------------------------------

_BV_ALPHABET = "FcwAPNKTMug3GV5Lj7EJnHpWsx4tb8haYeviqBz6rkCy12mUSDQX9RdoZf"
_BV_DIGIT = {char: value for value, char in enumerate(_BV_ALPHABET)}
# Where each base-58 digit goes among the 9 characters after "BV1", least significant first.
_BV_POSITIONS = (8, 7, 0, 5, 1, 3, 2, 4, 6)
_BV_XOR = 23442827791579
_AV_LIMIT = 1 << 51
_AV = re.compile(r"av([1-9][0-9]{0,15})")
_BV = re.compile(r"BV1[" + _BV_ALPHABET + r"]{9}")
_PART = re.compile(r"[1-9][0-9]{0,3}")


def av_to_bv(av: int) -> str:
    """The BV id of Bilibili video ``av`` (1 <= av < 2**51), by the public conversion."""
    if not 1 <= av < _AV_LIMIT:
        raise ValueError(f"av number out of range: {av}")
    value = (_AV_LIMIT | av) ^ _BV_XOR
    digits = [""] * len(_BV_POSITIONS)
    for position in _BV_POSITIONS:
        value, digit = divmod(value, 58)
        digits[position] = _BV_ALPHABET[digit]
    return "BV1" + "".join(digits)


def bv_to_av(bv: str) -> int | None:
    """The av number of ``bv``, or None unless ``bv`` is a well-formed id that round-trips."""
    if not _BV.fullmatch(bv):
        return None
    value = 0
    for position in reversed(_BV_POSITIONS):
        value = value * 58 + _BV_DIGIT[bv[3 + position]]
    av = (value & (_AV_LIMIT - 1)) ^ _BV_XOR
    return av if 1 <= av < _AV_LIMIT and av_to_bv(av) == bv else None


def _bilibili_bv(candidate: str | None) -> str | None:
    """Canonical BV id for a BV or ``av<number>`` path segment, if it converts cleanly."""
    if not candidate:
        return None
    if bv_to_av(candidate) is not None:
        return candidate
    av = _AV.fullmatch(candidate)
    if av and int(av[1]) < _AV_LIMIT:
        return av_to_bv(int(av[1]))
    return None


def _bilibili(candidate: str | None, query: Query) -> Identity | None:
    bv = _bilibili_bv(candidate)
    parts = query.get("p")
    if bv is None or (parts is not None and len(parts) > 1):
        return None
    if parts is None:
        return Identity("bilibili", bv)
    part = next(iter(parts))
    return Identity("bilibili", bv, int(part)) if _PART.fullmatch(part) else None


def _bilibili_site(segments: list[str], query: Query) -> Identity | None:
    """bilibili.com/video/ID, and festival/playlist pages playing ``?bvid=``."""
    match segments:
        case ["video", clip]:
            return _bilibili(clip, query)
        case ["festival" | "list", _]:
            bvid = _unique(query, "bvid")
            return _bilibili(bvid, query) if bvid and bvid.startswith("BV") else None
    return None


def _bilibili_short(segments: list[str], query: Query) -> Identity | None:
    """b23.tv/BV... or b23.tv/av...; opaque short codes carry no id."""
    return _bilibili(segments[0], query) if len(segments) == 1 else None


# --- URL reading -----------------------------------------------------------------------------

_PARSERS: dict[str, tuple[str, Parser]] = {
    **dict.fromkeys(
        (
            "youtube.com",
            "www.youtube.com",
            "m.youtube.com",
            "music.youtube.com",
            "youtubekids.com",
            "www.youtubekids.com",
        ),
        ("youtube", _youtube_site),
    ),
    "youtu.be": ("youtube", _youtube_short),
    "youtube-nocookie.com": ("youtube", _youtube_embed),
    "www.youtube-nocookie.com": ("youtube", _youtube_embed),
    "youtube.googleapis.com": ("youtube", _youtube_flash),
    "consent.youtube.com": ("youtube", _youtube_consent),
    "vimeo.com": ("vimeo", _vimeo_site),
    "www.vimeo.com": ("vimeo", _vimeo_site),
    "player.vimeo.com": ("vimeo", _vimeo_player),
    "vimeopro.com": ("vimeo", _vimeo_pro),
    "www.vimeopro.com": ("vimeo", _vimeo_pro),
    **dict.fromkeys(
        ("dailymotion.com", "www.dailymotion.com", "touch.dailymotion.com"),
        ("dailymotion", _dailymotion_site),
    ),
    "geo.dailymotion.com": ("dailymotion", _dailymotion_player),
    "dai.ly": ("dailymotion", _dailymotion_short),
    **dict.fromkeys(
        ("bilibili.com", "www.bilibili.com", "m.bilibili.com"),
        ("bilibili", _bilibili_site),
    ),
    "b23.tv": ("bilibili", _bilibili_short),
}
_PARSERS.update({f"{host}.": entry for host, entry in _PARSERS.items()})  # absolute DNS names

#: The hosts :func:`identify` reads (lower-case, absolute ``host.`` forms included; no
#: subdomain is implied), and only on a default port (none, 80 or 443). A URL on any other
#: authority has no identity, so a caller that has already split the authority can skip
#: :func:`identify` for it.
PROVIDER_HOSTS: frozenset[str] = frozenset(_PARSERS)


def _unique(query: Query, name: str) -> str | None:
    """The value of ``name`` if the query gives it exactly one (possibly repeated) value."""
    values = query.get(name)
    return next(iter(values)) if values and len(values) == 1 else None


def _parse_query(query: str) -> Query:
    params: Query = {}
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        params.setdefault(unquote(name), set()).add(unquote(value))
    return params


def _path_segments(path: str) -> list[str]:
    """Percent-decoded segments with dot segments resolved and one trailing slash ignored.

    Decoding and dot removal are what RFC 3986 normalization does, so a raw URL and its
    canonical form give the same segments.
    """
    segments: list[str] = []
    for raw in path.split("/")[1:]:
        segment = unquote(raw)
        if segment == "..":
            if segments:
                segments.pop()
        elif segment != ".":
            segments.append(segment)
    if len(segments) > 1 and segments[-1] == "":
        segments.pop()
    return segments


def identify(url: str) -> Identity | None:
    """The provider video ``url`` addresses, or None; pure, never raises."""
    located = _locate(url)
    return None if located is None else _read(*located, unwrap=True)


def _locate(url: str) -> tuple[str, Parser, str] | None:
    """Provider, parser and the text after the authority; the hot path for every link."""
    if not isinstance(url, str):
        return None
    authority = _AUTHORITY.match(url)
    if authority is None:
        return None
    entry = _PARSERS.get(authority["host"].lower())
    if entry is None or authority["port"] not in _DEFAULT_PORTS:
        return None
    return entry[0], entry[1], url[authority.end() :]


def _read(provider: str, parse: Parser, rest: str, *, unwrap: bool) -> Identity | None:
    rest = rest.partition("#")[0].rstrip(_URL_JUNK)
    if "\t" in rest or "\n" in rest or "\r" in rest or "\\" in rest:
        rest = rest.translate(_BROWSER_CLEANUP)  # rare, and a dict translation is slow
    path, _, query = rest.partition("?")
    result = parse(_path_segments(path), _parse_query(query) if query else {})
    if not isinstance(result, str):
        return result
    # A first-party redirect wrapper: followed one level only, and only to the same provider.
    located = _locate(result) if unwrap else None
    if located is None or located[0] != provider:
        return None
    return _read(*located, unwrap=False)
