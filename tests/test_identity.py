"""Provider identities: every spelling of one video gives one key, nothing else gets a key."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloom_frontier.canonical import RULES_VERSION, InvalidURL, canonicalize, dedupe_key, explain
from bloom_frontier.canonical.identity import PROVIDER_HOSTS, Identity, av_to_bv, bv_to_av, identify

VECTORS = json.loads((Path(__file__).parent / "data" / "video_identity.json").read_text())

# --- Rows with ``match: true`` that identify() deliberately reads as "no identity" ---------
# A key shared by a URL that does not fetch the video page (or by two different videos) makes
# the seen filter drop one of them; a missing key only costs some deduplication. So each of
# these rows must give None, for the reason given.

MIRROR_HOSTS = {
    "invidio.us",
    "redirect.invidious.io",
    "zwearz.com",
    "vid.plus",
    "www.cleanvideosearch.com",
    "www.lequipe.fr",
    "y2u.be",
    "www.player.vimeo.com",
}
NOT_THE_PAGE_HOSTS = {"i.ytimg.com", "img.youtube.com", "gdata.youtube.com"}

TWO_V = "two different v= values: which one plays is undocumented and canonical forms may reorder"
VI_PATH = "/vi/ is the thumbnail path of i.ytimg.com, not a youtube.com page"
NAME_SWF = "name.swf is get-video-id's placeholder path; only Vimeo's real moogaloop.swf is read"
NOT_A_HASH = "'randomhash' is not an unlisted hash (10 hex digits): the page is not known to exist"
SPECIFIC_REASONS = {
    "https://www.youtube.com/watch?v=YE7VzlLtp-4&v=BaW_jenozKc": TWO_V,
    "https://www.youtube.com/watch?v=BaW_jenozKc&v=yZIXLfi8CZQ": TWO_V,
    "http://www.youtube.com/watch?v=BaW_jenozKcsharePLED17F32AD9753930": (
        "v is 33 characters; an id is exactly 11, taking the first 11 would be a guess"
    ),
    "https://www.youtube.com/watch?feature=player_embedded&amp;amp;v=V36LpHqtcDY": (
        "double HTML-escaped '&': the parameter is 'amp;amp;v', the server sees no v"
    ),
    "http://youtu.be/G-3YxlZIhus&feature=channel": (
        "'&feature=channel' is part of the path segment, so the segment is not an id"
    ),
    "http://youtube.com/vi/G-3YxlZIhus&feature=channel": VI_PATH,
    "http://youtube.com/vi/G-3YxlZIhus&foo=bar": VI_PATH,
    "http://youtube.com/vi/G-3YxlZIhus&feature=share": VI_PATH,
    "https://vimeo.com/123450987/randomhash": NOT_A_HASH,
    "https://www.vimeo.com/123450987/randomhash": NOT_A_HASH,
    "http://vimeo.com/name.swf?clip_id=1234": NAME_SWF,
    "https://vimeo.com/name.swf?clip_id=1234": NAME_SWF,
    "http://vimeo.com/name.swf?clip_id=1234&server=vimeo.com&show_title=0&show_byline=0"
    "&show_portrait=0&color=00adef&fullscreen=1": NAME_SWF,
    "https://vimeo.com/name.swf?clip_id=1234&server=vimeo.com&show_title=0&show_byline=0"
    "&show_portrait=0&color=00adef&fullscreen=1": NAME_SWF,
    "https://vimeo.com/channels/1234": (
        "get-video-id only; yt-dlp and the vimeo.com/channels/31259 row read it as a channel"
    ),
    "https://vimeo.com/event/12345": (
        "get-video-id only; yt-dlp and 11 other event rows: a live event, video chosen at request"
    ),
}


def deliberate_none(row: dict) -> str | None:
    """Why identify() must return None for this ``match: true`` row, or None if it must not."""
    url, notes = row["url"], row.get("notes", "")
    if "placeholder id" in notes:
        return "placeholder id: YouTube ids are exactly 11 characters"
    if not url.startswith(("http://", "https://", "//")):
        return "not an absolute URL: as a link it would be a path on the linking page's host"
    if "id taken from the fragment" in notes:
        return "the fragment never reaches the server: the fetch yields the listing, not the video"
    host = urlsplit(url).hostname
    if host in MIRROR_HOSTS:
        return "third-party host (mirror, front-end or unused alias): not a first-party page"
    if host in NOT_THE_PAGE_HOSTS or "/thumbnail/" in url:
        return "thumbnail or API resource: fetching it does not yield the video page"
    return SPECIFIC_REASONS.get(url)


def expected_id(row: dict) -> str:
    """The vectors give av rows their BV twin in ``bv_equivalent``; keys use the BV form."""
    return row.get("bv_equivalent", row["id"])


@pytest.mark.parametrize(
    "row", VECTORS, ids=[f"{i}-{row['provider']}-{row['kind']}" for i, row in enumerate(VECTORS)]
)
def test_vector(row: dict) -> None:
    got = identify(row["url"])
    if not row["match"]:
        assert got is None, f"{row['kind']} page read as a video"
        return
    reason = deliberate_none(row)
    if reason:
        assert got is None, reason
        return
    assert got is not None
    assert got.provider == row["provider"]
    if row["id"].startswith("av") and "bv_equivalent" not in row:
        # No published twin: the av and the BV link the conversion produces must share a key.
        assert got.id.startswith("BV1")
        assert bv_to_av(got.id) == int(row["id"][2:])
        assert identify(f"https://www.bilibili.com/video/{got.id}") == got
    else:
        assert got.id == expected_id(row)
    assert got.part == (None if row.get("part") in (None, 1) else row["part"])


def test_every_specific_exclusion_names_a_matching_row() -> None:
    matching = {row["url"] for row in VECTORS if row["match"]}
    assert set(SPECIFIC_REASONS) <= matching


def test_exclusions_stay_the_exception() -> None:
    """Placeholders, mirrors and thumbnails aside, most video rows must be read as videos."""
    matching = [row for row in VECTORS if row["match"]]
    identified = [row for row in matching if not deliberate_none(row)]
    assert len(identified) > 0.6 * len(matching)
    assert {row["provider"] for row in identified} == {
        "youtube",
        "vimeo",
        "dailymotion",
        "bilibili",
    }


# --- YouTube --------------------------------------------------------------------------------


def test_seed_spellings_share_one_key() -> None:
    spellings = [
        "https://www.youtube.com/watch?v=kJQP7kiw5Fk&list=RDkJQP7kiw5Fk",
        "https://m.youtube.com/watch?v=kJQP7kiw5Fk",
        "https://youtu.be/kJQP7kiw5Fk?t=42&si=9xQd1Kk2",
        "https://www.youtube.com/watch?app=desktop&feature=share&v=kJQP7kiw5Fk",
        "HTTPS://WWW.YOUTUBE.COM:443/watch?v=kJQP7kiw5Fk#t=1m",
        "https://youtube.com./shorts/kJQP7kiw5Fk/",
        "https://music.youtube.com/watch?v=kJQP7kiw5Fk&feature=share",
        "https://www.youtube-nocookie.com/embed/kJQP7kiw5Fk?rel=0",
        "https://www.youtube.com/live/kJQP7kiw5Fk?si=abc",
        "https://www.youtube.com/v/kJQP7kiw5Fk",
        "https://www.youtube.com/watch?v=%6BJQP7kiw5Fk",
        "  https://youtu.be/kJQP7kiw5Fk\n",
    ]
    assert {identify(url) and identify(url).key for url in spellings} == {"youtube:kJQP7kiw5Fk"}


def test_youtube_ids_are_case_sensitive() -> None:
    upper = identify("https://www.youtube.com/watch?v=kJQP7kiw5Fk")
    lower = identify("https://www.youtube.com/watch?v=kjqp7kiw5fk")
    assert upper is not None and lower is not None
    assert upper.key != lower.key


@pytest.mark.parametrize(
    "url",
    [
        "https://youtu.be/DJztXj2GPfl",  # yt-dlp's test maps it to DJztXj2GPfk: last char invalid
        "https://www.youtube.com/watch?v=kJQP7kiw5F",  # 10 chars
        "https://www.youtube.com/watch?v=kJQP7kiw5Fk1",  # 12 chars
        "https://www.youtube.com/watch?v=kJQP7kiw5F.",
        "https://www.youtube.com/embed/videoseries?list=PL46F0A159EC02DF82",
        "https://www.youtube.com/embed/live_stream?channel=UC2_KI6RB__jGdlnK6dvFEZA",
        "https://www.youtube.com/watch?v=kJQP7kiw5Fk&v=kJQP7kiw5Fg",
        "https://www.youtube.com/channel/UCkJQP7kiw5Fk",
        "https://www.youtube.com/@kJQP7kiw5Fk",
        "https://www.youtube.com/playlist?list=kJQP7kiw5Fk",
        "https://youtube.com.evil.example/watch?v=kJQP7kiw5Fk",
        "https://notyoutube.com/watch?v=kJQP7kiw5Fk",
        "https://youtube.com@evil.example/watch?v=kJQP7kiw5Fk",
        "https://evil.example\\@youtube.com/watch?v=kJQP7kiw5Fk",
        "https://www.youtube.com:8080/watch?v=kJQP7kiw5Fk",
        "ftp://www.youtube.com/watch?v=kJQP7kiw5Fk",
        "https://example.com/?u=https://www.youtube.com/watch?v=kJQP7kiw5Fk",
        "https://youtube-nocookie.com/watch?v=kJQP7kiw5Fk",
    ],
)
def test_not_a_youtube_video(url: str) -> None:
    assert identify(url) is None


def test_same_id_repeated_is_not_ambiguous() -> None:
    url = "https://www.youtube.com/watch?v=kJQP7kiw5Fk&t=3&v=kJQP7kiw5Fk"
    assert identify(url) == Identity("youtube", "kJQP7kiw5Fk")


@pytest.mark.parametrize(
    "url",
    [
        "https://www.youtube.com/attribution_link?a=x&u=%2Fwatch%3Fv%3DkJQP7kiw5Fk%26feature%3Dshare",
        "https://www.youtube.com/attribution_link?u=/watch?v=kJQP7kiw5Fk&feature=share",
        "https://consent.youtube.com/m?continue=https%3A%2F%2Fyoutu.be%2FkJQP7kiw5Fk&gl=NL",
    ],
)
def test_first_party_redirect_wrappers_are_followed(url: str) -> None:
    assert identify(url) == Identity("youtube", "kJQP7kiw5Fk")


@pytest.mark.parametrize(
    "url",
    [
        # wrappers are followed one level only ...
        "https://www.youtube.com/attribution_link?u=/attribution_link?u=/watch?v=kJQP7kiw5Fk",
        "https://consent.youtube.com/m?continue=https%3A%2F%2Fconsent.youtube.com%2Fm%3Fcontinue"
        "%3Dhttps%253A%252F%252Fyoutu.be%252FkJQP7kiw5Fk",
        # ... to the same provider, and attribution_link only to a path on youtube.com
        "https://consent.youtube.com/m?continue=https%3A%2F%2Fvimeo.com%2F76979871",
        "https://www.youtube.com/attribution_link?u=//evil.example/watch?v=kJQP7kiw5Fk",
        "https://www.youtube.com/attribution_link?u=https://youtu.be/kJQP7kiw5Fk",
    ],
)
def test_wrappers_cannot_be_chained_or_leave_the_provider(url: str) -> None:
    assert identify(url) is None


# --- Vimeo and Dailymotion ------------------------------------------------------------------


def test_vimeo_unlisted_hash_is_the_same_clip() -> None:
    """The hash is an access token for one clip, so it is not part of the identity."""
    spellings = [
        "https://vimeo.com/160743502/abd0e13fb4",
        "https://player.vimeo.com/video/160743502?h=abd0e13fb4",
        "https://vimeo.com/160743502",
    ]
    assert {identify(url) for url in spellings} == {Identity("vimeo", "160743502")}


@pytest.mark.parametrize(
    "url",
    [
        "https://vimeo.com/0123",  # leading zero: not a clip number
        "https://vimeo.com/160743502/ABD0E13FB4",  # hashes are lowercase hex
        "https://vimeo.com/160743502/likes",
        "https://vimeo.com/categories/animation",
        "https://player.vimeo.com/video/abc",
    ],
)
def test_not_a_vimeo_clip(url: str) -> None:
    assert identify(url) is None


def test_dailymotion_slug_is_not_identity() -> None:
    spellings = [
        "http://www.dailymotion.com/video/x1e2b95_bruce-lee-nin-kayip-kedisi_animals",
        "https://www.dailymotion.com/video/x1e2b95?playlist=x5nmbq",
        "https://dai.ly/x1e2b95",
        "https://geo.dailymotion.com/player.html?video=x1e2b95&mute=true",
    ]
    assert {identify(url) for url in spellings} == {Identity("dailymotion", "x1e2b95")}


@pytest.mark.parametrize(
    "url",
    [
        "https://www.dailymotion.com/video/X1E2B95",  # public ids are lowercase
        "https://www.dailymotion.com/video/_x1e2b95",
        "https://geo.dailymotion.com/player/xf7zn.html?playlist=x7wdsj",
        "https://www.dailymotion.com/user/x1e2b95",
    ],
)
def test_not_a_dailymotion_video(url: str) -> None:
    assert identify(url) is None


# --- Bilibili -------------------------------------------------------------------------------

# Published av <-> BV pairs. 1705552411 is above 2**30, out of reach of the old 6-digit
# conversion, so it checks the newer algorithm.
AV_BV_PAIRS = [
    (1074402, "BV11x411K7CN"),  # video_identity.json bv_equivalent
    (8903802, "BV13x41117TL"),  # video_identity.json bv_equivalent
    (687146339, "BV1DU4y1r7tz"),  # video_identity.json: oid= and bvid= of one list URL
    (498987201, "BV16K411J754"),  # api.bilibili.com view response quoted in bilibili-Api文档.md
    (1705552411, "BV1QT421Y78p"),  # BiliRoaming av-conversion bug report (blog.gitcode.com)
]


@pytest.mark.parametrize(("av", "bv"), AV_BV_PAIRS)
def test_av_and_bv_links_share_one_key(av: int, bv: str) -> None:
    assert av_to_bv(av) == bv
    assert bv_to_av(bv) == av
    by_av = identify(f"https://www.bilibili.com/video/av{av}/")
    by_bv = identify(f"https://m.bilibili.com/video/{bv}")
    assert by_av == by_bv == Identity("bilibili", bv)
    assert by_av.key == f"bilibili:{bv}"
    assert identify(f"https://b23.tv/av{av}") == by_bv


@pytest.mark.parametrize(
    "candidate",
    [
        "BV1bK411W79O",  # "O" is not in the base-58 alphabet
        "BV1bK411W79",  # too short
        "bv1bK411W797",  # the prefix is case-sensitive
        "BV1ZZZZZZZZZ",  # well-formed but decodes past 2**52, so no av round-trips to it
        "av0",
        "av2251799813685248",  # 2**51: beyond the conversion, cannot be validated
        "av08903802",
        "av-8903802",
    ],
)
def test_unconvertible_bilibili_ids_give_none(candidate: str) -> None:
    assert identify(f"https://www.bilibili.com/video/{candidate}") is None


def test_bilibili_part_one_is_the_video_and_part_two_is_not() -> None:
    whole = identify("https://www.bilibili.com/video/BV1bK411W797")
    assert identify("https://www.bilibili.com/video/BV1bK411W797?p=1") == whole
    assert identify("https://www.bilibili.com/video/av498159642/?p=1&spm_id_from=333") == whole
    second = identify("https://www.bilibili.com/video/BV1bK411W797?p=2")
    assert second == Identity("bilibili", "BV1bK411W797", 2)
    assert second.key == "bilibili:BV1bK411W797:p2"
    assert second.key != whole.key
    assert Identity("bilibili", "BV1bK411W797", 1) == whole


@pytest.mark.parametrize("query", ["p=0", "p=x", "p=-2", "p=1&p=2", "p=02"])
def test_unreadable_bilibili_part_gives_none(query: str) -> None:
    assert identify(f"https://www.bilibili.com/video/BV1bK411W797?{query}") is None


# --- Robustness -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, 42, b"https://youtu.be/kJQP7kiw5Fk", "", "//", "https://"])
def test_non_urls_give_none(value: object) -> None:
    assert identify(value) is None  # type: ignore[arg-type]


PROVIDER_PREFIXES = [
    "https://www.youtube.com/",
    "https://youtu.be/",
    "https://consent.youtube.com/m?continue=",
    "https://www.youtube.com/attribution_link?u=",
    "https://vimeo.com/",
    "https://player.vimeo.com/video/",
    "https://geo.dailymotion.com/player/",
    "https://www.bilibili.com/video/",
    "https://b23.tv/",
]


@given(st.text())
def test_never_raises_on_any_text(text: str) -> None:
    result = identify(text)
    assert result is None or isinstance(result, Identity)


@given(st.sampled_from(PROVIDER_PREFIXES), st.text())
def test_never_raises_on_provider_urls(prefix: str, tail: str) -> None:
    result = identify(prefix + tail)
    assert result is None or result.provider in {"youtube", "vimeo", "dailymotion", "bilibili"}


def test_raw_and_stage1_canonical_urls_give_the_same_identity() -> None:
    checked = 0
    for row in VECTORS:
        try:
            canonical = canonicalize(row["url"])
        except InvalidURL:
            continue
        assert identify(canonical) == identify(row["url"]), (row["url"], canonical)
        checked += 1
    assert checked > 400


def test_dedupe_key_finds_every_identity_although_it_reads_only_provider_hosts() -> None:
    """dedupe_key calls identify() only for PROVIDER_HOSTS: no identity may be lost by that."""
    identified = 0
    for row in VECTORS:
        try:
            canonical = canonicalize(row["url"])
        except InvalidURL:
            continue
        identity = identify(canonical)
        if identity is not None:
            identified += 1
            assert urlsplit(canonical).hostname in PROVIDER_HOSTS
            assert explain(canonical).identity == identity, canonical
    assert identified > 150


@pytest.mark.parametrize(
    ("url", "identified"),
    [
        ("http://www.youtube.com:443/watch?v=kJQP7kiw5Fk", True),  # stage 1 keeps it on http
        ("https://www.youtube.com:80/watch?v=kJQP7kiw5Fk", True),
        ("https://user:pw@youtu.be/kJQP7kiw5Fk", True),
        ("https://www.youtube.com./watch?v=kJQP7kiw5Fk", True),
        ("https://www.youtube.com:8443/watch?v=kJQP7kiw5Fk", False),
        ("https://gaming.youtube.com/watch?v=kJQP7kiw5Fk", False),  # no subdomain implied
    ],
)
def test_dedupe_key_reads_identities_on_the_authorities_identify_reads(
    url: str, identified: bool
) -> None:
    assert (identify(url) is not None) is identified
    key = dedupe_key(url)
    assert (key == f"{RULES_VERSION}|youtube:kJQP7kiw5Fk") is identified


SPELLED_VIDEOS = {
    "https://www.youtube.com/watch?v=kJQP7kiw5Fk&list=RDkJQP7kiw5Fk": "youtube:kJQP7kiw5Fk",
    "https://youtu.be/kJQP7kiw5Fk?t=42": "youtube:kJQP7kiw5Fk",
    "https://vimeo.com/channels/staffpicks/143603739": "vimeo:143603739",
    "https://player.vimeo.com/video/36881035?h=f9ad567296": "vimeo:36881035",
    "https://www.dailymotion.com/video/x82nygx?playlist=x5nmbq": "dailymotion:x82nygx",
    "https://www.bilibili.com/video/BV1ms411Q7vw/?p=4": "bilibili:BV1ms411Q7vw:p4",
    "https://www.bilibili.com/video/av1074402/": "bilibili:BV11x411K7CN",
}


@st.composite
def respelled(draw: st.DrawFn) -> tuple[str, str]:
    """A video URL spelled differently: host case, percent-escapes, extra params, fragment."""
    url, key = draw(st.sampled_from(sorted(SPELLED_VIDEOS.items())))
    scheme, _, rest = url.partition("://")
    host, _, tail = rest.partition("/")
    host = "".join(c.upper() if draw(st.booleans()) else c for c in host)
    tail = "".join(
        f"%{ord(c):02X}" if c.isalnum() and draw(st.integers(0, 9)) == 0 else c for c in tail
    )
    path, _, query = tail.partition("?")
    params = [p for p in query.split("&") if p]
    extra = draw(st.lists(st.sampled_from(["utm_source=x", "si=9xQd1Kk2", "feature=share", ""])))
    params = draw(st.permutations(params + extra))
    fragment = draw(st.sampled_from(["", "#", "#t=42", "#video=x1e2b95"]))
    query = f"?{'&'.join(params)}" if params else ""
    return (
        f"{scheme.upper() if draw(st.booleans()) else scheme}://{host}/{path}{query}{fragment}",
        key,
    )


@given(respelled())
def test_respelled_videos_keep_their_key_raw_and_canonical(case: tuple[str, str]) -> None:
    url, key = case
    raw = identify(url)
    assert raw is not None and raw.key == key, url
    assert identify(canonicalize(url)) == raw
