"""Which source faults are transient (worth retrying), and how long to keep retrying.

A transient fault is one the network or a restarting server causes: a connection refused,
dropped, reset or cut mid-packet, a read that times out. Anything else (SQL errors, a table
without a key, an unsupported type, a TLS certificate that does not verify) fails at once:
retrying cannot fix it.

Used by the snapshot (pipelines/snapshot_job.py: a chunk group is idempotent until committed,
so a failed group is read again from its low watermark) and meant for the stream side too.
Tested by tests/test_snapshot_faults.py through a TCP fault proxy.
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass

import pymysql

# Client and server errors of a lost path or a restarting server: can't connect (2003), gone
# away (2006), lost during query (2013), lost during handshake / SSL EOF (2055), server shutdown
# (1053), connection killed (1927), and MariaDB's "server is shutting down" (1053 again, ER_SERVER_SHUTDOWN).
TRANSIENT_CODES = {2003, 2006, 2013, 2055, 1053, 1927}
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


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between attempts, and the budget: how long a fault may last before giving up."""

    delays: tuple[float, ...] = (0.5, 1, 2, 4, 8, 15, 30)
    budget_seconds: float = 300.0
    # A group attempt with no result after this long is treated as stalled (the bulk reader has
    # no read timeout of its own) and cancelled, then retried.
    stall_seconds: float = 600.0
    read_timeout: float = 120.0  # socket read timeout of the snapshot's pymysql connections

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        return self.delays[min(attempt, len(self.delays)) - 1]


class RetryBudgetExceeded(RuntimeError):
    """A transient fault outlasted the retry budget (runtime failure: exit 1; a re-run resumes)."""
