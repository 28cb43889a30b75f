"""Optional dependencies: what a backend needs beyond the package's own, as an extra.

A PostgreSQL record store needs ``[postgres]`` (psycopg). Where one is missing,
:func:`require_extra` raises :class:`MissingExtra`, whose message is the line a command
prints (``error: ... pip install 'bloom-frontier[postgres]'``).
"""

from __future__ import annotations

from importlib.util import find_spec

#: The distribution name, as pip installs it.
DISTRIBUTION = "bloom-frontier"


class MissingExtra(RuntimeError):
    """A feature needs an extra that is not installed; the message names it."""


def require_extra(module: str, extra: str, needed_for: str) -> None:
    """Raise :class:`MissingExtra` unless ``module`` (which ``extra`` installs) is importable;
    ``needed_for`` says what asked for it."""
    if find_spec(module) is None:
        raise MissingExtra(
            f"{needed_for} needs the {extra} extra ({module} is not installed): "
            f"pip install '{DISTRIBUTION}[{extra}]'"
        )
