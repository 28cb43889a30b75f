"""The frontier's Lua scripts (``crawler/frontier/<name>.lua``), each loaded with the
shared helpers in front of it."""

from __future__ import annotations

from functools import cache
from pathlib import Path

_SCRIPTS_DIR = Path(__file__).parent
#: Helpers prepended to every script, in this order: ``common.lua`` calls into
#: ``politeness.lua``, so the politeness helpers come first.
_HELPERS = ("politeness", "common")


@cache
def script_source(name: str) -> str:
    """``<name>.lua`` with the shared helpers in front."""
    parts = [(_SCRIPTS_DIR / f"{part}.lua").read_text() for part in (*_HELPERS, name)]
    return "\n".join(parts)
