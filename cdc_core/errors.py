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

``transient_cause`` names a fault that passes: of the source (a lost path, a restarting
server) or of the object store (``store_cause``: a 5xx answer, throttling, a timeout, a
connection lost mid-request, after delta-rs's own retries); ``is_transient`` classifies the
exceptions of the libraries binlake calls (pymysql, the OS, delta-rs, boto3 through
pipelines/lake/storage.py), so every retry loop asks the same question the same way
(tests/test_engine_parts.py, tests/test_lake_faults.py). ``one_line`` is any such error in one
line, for a warning or a message.
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
    """A one-line description of ``exc`` when it is a transient fault of the source or of the
    object store, else None. An error raised while handling one (pymysql's "Already closed" from
    a cursor's clean-up after the connection dropped) counts as that fault."""
    return _in_chain(exc, lambda e: _own_cause(e) or _store_cause(e))


def store_cause(exc: BaseException) -> str | None:
    """A one-line description of ``exc`` when it is a transient object-store fault (delta-rs's
    object store, or binlake's own ``PutObject``), else None."""
    return _in_chain(exc, _store_cause)


def _in_chain(exc: BaseException | None, own) -> str | None:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        cause = own(exc)
        if cause is not None:
            return cause
        exc = exc.__cause__ or exc.__context__
    return None


# An object store's answers and transport errors that pass, as delta-rs's object store (and
# its Python errors, which carry no errno) words them once its own retries are spent: a 5xx or a
# 429/408 answer, throttling, a request that timed out or whose connection broke.
_STORE_TEXT = re.compile(
    r"(?is)non-2xx status code\W+(5\d\d|429|408)\b|\b(SlowDown|InternalError|ServiceUnavailable|"
    r"RequestTimeout|Throttl\w*|TooManyRequests)\b|error sending request|connection (reset|closed|refused|"
    r"aborted|error)|operation timed out|timed out|broken pipe|incomplete message|error decoding response body|"
    r"os error (104|32|110|111)\b")
_STORE_ERROR = re.compile(r"<Code>(?P<code>[^<]*)</Code>\s*<Message>(?P<message>[^<]*)</Message>")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


STORE = "object store"  # how a store fault's description starts


def _store_cause(exc: BaseException) -> str | None:
    if isinstance(exc, StoreUnavailable):
        return f"{STORE}: {exc}"
    # delta-rs raises object-store failures as OSError without errno (or DeltaError); a full disk never passes
    if type(exc).__name__ in ("DeltaError", "CommitFailedError") or (isinstance(exc, OSError) and exc.errno is None):
        text = str(exc)
        if "No space left" not in text and _STORE_TEXT.search(_ANSI.sub("", text)):
            return f"{STORE}: {one_line(exc)}"
    return None


def one_line(error: BaseException) -> str:
    """An error in one line: an object store's own code and message when it sent one, else the
    first and last line of delta-rs's chained message (its type's name when it has none)."""
    text = _ANSI.sub("", str(error))
    m = _STORE_ERROR.search(text)
    if m:
        return f"{m['code']}: {m['message']}"
    lines = [line.strip(" ↳") for line in text.splitlines() if line.strip(" ↳")]
    return " / ".join(lines[:1] + lines[-1:]) if len(lines) > 1 else (lines[0] if lines else type(error).__name__)


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


class StoreUnavailable(TransientError, OSError):
    """The object store refused or lost a request in a way that passes (a 5xx answer,
    throttling, a timeout, a connection lost): the caller retries within its budget."""


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
