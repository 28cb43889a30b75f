"""How every command fails: one line on stderr saying what is wrong and what to do, exit
status 2, no traceback, no secret.

:func:`fails_cleanly` wraps a command's ``run``; :func:`explain` turns the errors a user can
cause (a server down or refusing the password, a bad ``REDIS_URL`` or ``STORE_URL``, an
unknown spider, an unreadable seed file, a ``JOBDIR`` another process holds, a proxy the
SSRF guard cannot vouch for, a setting that defeats the add-on) into that line. Anything
else is a bug and keeps its traceback.

Functions, not a base command: Scrapy lists every ``ScrapyCommand`` subclass of this package
as a command named after its module.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from sqlalchemy import exc as sql_errors

from bloom_frontier.addon import FrontierConflict
from bloom_frontier.extras import MissingExtra
from bloom_frontier.pipelines.schema import SchemaError
from bloom_frontier.redis_client import RedisSetupError
from bloom_frontier.seen.joblock import JobdirBusy
from bloom_frontier.ssrf import ProxyWithGuard
from bloom_frontier.validation import InvalidSetting, check_settings

if TYPE_CHECKING:
    from scrapy.commands import ScrapyCommand

#: Exit status of a command that could not do its job (Scrapy's usage errors exit with 2 too).
EXIT_FAILED = 2

_PASSWORD_IN_URL = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/@\s:]*:)[^@\s/]+@", re.I)

Run = TypeVar("Run", bound=Callable[..., None])


class CommandFailed(Exception):
    """A command cannot go on; the message is the line the user reads."""


def mask_secrets(text: str) -> str:
    """``text`` with the password of every URL in it masked.

    >>> mask_secrets("cannot reach redis://app:s3cret@db:6379/0")
    'cannot reach redis://app:***@db:6379/0'
    """
    return _PASSWORD_IN_URL.sub(r"\g<head>***@", text)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def explain(error: BaseException) -> str | None:
    """The line to print for ``error``, or None if it is not one a user can cause."""
    if isinstance(
        error,
        (
            CommandFailed,
            InvalidSetting,
            FrontierConflict,
            RedisSetupError,
            ProxyWithGuard,
            JobdirBusy,
            SchemaError,
            MissingExtra,
        ),
    ):
        return _first_line(error)
    if isinstance(error, redis.AuthenticationError) or (
        isinstance(error, redis.ResponseError) and str(error).startswith(("WRONGPASS", "NOAUTH"))
    ):
        return (
            f"Redis refused the credentials ({_first_line(error)}): check the user and "
            "password in REDIS_URL (redis://user:password@host:port/db)"
        )
    if isinstance(error, redis.TimeoutError):
        return (
            f"Redis did not answer in time ({_first_line(error)}): check REDIS_URL's host "
            "and port, and that rediss:// points at a TLS port"
        )
    if isinstance(error, (redis.ConnectionError, redis.exceptions.RedisClusterException)):
        return (
            f"cannot reach Redis ({_first_line(error)}): is it running? check REDIS_URL "
            "(rediss:// needs a TLS port)"
        )
    if isinstance(error, sql_errors.ArgumentError):
        return (
            f"STORE_URL is not a database URL ({_first_line(error)}): use "
            "sqlite:///path/crawl.sqlite or postgresql://user@host/db"
        )
    if isinstance(error, sql_errors.SQLAlchemyError):
        cause = getattr(error, "orig", None) or error
        return f"cannot use the record store ({_first_line(cause)}): check STORE_URL"
    if isinstance(error, KeyError) and str(error.args[0] if error.args else "").startswith(
        "Spider not found"
    ):
        return f"{error.args[0]}: `scrapy list` shows the project's spiders"
    return None


def output_closed(command: ScrapyCommand) -> None:
    """The reader of the command's output went away (``| head``): say so in one line.

    What is still buffered for stdout is dropped (stdout now writes to ``os.devnull``, as
    Python's documentation advises for SIGPIPE), so the exit itself raises nothing more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    print("error: the output was closed before the command finished", file=sys.stderr)
    command.exitcode = EXIT_FAILED


def report(command: ScrapyCommand, error: BaseException) -> None:
    """Print ``error``'s line on stderr and set the command's exit status."""
    line = explain(error) or _first_line(error)
    print(f"error: {mask_secrets(line)}", file=sys.stderr, flush=True)
    command.exitcode = EXIT_FAILED


def reports_failures(run: Run) -> Run:
    """Decorate a command's ``run``: errors a user can cause end it with one line."""

    @functools.wraps(run)
    def wrapper(command: ScrapyCommand, *args: Any, **kwargs: Any) -> None:
        try:
            run(command, *args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        except BrokenPipeError:
            output_closed(command)
        except Exception as error:
            if explain(error) is None:
                raise
            report(command, error)

    return wrapper  # type: ignore[return-value]


def fails_cleanly(run: Run) -> Run:
    """:func:`reports_failures`, once the command's settings are checked (a value a setting
    may not have ends the command before it uses any)."""

    @functools.wraps(run)
    def checked(command: ScrapyCommand, *args: Any, **kwargs: Any) -> None:
        if command.settings is not None:
            check_settings(command.settings)
        run(command, *args, **kwargs)

    return reports_failures(checked)  # type: ignore[arg-type]
