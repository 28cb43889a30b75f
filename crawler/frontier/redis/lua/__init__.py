"""The frontier's Lua scripts (``<name>.lua`` beside this module), each loaded with the
shared helpers in front of it and given only the keys it names.

Each script file starts with a ``-- KEYS: name name ...`` line naming, in order, the fields
of :class:`bloom_frontier.frontier.redis.layout.FrontierKeys` it touches (itself or through the
helpers it calls); the loader binds ``KEYS[i]`` to the upper-case name (``queue`` ->
``QUEUE``) in front of the helpers, so a helper reaching for a key its script did not name
fails loudly ("nonexistent global variable") instead of touching the wrong key. Its
``-- ARGV:`` lines say what it takes, its ``-- Returns`` lines what it answers
(parsed by :mod:`bloom_frontier.frontier.redis.protocol`).

A worker's steps (the scripts naming ``identity``: lease, admission, failure, quarantine,
heartbeat) are checked in front of their own code: the crawl's identity must be the one the
worker adopted at its start (else its state was lost: :class:`.protocol.FrontierLost`), and a
fixed key holding another type is moved aside (see :mod:`.layout`); they start with a
``#!lua`` line, so Redis refuses them whole past ``maxmemory`` (an OOM error, which the
worker retries) rather than letting a step that began under the limit write past it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from bloom_frontier.frontier.redis.layout import KEY_TYPES, VITAL_KEYS
from bloom_frontier.frontier.redis.protocol import KeyOfWrongType, KeysMovedAside, script_error

if TYPE_CHECKING:
    from bloom_frontier.frontier.redis.layout import FrontierKeys

logger = logging.getLogger(__name__)

_SCRIPTS_DIR = Path(__file__).parent
#: Helpers prepended to every script, in this order: ``common.lua`` calls into
#: ``politeness.lua``, so the politeness helpers come first.
_HELPERS = ("politeness", "common")
_KEYS_LINE = "-- KEYS:"


@cache
def script_keys(name: str) -> tuple[str, ...]:
    """The keys ``<name>.lua`` names on its ``-- KEYS:`` line, in ``KEYS`` order."""
    for line in (_SCRIPTS_DIR / f"{name}.lua").read_text().splitlines():
        if line.startswith(_KEYS_LINE):
            return tuple(line.removeprefix(_KEYS_LINE).split())
    raise ValueError(f"{name}.lua has no '{_KEYS_LINE}' line naming the keys it uses")


#: Run first in every script: each key must hold its type (``KEY_TYPES``) or nothing. Redis
#: never rolls a script back, so a write followed by a WRONGTYPE error would leave the step
#: half-applied. A worker's step (``HEAL``) moves such a key aside and answers ``KEY_MOVED``
#: having run nothing else (run again, it finds the key empty), or, for one of
#: ``VITAL_KEYS``, marks the crawl lost and answers ``FRONTIER_LOST``; any other script (a
#: command's, politeness') refuses before any change: ``FRONTIER_DAMAGED``.
_TYPE_CHECK = """local moved, vital = {}, false
for i, want in ipairs({%s}) do
  local got = redis.call('TYPE', KEYS[i])
  got = type(got) == 'table' and got.ok or got
  if got ~= 'none' and got ~= want then
    local what = KEYS[i] .. ' held a ' .. got .. ', not a ' .. want
    if not HEAL then
      return redis.error_reply('KEY_WRONG ' .. what)
    end
    local t = redis.call('TIME')
    local aside = KEYS[i] .. ':foreign:' .. t[1] .. string.format('%%06d', tonumber(t[2]))
    redis.call('RENAME', KEYS[i], aside)
    moved[#moved + 1] = what .. ' (moved aside to ' .. aside .. ')'
    vital = vital or VITAL[i]
  end
end
if vital then
  local why = table.concat(moved, '; ')
  redis.call('SET', IDENTITY, 'lost:' .. why)
  return redis.error_reply('FRONTIER_DAMAGED ' .. why)
elseif #moved > 0 then
  return redis.error_reply('KEY_MOVED ' .. table.concat(moved, '; '))
end"""

#: Run after the type check in a worker's step: ``ARGV[1]`` is the identity the worker
#: adopted at its start, taken off ``ARGV`` (the script's own arguments keep their places);
#: the crawl's must be the same, else its state was lost since.
_IDENTITY_CHECK = """local ADOPTED = table.remove(ARGV, 1)
local current = redis.call('GET', IDENTITY)
if current ~= ADOPTED then
  if current and string.sub(current, 1, 5) == 'lost:' then
    return redis.error_reply('FRONTIER_DAMAGED ' .. string.sub(current, 6))
  end
  return redis.error_reply('FRONTIER_LOST ' .. IDENTITY .. ' is ' ..
    (current and ('now ' .. current) or 'missing') .. ', this worker started with ' .. ADOPTED)
end"""

#: First line of a worker's step: Redis refuses such a script whole past ``maxmemory`` (an
#: OOM error) rather than at its first write only.
_SHEBANG = "#!lua"

#: Times a worker's script is run again after keys of the wrong type were moved aside (each
#: run moves every one it finds: once is enough unless someone writes over them again).
_MOVE_ROUNDS = 2
#: The script that only moves aside the fixed keys of the wrong type (``heal.lua``).
_HEAL = "heal"


@cache
def checks_identity(name: str) -> bool:
    """Whether ``<name>.lua`` is a worker's step: it checks the crawl's identity (given as
    its first argument) and moves a key of the wrong type aside."""
    return "identity" in script_keys(name)


@cache
def script_source(name: str) -> str:
    """``<name>.lua`` with its keys bound by name and checked (their types; the crawl's
    identity for a worker's step), and the shared helpers in front."""
    keys = script_keys(name)
    parts = [(_SCRIPTS_DIR / f"{part}.lua").read_text() for part in (*_HELPERS, name)]
    if not keys:
        return "\n".join(parts)
    heal = checks_identity(name)
    prelude = [
        *([_SHEBANG] if heal else []),
        "local {} = {}".format(
            ", ".join(key.upper() for key in keys),
            ", ".join(f"KEYS[{index}]" for index in range(1, len(keys) + 1)),
        ),
        f"local HEAL = {'true' if heal else 'false'}",
        "local VITAL = {" + ", ".join(str(key in VITAL_KEYS).lower() for key in keys) + "}",
        _TYPE_CHECK % ", ".join(f"'{KEY_TYPES[key]}'" for key in keys),
        *([_IDENTITY_CHECK] if heal else []),
    ]
    return "\n".join([*prelude, *parts])


class FrontierScripts:
    """Scripts registered on one client and bound to one crawl's keys; a worker's steps run
    under the crawl :attr:`identity` the worker adopted (:mod:`..identity`)."""

    def __init__(
        self, client: redis.Redis, keys: FrontierKeys, names: Iterable[str], identity: str = ""
    ) -> None:
        names = (*names, _HEAL)
        self._scripts = {name: client.register_script(script_source(name)) for name in names}
        self._keys = {name: [getattr(keys, key) for key in script_keys(name)] for name in names}
        #: The crawl's identity this worker adopted ('': not a worker's, e.g. a command's;
        #: its steps refuse, and it moves no key aside).
        self.identity = identity

    def run(self, name: str, args: Sequence[Any] = ()) -> Any:
        """Run the script ``name`` over its own keys. Raises :class:`.protocol.FrontierLost`
        or :class:`.protocol.FrontierDamaged` for a crawl whose state is gone, and
        :class:`.protocol.KeyOfWrongType` for a key of the wrong type in a command's script.
        In a worker's, such a key is moved aside (logged), and the script run again."""
        if checks_identity(name):
            args = [self.identity, *args]
        for _ in range(_MOVE_ROUNDS):
            try:
                return self._call(name, args)
            except KeysMovedAside as moved:
                if not self.identity:
                    raise
                logger.warning("%s; the crawl goes on", moved)
            except KeyOfWrongType:
                if not self.identity:
                    raise
                self.run(_HEAL)  # this script moves no key aside: the heal script does
        return self._call(name, args)

    def _call(self, name: str, args: Sequence[Any]) -> Any:
        """One run of ``name``; its error reply as the typed error it stands for."""
        try:
            return self._scripts[name](keys=self._keys[name], args=list(args))
        except redis.ResponseError as exc:
            raise script_error(exc) from None
