"""The frontier's Lua scripts (``<name>.lua`` beside this module), each loaded with the
shared helpers in front of it and given only the keys it names.

Each script file starts with a ``-- KEYS: name name ...`` line naming, in order, the fields
of :class:`bloom_frontier.frontier.redis.layout.FrontierKeys` it touches (itself or through the
helpers it calls); the loader binds ``KEYS[i]`` to the upper-case name (``queue`` ->
``QUEUE``) in front of the helpers, so a helper reaching for a key its script did not name
fails loudly ("nonexistent global variable") instead of touching the wrong key. Its
``-- ARGV:`` lines say what it takes, its ``-- Returns`` lines what it answers
(parsed by :mod:`bloom_frontier.frontier.redis.protocol`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bloom_frontier.frontier.redis.layout import KEY_TYPES

if TYPE_CHECKING:
    import redis

    from bloom_frontier.frontier.redis.layout import FrontierKeys

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


#: Run first in every script: each key must hold its type (``KEY_TYPES``) or nothing, else
#: the script refuses before its first write (Redis never rolls a script back, so a write
#: followed by a WRONGTYPE error would leave the step half-applied).
_TYPE_CHECK = """for i, want in ipairs({%s}) do
  local got = redis.call('TYPE', KEYS[i])
  got = type(got) == 'table' and got.ok or got
  if got ~= 'none' and got ~= want then
    return redis.error_reply(KEYS[i] .. ' holds a ' .. got .. ', not a ' .. want ..
      ': refused before any change')
  end
end"""


@cache
def script_source(name: str) -> str:
    """``<name>.lua`` with its keys bound by name and checked for their types, and the
    shared helpers in front."""
    keys = script_keys(name)
    prelude = "local {} = {}\n".format(
        ", ".join(key.upper() for key in keys),
        ", ".join(f"KEYS[{index}]" for index in range(1, len(keys) + 1)),
    ) + _TYPE_CHECK % ", ".join(f"'{KEY_TYPES[key]}'" for key in keys)
    parts = [(_SCRIPTS_DIR / f"{part}.lua").read_text() for part in (*_HELPERS, name)]
    return "\n".join([prelude if keys else "", *parts])


class FrontierScripts:
    """Scripts registered on one client and bound to one crawl's keys."""

    def __init__(self, client: redis.Redis, keys: FrontierKeys, names: Iterable[str]) -> None:
        self._scripts = {name: client.register_script(script_source(name)) for name in names}
        self._keys = {name: [getattr(keys, key) for key in script_keys(name)] for name in names}

    def run(self, name: str, args: Sequence[Any] = ()) -> Any:
        """Run the script ``name`` over its own keys."""
        return self._scripts[name](keys=self._keys[name], args=list(args))
