"""Stage 2: the dedupe key - semantic rules and provider identities on top of stage 1.

:func:`dedupe_key` turns a URL into the key the seen filter stores:

* ``<version>|<provider>:<id>`` when a provider claims the URL (:func:`identify`, e.g.
  ``r2|youtube:kJQP7kiw5Fk``), so every spelling of one video shares a key;
* otherwise ``<version>|<stage-1 form after the rules>``. The rules, each with the name
  :func:`explain` reports when it fires and :data:`CANON_HOST_RULES` uses to switch it off:

  - ``tracking:<name>``: a tracking parameter removed (curated lists in
    :mod:`bloom_frontier.canonical.tracking`: global names and ``utm_``/``mtm_`` prefixes, plus
    per-provider names such as ``si`` on YouTube);
  - ``tracking-shaped:<name>``: a parameter removed on any host because its value has a
    tracker's token shape (``si=`` + 16 base64url characters, ``ref_src=twsrc%5E...``;
    :data:`bloom_frontier.canonical.tracking.SHAPED_TRACKING`). A family of its own: switching off
    ``tracking`` on a host leaves it on;
  - ``session:<name>``: a session id removed (``;jsessionid=`` path parameter, ``PHPSESSID``,
    ``ASPSESSIONID...`` and other framework session parameters);
  - ``slashes``: runs of ``/`` in the path collapsed (Nutch does this; nginx and Apache serve
    ``a//b`` as ``a/b``). Stage 1 has already removed dot-segments, so ``/a//../b`` keys as
    ``/a/b`` where nginx would serve ``/b``: a literal ``//..`` is rare, and browsers resolve
    relative links the same RFC 3986 way;
  - ``allowlist:<scope>``: on a page whose meaningful parameters are known, every other
    parameter removed (e.g. ``news.ycombinator.com/item`` keeps only ``id``);
  - ``identity:<provider>``: the key is the provider identity.

A trailing slash, the path's case and parameter values are never touched (values are only
read by the shaped rules). Parameter names are matched case-insensitively against the
tracking and session lists, exactly against an allowlist.

Rules are data (:class:`RuleSet`); the ruleset's ``version`` prefixes every key, so keys made
under different rules never collide silently: a customized ruleset gets the version
``<base>+<hash of the customization>``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from bloom_frontier.canonical import tracking
from bloom_frontier.canonical.errors import InvalidURL
from bloom_frontier.canonical.identity import PROVIDER_HOSTS, Identity, identify
from bloom_frontier.canonical.structural import (
    CLEAN_URL,
    ENCODABLE_URL,
    MAX_URL_LENGTH,
    canonicalize,
    clean_path_query,
)

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: Version of the default rules; bump it whenever a default rule or list changes meaning.
RULES_VERSION = "r2"

#: Rule families; ``CANON_HOST_RULES`` ``disable`` entries name a family or ``family:item``.
RULE_FAMILIES = frozenset(
    {"identity", "tracking", "tracking-shaped", "session", "slashes", "allowlist"}
)
#: Families whose items are parameter names, matched case-insensitively.
_NAMED_FAMILIES = frozenset({"tracking", "tracking-shaped", "session"})

#: Scope of a host rule that applies to every host.
ANY_HOST = "*"

#: Hosts whose rule lookup a ruleset remembers (the cache is emptied when full).
HOST_CACHE_SIZE = 50_000

_SLASH_RUN = re.compile("//+")
_clean_match = CLEAN_URL.fullmatch
_encodable_match = ENCODABLE_URL.fullmatch  # a literal first, so the regex engine skips ahead fast
_EMPTY: frozenset[str] = frozenset()


@dataclass(frozen=True)
class HostRule:
    """What the rules say about one scope: a host (and its subdomains), a ``host/path`` page,
    a ``host/prefix/*`` path prefix (the paths under ``/prefix/``), or :data:`ANY_HOST`.

    ``strip``: extra tracking names (lower-case) removed there. ``keep_only``: when set, the
    only parameters kept there (an allowlist), ``scope`` naming where it comes from.
    ``disable``: rule families (``"slashes"``) or single rules (``"tracking:utm_source"``,
    ``"identity:youtube"``) switched off there.
    """

    scope: str
    strip: frozenset[str] = _EMPTY
    keep_only: frozenset[str] | None = None
    disable: frozenset[str] = _EMPTY

    def overridden_by(self, other: HostRule) -> HostRule:
        """Both rules combined: lists and switches add up, ``other``'s allowlist wins."""
        allowlist = other if other.keep_only is not None else self
        return HostRule(
            scope=allowlist.scope,
            strip=self.strip | other.strip,
            keep_only=allowlist.keep_only,
            disable=self.disable | other.disable,
        )

    def is_off(self, family: str, item: str = "") -> bool:
        """True if rule ``family:item`` (or its whole ``family``) is switched off here."""
        return bool(self.disable) and (
            family in self.disable or (bool(item) and f"{family}:{item}" in self.disable)
        )


@dataclass(frozen=True)
class RuleSet:
    """Everything :func:`dedupe_key` applies beyond stage 1, as data.

    ``tracking``/``session_params`` (lower-case names) and their ``*_prefixes`` are removed
    from every query, ``tracking_shapes`` names (lower-case) when the whole value matches
    their pattern; ``session_path_params`` as ``;name=value`` path parameters; ``hosts``
    maps scopes (``host``, ``host/path``, :data:`ANY_HOST`) to their :class:`HostRule`.
    Build customized rulesets with :meth:`with_host_rules` (which derives a new ``version``),
    not by hand, unless you also choose a new ``version``. Build one per crawl and reuse it:
    it caches host lookups.
    """

    version: str
    tracking: frozenset[str]
    tracking_prefixes: tuple[str, ...]
    tracking_shapes: Mapping[str, re.Pattern[str]]
    session_params: frozenset[str]
    session_prefixes: tuple[str, ...]
    session_path_params: tuple[str, ...]
    hosts: Mapping[str, HostRule]
    _key_prefix: str = field(init=False, repr=False, compare=False)
    _maybe_dropped: frozenset[str] = field(init=False, repr=False, compare=False)
    _dropped_prefixes: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _path_session: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _hosts_with_pages: frozenset[str] = field(init=False, repr=False, compare=False)
    _host_cache: dict[str, _HostInfo] = field(init=False, repr=False, compare=False)
    _origin_cache: dict[str, _Origin | _Refused] = field(init=False, repr=False, compare=False)
    _name_reasons: dict[str, str | None] = field(init=False, repr=False, compare=False)
    _names_droppable: dict[str, bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.version or "|" in self.version:
            raise ValueError(f"ruleset version must be non-empty without '|': {self.version!r}")
        derived = {
            "_key_prefix": self.version + "|",
            # Names the rules may drop on any host: a query without one needs no rewriting.
            "_maybe_dropped": self.tracking | self.session_params | frozenset(self.tracking_shapes),
            "_dropped_prefixes": self.tracking_prefixes + self.session_prefixes,
            "_path_session": re.compile(
                f";({'|'.join(map(re.escape, self.session_path_params))})=[^;/]*",
                re.IGNORECASE,
            )
            if self.session_path_params
            else None,
            "_hosts_with_pages": frozenset(
                scope.partition("/")[0] for scope in self.hosts if "/" in scope
            ),
            "_host_cache": {},
            "_origin_cache": {},
            "_name_reasons": {},
            "_names_droppable": {},
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def with_host_rules(self, host_rules: Mapping[str, Mapping[str, Any]]) -> RuleSet:
        """This ruleset plus user host rules (the ``CANON_HOST_RULES`` format), under the
        version ``<version>+<8 hex digits>`` derived from the normalized customization.

        Raises ValueError on an unknown option, rule name or a scope that is not a host.
        """
        if not host_rules:
            return self
        custom = dict(sorted(_parse_host_rule(scope, spec) for scope, spec in host_rules.items()))
        hosts = dict(self.hosts)
        for scope, rule in custom.items():
            hosts[scope] = hosts[scope].overridden_by(rule) if scope in hosts else rule
        digest = hashlib.sha256(
            json.dumps(
                {scope: _rule_as_json(rule) for scope, rule in custom.items()}, sort_keys=True
            ).encode()
        ).hexdigest()[:8]
        return RuleSet(
            version=f"{self.version}+{digest}",
            tracking=self.tracking,
            tracking_prefixes=self.tracking_prefixes,
            tracking_shapes=self.tracking_shapes,
            session_params=self.session_params,
            session_prefixes=self.session_prefixes,
            session_path_params=self.session_path_params,
            hosts=MappingProxyType(hosts),
        )

    def rule_for(self, authority: str, path: str) -> HostRule | None:
        """The rules for ``path`` on the host of ``authority`` (stage-1 forms): entries for
        the host, its parent domains, ``host/path`` pages and :data:`ANY_HOST` combined, the
        most specific allowlist winning. None when no entry applies (the common case).
        """
        info = self._host_cache.get(authority) or self._host_info(authority)
        return info.rule if info.page_host is None else self._lookup(info.page_host, path)

    def _host_info(self, authority: str) -> _HostInfo:
        """What the rules know about ``authority``, cached (bounded): hosts repeat far more
        than URLs. Hosts with page entries are looked up with their path each time."""
        hostport = authority.rpartition("@")[2]
        if hostport.startswith("["):  # an IPv6 literal: its colons are not a port
            host, port = hostport, ""
        else:
            host, _, port = hostport.partition(":")
        rule = self._lookup(host, None)
        page_host = host if self._has_pages(host) else None
        if page_host is not None or (rule is not None and rule.keep_only is not None):
            maybe_dropped = None  # an allowlist may drop any name
        elif rule is not None and rule.strip:
            maybe_dropped = self._maybe_dropped | rule.strip
        else:
            maybe_dropped = self._maybe_dropped
        # identify() reads only PROVIDER_HOSTS, on a default port; stage 1 keeps :80 on https.
        provider = host in PROVIDER_HOSTS and port in ("", "80", "443")
        info = _HostInfo(rule, page_host, maybe_dropped, provider)
        if len(self._host_cache) >= HOST_CACHE_SIZE:
            self._host_cache.clear()
        self._host_cache[authority] = info
        return info

    def _origin(self, origin: str) -> _Origin | _Refused:
        """Stage-1 ``scheme://authority`` of a clean URL's ``origin`` (as written) and its
        host's :class:`_HostInfo`, or why stage 1 refuses the origin (its host or port: the
        same refusal as for any URL on it), cached (bounded)."""
        found: _Origin | _Refused
        try:
            head = canonicalize(origin)[:-1]  # "scheme://authority/": the empty path's "/"
        except InvalidURL as error:
            found = _Refused(error.reason, error.detail)
        else:
            authority = head[head.index(":") + 3 :]
            info = self._host_cache.get(authority) or self._host_info(authority)
            found = _Origin(head, info)
        if len(self._origin_cache) >= HOST_CACHE_SIZE:
            self._origin_cache.clear()
        self._origin_cache[origin] = found
        return found

    def _may_drop_names(self, names: str) -> bool:
        """False if no rule can drop a parameter named in ``names`` (``&``-joined, stage-1
        spelling) on a host without rules of its own (:meth:`drop_reason` with no rule:
        only the names in ``_maybe_dropped`` and the prefixes drop). The names repeat far
        more than queries do, so the answer is remembered per sequence (bounded)."""
        try:
            return self._names_droppable[names]
        except KeyError:
            lowered = names.lower().split("&")
            droppable = not self._maybe_dropped.isdisjoint(lowered) or any(
                name.startswith(self._dropped_prefixes) for name in lowered
            )
            if len(self._names_droppable) >= HOST_CACHE_SIZE:
                self._names_droppable.clear()
            self._names_droppable[names] = droppable
            return droppable

    def _has_pages(self, host: str) -> bool:
        return bool(self._hosts_with_pages) and any(
            host == name or host.endswith("." + name) for name in self._hosts_with_pages
        )

    def _lookup(self, host: str, path: str | None) -> HostRule | None:
        """Walk ``host`` and its parent domains, most specific first; pages if ``path``."""
        found: HostRule | None = None
        name = host
        while True:
            if path is not None and name in self._hosts_with_pages:
                found = _more_general(found, self.hosts.get(name + path))
                # Path prefixes (``host/docs/*``), the longest first.
                slash = len(path)
                while (slash := path.rfind("/", 0, slash)) >= 0:
                    found = _more_general(found, self.hosts.get(f"{name}{path[: slash + 1]}*"))
            found = _more_general(found, self.hosts.get(name))
            dot = name.find(".")
            if dot < 0:
                break
            name = name[dot + 1 :]
        return _more_general(found, self.hosts.get(ANY_HOST))

    def _hostless_drop_reason(self, name: str, value: str) -> str | None:
        """:meth:`drop_reason` where no host rule applies, remembered per name (bounded)
        unless the name is a shaped one, whose value decides."""
        try:
            return self._name_reasons[name]
        except KeyError:
            reason = self.drop_reason(name, value, None)
            if name.lower() not in self.tracking_shapes:
                if len(self._name_reasons) >= HOST_CACHE_SIZE:
                    self._name_reasons.clear()
                self._name_reasons[name] = reason
            return reason

    def drop_reason(self, name: str, value: str, rule: HostRule | None) -> str | None:
        """The rule that removes query parameter ``name=value`` (stage-1 spelling) under
        ``rule``, or None to keep it."""
        lowered = name.lower()
        if (
            rule is not None
            and rule.keep_only is not None
            and name not in rule.keep_only
            and not rule.is_off("allowlist", rule.scope)
        ):
            return f"allowlist:{rule.scope}"
        if (
            lowered in self.tracking
            or lowered.startswith(self.tracking_prefixes)
            or (rule is not None and lowered in rule.strip)
        ) and not (rule is not None and rule.is_off("tracking", lowered)):
            return f"tracking:{lowered}"
        shape = self.tracking_shapes.get(lowered)
        if (
            shape is not None
            and shape.fullmatch(value)
            and not (rule is not None and rule.is_off("tracking-shaped", lowered))
        ):
            return f"tracking-shaped:{lowered}"
        if lowered in self.session_params:
            session = lowered
        elif lowered.startswith(self.session_prefixes):
            # ASPSESSIONIDQQGGQGPA: named by its prefix, the rest is random.
            session = next(p for p in self.session_prefixes if lowered.startswith(p))
        else:
            return None
        if rule is not None and rule.is_off("session", session):
            return None
        return f"session:{session}"


class _HostInfo(NamedTuple):
    """What the rules know about one authority: its :class:`HostRule` (None: none applies),
    the host to look up with each path when it has page entries, the parameter names the
    rules may drop there (besides :attr:`RuleSet.tracking_prefixes` and
    :attr:`RuleSet.session_prefixes`; None: any name, under an allowlist), and whether
    :func:`identify` can claim its URLs."""

    rule: HostRule | None
    page_host: str | None
    maybe_dropped: frozenset[str] | None
    provider: bool


class _Refused(NamedTuple):
    """Why stage 1 refuses every URL on an origin (:class:`InvalidURL` ``reason`` and
    ``detail``, which do not depend on the rest of the URL)."""

    reason: str
    detail: str


class _Origin(NamedTuple):
    """A clean URL's origin in stage-1 form (``head``: ``scheme://authority``) and its host's
    rules."""

    head: str
    info: _HostInfo


def _more_general(specific: HostRule | None, general: HostRule | None) -> HostRule | None:
    if general is None:
        return specific
    if specific is None:
        return general
    return general.overridden_by(specific)


def _names(value: Any, option: str, scope: str) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValueError(f"CANON_HOST_RULES[{scope!r}][{option!r}] must be a list of names")
    return frozenset(str(name) for name in value)


def _parse_host_rule(scope: str, spec: Mapping[str, Any]) -> tuple[str, HostRule]:
    """One ``CANON_HOST_RULES`` entry, validated, with its scope in stage-1 form."""
    unknown = set(spec) - {"strip", "keep_only", "disable"}
    if unknown:
        raise ValueError(f"CANON_HOST_RULES[{scope!r}]: unknown option(s) {sorted(unknown)}")
    disable = set()
    for name in _names(spec.get("disable", ()), "disable", scope):
        family, colon, item = name.partition(":")
        if family not in RULE_FAMILIES:
            raise ValueError(
                f"CANON_HOST_RULES[{scope!r}]: cannot disable {name!r}; rules are "
                f"{sorted(RULE_FAMILIES)}, optionally as family:item"
            )
        if family in _NAMED_FAMILIES:  # parameter names match case-insensitively
            item = item.lower()
        disable.add(f"{family}{colon}{item}")
    keep_only = spec.get("keep_only")
    rule = HostRule(
        scope=_normalize_scope(scope),
        strip=frozenset(name.lower() for name in _names(spec.get("strip", ()), "strip", scope)),
        keep_only=None if keep_only is None else _names(keep_only, "keep_only", scope),
        disable=frozenset(disable),
    )
    return rule.scope, rule


def _normalize_scope(scope: str) -> str:
    """``Bücher.Example/Path`` -> ``xn--bcher-kva.example/Path`` (stage-1 host and path);
    a path prefix keeps its final ``*`` (``example.com/docs/*``)."""
    if scope == ANY_HOST:
        return scope
    host, slash, path = scope.partition("/")
    try:
        canonical = canonicalize(f"http://{host}/{path}")
    except InvalidURL as error:
        raise ValueError(f"CANON_HOST_RULES scope {scope!r}: {error.reason}") from None
    authority, _, canonical_path = canonical[len("http://") :].partition("/")
    port_part = authority.rpartition("]")[2]  # an IPv6 literal's own colons are not a port
    if not host or ":" in port_part or "@" in authority or "?" in scope:
        raise ValueError(f"CANON_HOST_RULES scope must be a host or host/path: {scope!r}")
    return f"{authority}/{canonical_path}" if slash else authority


def _rule_as_json(rule: HostRule) -> dict[str, Any]:
    return {
        "strip": sorted(rule.strip),
        "keep_only": None if rule.keep_only is None else sorted(rule.keep_only),
        "disable": sorted(rule.disable),
    }


def _default_hosts() -> dict[str, HostRule]:
    hosts: dict[str, HostRule] = {}
    for domains, names in tracking.PROVIDER_TRACKING:
        for domain in domains:
            hosts[domain] = HostRule(scope=domain, strip=frozenset(names))
    for scope, keep in tracking.ALLOWLISTS.items():
        hosts[scope] = HostRule(scope=scope, keep_only=keep)
    return hosts


#: The rules used when no customization is given.
DEFAULT_RULES = RuleSet(
    version=RULES_VERSION,
    tracking=tracking.GLOBAL_TRACKING,
    tracking_prefixes=tracking.GLOBAL_TRACKING_PREFIXES,
    tracking_shapes=MappingProxyType(
        {shape.name: shape.value for shape in tracking.SHAPED_TRACKING}
    ),
    session_params=tracking.SESSION_PARAMS,
    session_prefixes=tracking.SESSION_PREFIXES,
    session_path_params=tracking.SESSION_PATH_PARAMS,
    hosts=MappingProxyType(_default_hosts()),
)


def rules_from_settings(settings: BaseSettings) -> RuleSet:
    """The ruleset for a crawl: :data:`DEFAULT_RULES` plus ``CANON_HOST_RULES`` (ValueError
    if that setting is malformed). Call it once per crawler and keep the result."""
    return DEFAULT_RULES.with_host_rules(settings.getdict("CANON_HOST_RULES"))


@dataclass(frozen=True)
class KeyExplanation:
    """How a URL became its key: ``canonical`` is the stage-1 form, ``rules_fired`` the
    names of the rules that changed something, each once, in the order they first fired."""

    url: str
    canonical: str
    identity: Identity | None
    key: str
    rules_fired: tuple[str, ...]


def rewrite_path(path: str, rules: RuleSet, rule: HostRule | None, fired: list[str] | None) -> str:
    """``path`` without session path parameters and slash runs."""
    if ";" in path and rules._path_session is not None:

        def drop_session(match: re.Match[str]) -> str:
            name = match.group(1).lower()
            if rule is not None and rule.is_off("session", name):
                return match.group()
            if fired is not None:
                fired.append(f"session:{name}")
            return ""

        # Repeat: removing ";jsessionid=1" from ";jsess;jsessionid=1ionid=2" makes a new one.
        previous = None
        while path != previous:
            previous, path = path, rules._path_session.sub(drop_session, path)
    if "//" in path and (rule is None or not rule.is_off("slashes")):
        path = _SLASH_RUN.sub("/", path)
        if fired is not None:
            fired.append("slashes")
    return path


def _rewrite_query(
    query: str, rules: RuleSet, rule: HostRule | None, fired: list[str] | None
) -> str:
    """``query`` without the parameters the rules drop (``query`` itself if none)."""
    params = query.split("&")
    kept = []
    for param in params:
        name, _, value = param.partition("=")
        if rule is None:
            reason = rules._hostless_drop_reason(name, value)
        else:
            reason = rules.drop_reason(name, value, rule)
        if reason is None:
            kept.append(param)
        elif fired is not None:
            fired.append(reason)
    return query if len(kept) == len(params) else "&".join(kept)


def _may_drop(query: str, maybe_dropped: frozenset[str] | None, prefixes: tuple[str, ...]) -> bool:
    """False if no parameter of ``query`` can be dropped: none is named in ``maybe_dropped``
    or starts with one of ``prefixes``. A cheap over-approximation of asking
    :meth:`RuleSet.drop_reason` for each parameter: values are tested too, so a value spelled
    like a droppable name (``q=gclid``) only sends its URL through the full rules."""
    if maybe_dropped is None:
        return True
    lowered = query.lower()
    for prefix in prefixes:
        if prefix in lowered:
            return True
    return not maybe_dropped.isdisjoint(lowered.replace("=", "&").split("&"))


def _derive(url: str, rules: RuleSet, fired: list[str] | None) -> tuple[str, Identity | None, str]:
    """(stage-1 form, identity, key) of ``url``; rule names appended to ``fired`` if given."""
    canonical = canonicalize(url)
    # Partitions and ``in``, not str.find(sub, start, end): its argument parsing costs more
    # than the search on these short strings.
    head, _, query = canonical.partition("?")
    authority_start = 7 if head[4] == ":" else 8  # stage 1 gives http:// or https://
    authority = head[authority_start:].partition("/")[0]
    path_start = authority_start + len(authority)
    info = rules._host_cache.get(authority) or rules._host_info(authority)
    return _apply_rules(canonical, head[:path_start], head[path_start:], query, info, rules, fired)


def _apply_rules(
    canonical: str,
    origin: str,
    path: str,
    query: str,
    info: _HostInfo,
    rules: RuleSet,
    fired: list[str] | None,
    query_changes: bool | None = None,
) -> tuple[str, Identity | None, str]:
    """(stage-1 form, identity, key) of the stage-1 URL ``canonical``, given split as
    ``origin`` (``scheme://authority``), ``path`` and ``query`` ("" for none);
    ``query_changes``: whether a rule may drop a parameter, if the caller knows.

    The provider identity is read from the rewritten URL, so that a URL the rules make equal
    to a video's URL gets the video's key, and a key's URL is its own key.
    """
    path_changes = "//" in path or ";" in path
    if query_changes is None:
        query_changes = bool(query) and _may_drop(
            query, info.maybe_dropped, rules._dropped_prefixes
        )
    if not (path_changes or query_changes or info.provider):
        return canonical, None, rules._key_prefix + canonical  # the common case, fast

    rule = info.rule if info.page_host is None else rules._lookup(info.page_host, path)
    rewritten = canonical
    if path_changes or query_changes:
        new_path = rewrite_path(path, rules, rule, fired) if path_changes else path
        if new_path != path and info.page_host is not None:
            rule = rules._lookup(info.page_host, new_path)
        new_query = _rewrite_query(query, rules, rule, fired) if query_changes else query
        if new_path != path or new_query is not query:
            rewritten = f"{origin}{new_path}?{new_query}" if new_query else f"{origin}{new_path}"

    if info.provider and (rule is None or not rule.is_off("identity")):
        identity = identify(rewritten)
        if identity is not None and (
            rule is None or not rule.is_off("identity", identity.provider)
        ):
            if fired is not None:
                fired.append(f"identity:{identity.provider}")
            return canonical, identity, rules._key_prefix + identity.key
    return canonical, None, rules._key_prefix + rewritten


def dedupe_key(url: str, rules: RuleSet = DEFAULT_RULES) -> str:
    """The dedupe key of ``url`` under ``rules`` (see the module docstring).

    >>> dedupe_key("https://Example.com/a?utm_source=x&b=1#top")
    'r2|https://example.com/a?b=1'

    Raises :class:`~bloom_frontier.canonical.errors.InvalidURL` for URLs stage 1 rejects.
    """
    # Fast path for a URL stage 1 calls clean (no userinfo, nothing to encode in path and
    # query) or merely encodable (path or query to percent-encode): its origin's stage-1
    # form and host rules, or its refusal, come from a cache, and the rest is stage 1's own
    # code; the general path (:func:`_derive`) takes everything else.
    if type(url) is not str or len(url) > MAX_URL_LENGTH:
        return _derive(url, rules, None)[2]
    clean = _clean_match(url)
    if encode := clean is None:
        clean = _encodable_match(url)
        if clean is None:
            return _derive(url, rules, None)[2]
    origin, path, query = clean.group(1, 5, 6)
    found = rules._origin_cache.get(origin) or rules._origin(origin)
    if type(found) is _Refused:
        raise InvalidURL(found.reason, url.partition("#")[0], found.detail)  # as stage 1
    head, info = found
    path, query, names = clean_path_query(path, query, encode)
    query_changes: bool | None = False
    if query:
        canonical = f"{head}{path}?{query}"
        if info.maybe_dropped is rules._maybe_dropped:  # a host without rules of its own
            query_changes = rules._may_drop_names(names)
        else:
            query_changes = None  # _apply_rules decides
    else:
        canonical = head + path
    if (
        query_changes is False
        and not (info.provider or "//" in path or ";" in path)
        and len(canonical) <= MAX_URL_LENGTH
    ):
        return rules._key_prefix + canonical  # the common case, fast (as _apply_rules)
    if len(canonical) > MAX_URL_LENGTH:
        return _derive(url, rules, None)[2]  # raises, with stage 1's own words
    return _apply_rules(canonical, head, path, query or "", info, rules, None, query_changes)[2]


def explain(url: str, rules: RuleSet = DEFAULT_RULES) -> KeyExplanation:
    """:func:`dedupe_key` with its working: stage-1 form, identity and the rules that fired."""
    fired: list[str] = []
    canonical, identity, key = _derive(url, rules, fired)
    return KeyExplanation(url, canonical, identity, key, tuple(dict.fromkeys(fired)))
