"""User-facing errors.

Every failure a user can cause or fix (a bad file, a missing key, an unreachable server) is raised as a
``MetaharnessError`` whose message says what went wrong and what to do next. The CLI prints the message
without a traceback and exits with ``MetaharnessError.exit_code``.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

# The errors of a write that found no space left (the device is full, or the user's quota is).
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class MetaharnessError(Exception):
    """A failure the user can act on; the message names the problem and the next step."""

    exit_code = 1


class InputError(MetaharnessError):
    """Bad input: a malformed file, an unknown name, an out-of-range option. Exit code 2."""

    exit_code = 2


class ConfigurationError(MetaharnessError):
    """The environment is not set up for the request (a missing API key, an unreachable server)."""

    exit_code = 2


class BudgetExceeded(MetaharnessError):
    """A hard cost or token cap was reached; long-running work stops cleanly when it sees this."""

    exit_code = 3


class ModelUnavailable(MetaharnessError):
    """A model stayed unreachable through every retry (rate limits, overload, 5xx, timeouts): a systemic failure.
    Work that needs it stops without recording a result (an outage is no score of 0); rerunning the same command
    continues once the model answers again. Exit code 5."""

    exit_code = 5


class StorageFailure(MetaharnessError):
    """The run's own record could not be written (no space left on the device, an I/O error): a systemic failure.
    The run stops at once; a model call whose spend could not be journaled is not answered. Free space (or fix the
    disk) and rerun the same command to continue. Exit code 6."""

    exit_code = 6

    @classmethod
    def no_space(cls, path: object) -> StorageFailure:
        """The one-line failure of a write to ``path`` that found no space left."""
        return cls(
            f"No space left to write {path}: the run stopped without losing what it recorded. Free space on that "
            "disk, then rerun the same command to continue."
        )


@contextlib.contextmanager
def space_for(path: object) -> Iterator[None]:
    """Writes to ``path`` within: an ``OSError`` for want of space becomes ``StorageFailure.no_space(path)``."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        raise StorageFailure.no_space(path) from None
