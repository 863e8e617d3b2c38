"""Exceptions -> one line `Error: ...` on stderr and an exit code. QTTS_DEBUG=1 adds the traceback.

Owns the exit-code table (also in --help and the README; a test keeps them equal). Errors meant
for users are qtts.core.errors.QttsError subclasses carrying their exit code; anything else is a
bug, reported with its type (exit 1). Imports core only when an error happens (qtts --help stays
instant).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import typer

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_USAGE = 2
EXIT_ROWS_FAILED = 3
EXIT_LOCKED = 75
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

# Each line fits 80 columns and a code's lines break only after ";" (the help keeps the lines).
EXIT_CODES = """\
Exit codes:
  0    all rows ok, or skipped as already done;
       qtts results: no row failed, and the keep rules keep rows;
       rows may still be pending (see complete)
  1    fatal (model load failed, disk full, Ray cluster unreachable);
       undone rows stay pending
  2    usage or input error, nothing done: a bad option;
       a --model path that is no directory;
       an unreadable, empty or invalid input; duplicate ids;
       an out dir not writable or holding another job;
       a shard count that disagrees with the out dir's
  3    finished with failed rows, or stopped by --fail-fast/--max-failures;
       qtts results: rows failed, or the keep rules keep no ok row
  75   another qtts run holds the out dir (OUT/.qtts/run*.lock)
  130  interrupted by SIGINT (Ctrl-C), after flushing finished rows
  143  interrupted by SIGTERM, after flushing finished rows"""


def debug_enabled() -> bool:
    return os.environ.get("QTTS_DEBUG", "").strip() not in ("", "0", "false", "no")


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_SIGINT
    exit_code = getattr(exc, "exit_code", None)  # QttsError, and the job's Interrupted
    return exit_code if isinstance(exit_code, int) else EXIT_FATAL


def message_for(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    from qtts.core.errors import QttsError

    known = isinstance(exc, QttsError)
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror if known else f"{exc.strerror}: {exc.filename}"
        if exc.filename is None:
            text = exc.strerror
    else:
        text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if known or isinstance(exc, OSError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def usage_error(exc: BaseException) -> typer.Exit:
    """A command line Typer refused (bad value, unknown option): one line, exit 2."""
    if debug_enabled():
        traceback.print_exception(exc, file=sys.stderr)
    # Typer converts choices through pydantic, whose message leads with its own "Value error, "
    message = exc.format_message().replace("Value error, ", "")
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(EXIT_USAGE)


def fail(exc: BaseException) -> typer.Exit:
    """Print `Error: ...` (and the traceback with QTTS_DEBUG=1); the Exit to raise."""
    if debug_enabled():
        traceback.print_exception(exc, file=sys.stderr)
    typer.echo(f"Error: {message_for(exc)}", err=True)
    return typer.Exit(exit_code_for(exc))


@contextmanager
def cli_errors() -> Iterator[None]:
    """Wrap a command body: any exception becomes one line on stderr and its exit code."""
    try:
        yield
    except (typer.Exit, SystemExit):
        raise
    except typer.BadParameter as exc:  # a bad option value found after parsing: one line
        raise usage_error(exc) from None
    except BaseException as exc:  # noqa: BLE001 -- the CLI's last line of defence
        raise fail(exc) from None
