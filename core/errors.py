"""The errors a user is meant to read, each with the exit code the CLI gives it.

Every layer raises these (or subclasses) for conditions the user can act on; the message is one
line written for them, so the CLI prints it without a type name or traceback. Anything else that
escapes is a bug and is reported with its type. Imports nothing: the CLI maps errors by the
`exit_code` attribute and `qtts --help` stays instant.
"""

from __future__ import annotations

EXIT_FATAL = 1
EXIT_USAGE = 2
EXIT_LOCKED = 75


class QttsError(Exception):
    """A condition the user can act on; `exit_code` is what the process exits with."""

    exit_code = EXIT_FATAL


class UsageError(QttsError, ValueError):
    """A command line or input that cannot run as given (exit 2): nothing was created."""

    exit_code = EXIT_USAGE


class ManifestError(UsageError):
    """The input as a whole cannot be used (exit 2): nothing is synthesized."""


class FatalError(QttsError):
    """The job cannot go on (exit 1): model load, disk, cluster. Undone rows stay pending."""


class LockHeldError(QttsError, RuntimeError):
    """Another run holds the out dir's lock (exit 75)."""

    exit_code = EXIT_LOCKED


class VoiceError(ValueError):
    """A row's voice the model cannot take: `field` ("speaker" or "language") says which, so a
    refusal of the command line's voice names the flag at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field
