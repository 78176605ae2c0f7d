"""Errors a user can cause, each with the exit code the CLI returns for it.

Anything raised from here is caught once, in ``ioprobe.cli.main``, and printed as one line with
no traceback. Anything else escaping is a bug in ioprobe and keeps its traceback.
"""

from __future__ import annotations

import errno

# what a write to a full, broken or read-only destination raises (an OSError's errno): the
# user's disk or pipe, not a bug, so one line rather than a traceback
WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EPIPE, errno.EIO, errno.EROFS}
)
# what a process meets at its own limits (an OSError's errno): too many open files (its own
# limit, or the system's), no process or thread to start; the host's, not a bug
LIMIT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN})


def limits() -> str:
    """What the process may open and start, to say beside a limit it met."""
    import resource

    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    procs = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    space = resource.getrlimit(resource.RLIMIT_AS)[0]

    def fmt(n: int) -> str:
        return "unlimited" if n == resource.RLIM_INFINITY else f"{n:,}"

    # an address space limit stops threads (each reserves its stack) long before memory runs out
    room = (
        ""
        if space == resource.RLIM_INFINITY
        else f", in {space:,} bytes of address space (ulimit -v)"
    )
    return (
        f"this process may open {fmt(files)} files (ulimit -n) and run {fmt(procs)} "
        f"processes (ulimit -u){room}; raise them, or use fewer workers"
    )


class IoprobeError(Exception):
    """Base of every error that is the user's input or environment, not a bug."""

    exit_code = 2


class BadInputError(IoprobeError):
    """A flag value, path or URL that cannot be used as given."""


class TargetError(BadInputError):
    """The dataset target is missing, empty, unreadable or unreachable."""


class RecordError(BadInputError):
    """A run file that is not a valid ioprobe record."""


class Interrupted(IoprobeError):
    """The user pressed Ctrl-C; temporary files have been removed."""

    exit_code = 130


class Terminated(Interrupted):
    """SIGTERM stopped ioprobe; temporary files have been removed."""

    exit_code = 143


class TrialDone(SystemExit):
    """Raised in a script that ``ioprobe tune`` runs as a trial, at the loader's next
    request once the trial's batches are measured: the script unwinds as on ``sys.exit(0)``
    (its ``finally`` blocks run, the records are saved at exit), and no ``except Exception``
    in it swallows the stop."""

    def __init__(self) -> None:
        super().__init__(0)


class TermSignal(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by the handler ``ioprobe.cli.main`` installs.

    A KeyboardInterrupt, so SIGTERM takes every path Ctrl-C takes (the ``finally`` blocks that
    remove temporary files and end worker pools, the probe's partial record) and no
    ``except Exception`` swallows it; ``cli.main`` ends it as ``Terminated``.
    """


class RankLostError(IoprobeError):
    """A rank of a distributed run died, or did not reach a barrier within its timeout; the
    ranks that remain report it (and rank 0 what was measured before) and exit."""

    exit_code = 3

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


class StorageTimeoutError(TargetError):
    """The storage did not answer within the time budget: nothing could be measured."""
