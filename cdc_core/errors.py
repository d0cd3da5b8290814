"""One error taxonomy for binlake: whether to retry, and the command line's exit code,
follow from an exception's type (as dlt's transient/terminal exceptions), never from
its text.

- ``BadInput``: the configuration, the source server's settings or a prerequisite is
  wrong; retrying cannot help; the CLI prints one line saying what to change and
  exits 2.
- ``TransientError``: a fault that may pass (connection lost, server restarting, the
  lake briefly unwritable); the engine retries with backoff and, past its retry
  budget, raises ``TerminalError`` naming the cause.
- ``TerminalError``: a runtime failure retrying cannot fix; the CLI exits 1.

``is_transient`` classifies the exceptions of the libraries binlake calls (pymysql,
the OS, delta-rs), so every retry loop asks the same question the same way
(tests/test_engine_parts.py).
"""

from __future__ import annotations

import errno

import pymysql

EXIT_OK, EXIT_RUNTIME, EXIT_BAD_INPUT = 0, 1, 2

# Client and server codes of faults that pass: cannot connect, server gone away, lost
# connection during a query, lost connection at handshake, server shutting down, query
# killed (server restart), too many connections, lock wait timeout, deadlock.
_TRANSIENT_MYSQL = {2003, 2006, 2013, 2055, 1053, 1927, 1040, 1205, 1213}
# OS errors that say nothing is wrong with the input: a retry may succeed once the
# condition clears (disk space freed, a file system back).
_TRANSIENT_ERRNO = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EAGAIN, errno.ETIMEDOUT, errno.ECONNRESET,
                    errno.ECONNREFUSED, errno.EPIPE, errno.EBUSY}


class BinlakeError(Exception):
    """Base of binlake's own errors; ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_RUNTIME


class BadInput(BinlakeError):
    """Configuration, source settings or prerequisites are wrong (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class TransientError(BinlakeError):
    """A fault that may pass: the caller retries with backoff."""


class TerminalError(BinlakeError):
    """A runtime failure that retrying cannot fix (exit 1)."""


def is_transient(error: BaseException) -> bool:
    """Whether retrying the operation that raised ``error`` may succeed."""
    if isinstance(error, TransientError):
        return True
    if isinstance(error, BinlakeError):
        return False
    if isinstance(error, pymysql.err.MySQLError):
        return bool(error.args) and error.args[0] in _TRANSIENT_MYSQL
    if isinstance(error, (ConnectionError, TimeoutError, EOFError)):
        return True
    if isinstance(error, OSError):
        return error.errno in _TRANSIENT_ERRNO
    # delta-rs reports object-store and file-system failures as DeltaError/OSError with the
    # cause in the text; a schema or protocol error is not retried.
    name = type(error).__name__
    text = str(error)
    if name in ("CommitFailedError",):
        return True
    if name == "DeltaError" and any(s in text for s in ("No space left", "Generic LocalFileSystem error",
                                                        "Object Store", "ObjectStore", "timed out",
                                                        "Connection refused", "connection closed")):
        return True
    return False
