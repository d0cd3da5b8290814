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

``transient_cause`` names a source fault that passes (a lost path, a restarting server);
``is_transient`` classifies the exceptions of the libraries binlake calls (pymysql,
the OS, delta-rs), so every retry loop asks the same question the same way
(tests/test_engine_parts.py).
"""

from __future__ import annotations

import errno
import re
import socket
import ssl

import pymysql

EXIT_OK, EXIT_RUNTIME, EXIT_BAD_INPUT = 0, 1, 2

# Client and server errors of a lost path or a restarting server: can't connect (2003), gone
# away (2006), lost during query (2013), lost during handshake / SSL EOF (2055), server shutdown
# (1053), connection killed (1927), and MariaDB's "server is shutting down" (1053 again, ER_SERVER_SHUTDOWN).
# Too many connections (1040), lock wait timeout (1205) and deadlock (1213) pass as well.
TRANSIENT_CODES = {2003, 2006, 2013, 2055, 1053, 1927, 1040, 1205, 1213}
# connectorx (rust mysql crate) reports a lost connection as text only.
_TRANSIENT_TEXT = re.compile(
    r"(?i)broken pipe|connection (reset|refused|aborted|closed)|unexpected eof|end of file|timed out|"
    r"server disconnected|gone away|lost connection|io error|os error 10[0-9]|os error 32|packets out of order|"
    r"can't connect|could not connect")


def transient_cause(exc: BaseException) -> str | None:
    """A one-line description of ``exc`` when it is a transient source fault, else None. An
    error raised while handling one (pymysql's "Already closed" from a cursor's clean-up after the
    connection dropped) counts as that fault."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        cause = _own_cause(exc)
        if cause is not None:
            return cause
        exc = exc.__cause__ or exc.__context__
    return None


def _own_cause(exc: BaseException) -> str | None:
    if isinstance(exc, pymysql.err.OperationalError) and exc.args and exc.args[0] in TRANSIENT_CODES:
        return f"{type(exc).__name__} {exc.args[0]}: {exc.args[1] if len(exc.args) > 1 else ''}".strip()
    if isinstance(exc, pymysql.err.InterfaceError):
        return f"connection closed ({exc})"
    if isinstance(exc, pymysql.err.InternalError) and "Packet sequence number wrong" in str(exc):
        return f"packet stream broken ({exc})"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return None  # a certificate problem never heals by itself
    if isinstance(exc, (ConnectionError, TimeoutError, socket.timeout, ssl.SSLEOFError, EOFError)):
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, RuntimeError) and _TRANSIENT_TEXT.search(str(exc)):  # connectorx
        return f"bulk read failed: {_first_line(str(exc))}"
    return None


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line[:limit]


# OS errors that say nothing is wrong with the input: a retry may succeed once the
# condition clears (a file system back). A full disk is not among them: it rarely frees
# itself, so binlake stops at once and says so (every commit is atomic: a re-run resumes).
_TRANSIENT_ERRNO = {errno.EIO, errno.EAGAIN, errno.ETIMEDOUT, errno.ECONNRESET,
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
    if transient_cause(error) is not None:
        return True
    if isinstance(error, OSError):
        return error.errno in _TRANSIENT_ERRNO
    # delta-rs reports object-store and file-system failures as DeltaError/OSError with the
    # cause in the text; a schema or protocol error is not retried.
    name = type(error).__name__
    text = str(error)
    if name in ("CommitFailedError",):
        return True
    if name == "DeltaError" and "No space left" not in text and any(s in text for s in (
            "Generic LocalFileSystem error", "Object Store", "ObjectStore", "timed out", "Connection refused",
            "connection closed")):
        return True
    return False
