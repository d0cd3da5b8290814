"""Where the stream starts, and the server-side checks before it connects.

Invariants:
- Every start position is a transaction boundary (a SHOW MASTER STATUS position, the
  start of a binlog file, or the end of a transaction found by scanning).
- A start position the server no longer has (purged) is an error that says so and
  what to do; it is never replaced by a later position (that would lose changes).
- ``timestamp`` starts at the first transaction whose first event's binlog timestamp
  (whole seconds) is at or after the given instant's second — read from the events
  themselves, so it works on MySQL and MariaDB, with or without GTIDs; ``specific`` with a
  GTID starts right after that transaction (the GTID names the last transaction already
  applied, as MariaDB's gtid_slave_pos). Tested on mark sequences directly
  (tests/test_engine_parts.py) and against the server (tests/test_stream.py).
- The scan is an event loop (cdc_core/binlog/event_loop.py) whose records are the marks:
  what opens and closes a transaction (XA's included) is the loop's decision.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pymysql

from cdc_core.binlog.event_loop import EventLoop, LoopRecord
from cdc_core.binlog.event_source import Opener, server_source
from cdc_core.binlog.events import PreparedCommit, Statement, TransactionEnd, TransactionStart
from cdc_core.errors import BadInput
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.source.connection import ConnectionSettings

log = logging.getLogger(__name__)


class StartupError(BadInput):
    """The stream cannot start as configured (bad input: exit 2)."""


class PositionPurged(StartupError):
    """The position to resume from is no longer on the server."""


class ServerIdInUse(StartupError):
    """Another replica is connected with the configured server_id."""


def binlog_files(cur) -> list[tuple[str, int]]:
    """(file, size) of every binlog the server still has, oldest first."""
    cur.execute("SHOW BINARY LOGS")
    return [(r[0], int(r[1])) for r in cur.fetchall()]


def clock_offset(cur) -> float:
    """Seconds this host's clock is ahead of the source's (to age binlog timestamps, which
    are the source's): measured once, against the middle of the query's round trip."""
    before = time.time()
    cur.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
    server = float(cur.fetchone()[0])
    return (before + time.time()) / 2 - server


# What to do when the stream's position is gone from the server (pipelines/resync.py).
PURGED_WAY_OUT = ("run `binlake resync -c <config>` to restart at the server's binlog end and backfill every table "
                  "online (or re-snapshot: delete the sink folder, or use a new pipeline.name, and run `binlake run`)")


def check_available(cur, pos: BinlogPosition) -> None:
    """Raise PositionPurged when ``pos`` is in a binlog the server has purged."""
    files = binlog_files(cur)
    names = {f for f, _ in files}
    if pos.file not in names:
        first = files[0][0] if files else "none"
        raise PositionPurged(
            f"the stream must resume at {pos}, but the server no longer has {pos.file} (oldest binlog: {first}); "
            f"changes after that point are gone from the binlog: {PURGED_WAY_OUT}; and keep binlogs longer "
            "(expire_logs_days / binlog_expire_logs_seconds) than the stream may be stopped")


def lag_bytes(files: list[tuple[str, int]], applied: BinlogPosition) -> int:
    """Bytes of binlog after ``applied`` up to the server's end."""
    total = 0
    for name, size in files:
        p = BinlogPosition(name, size)
        if p.file_number == applied.file_number:
            total += max(0, size - applied.pos)
        elif p.file_number > applied.file_number:
            total += size
    return total


def check_server_id(cur, server_id: int, own: str | None = None, wait_seconds: float = 5.0) -> None:
    """Raise ServerIdInUse when the source itself or another connected replica uses
    ``server_id``. A replica of ours killed a moment ago may still be listed until the
    server's next heartbeat to it fails, so a listing must persist ``wait_seconds``. One
    reported as ``own`` (this pipeline's name: its writer lock rules out a live one) is a
    connection an outage left behind on the server, which drops it when we register."""
    cur.execute("SELECT @@server_id")
    if int(cur.fetchone()[0]) == server_id:
        raise ServerIdInUse(f"source.server_id {server_id} is the source server's own server_id; "
                            "choose a server_id no server or replica uses")
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            cur.execute("SHOW SLAVE HOSTS")
        except pymysql.err.OperationalError as e:  # needs REPLICATION MASTER ADMIN on MariaDB: rely on error 4052
            log.debug("cannot list replicas: %s", e)
            return
        hosts = [r for r in cur.fetchall() if int(r[0]) == server_id and (own is None or r[1] != own)]
        if not hosts:
            return
        if time.monotonic() >= deadline:
            raise ServerIdInUse(
                f"source.server_id {server_id} is in use by another replica connected to the source "
                f"(reported as {hosts[0][1]!r}); give each pipeline and replica its own server_id")
        time.sleep(0.5)


def earliest_position(cur) -> BinlogPosition:
    """The start of the oldest binlog the server has."""
    files = binlog_files(cur)
    if not files:
        raise StartupError("the source has no binary logs (is log_bin on?)")
    return BinlogPosition(files[0][0], 4)


@dataclass(frozen=True)
class Mark:
    """An event that opens or closes a transaction, as the start scan sees it."""

    kind: str  # gtid | begin | commit (XID or COMMIT) | statement (a DDL: opens and closes one)
    position: BinlogPosition  # the event's end
    timestamp: int  # binlog timestamp, whole seconds
    gtid: str | None = None


def find_start(marks: Iterable[Mark], *, timestamp_s: int | None = None, gtid: str | None = None,
               start: BinlogPosition) -> BinlogPosition | None:
    """The start position of mode ``timestamp`` (the boundary before the first transaction whose
    first event is at or after ``timestamp_s``) or of ``specific`` with a GTID (the end of that
    transaction) in ``marks``; None if not found. Works with or without GTID events."""
    boundary, found, in_txn = start, False, False
    for m in marks:
        if not in_txn and m.kind != "commit":  # a transaction's first event
            in_txn = True
            if timestamp_s is not None and m.timestamp >= timestamp_s:
                return boundary
            found = found or (m.gtid is not None and m.gtid == gtid)
        if m.kind in ("commit", "statement"):
            boundary, in_txn = m.position, False
            if found:
                return boundary
    return None


def _marks(records: Iterable[LoopRecord]) -> Iterator[Mark]:
    """The marks of an event loop's records (it yields ``TransactionStart`` when asked: ``starts``)."""
    for r in records:
        kind = type(r)
        if kind is TransactionStart:
            yield Mark("gtid" if r.gtid is not None else "begin", r.position, r.timestamp, r.gtid)
        elif kind is TransactionEnd:
            yield Mark("commit", r.position, r.timestamp)
        elif kind is PreparedCommit:
            yield Mark("commit", r.position, r.end.timestamp)
        elif kind is Statement:
            yield Mark("statement", r.position, r.timestamp)


def scan_for_start(conn: ConnectionSettings, server_id: int, cur, *, timestamp_ms: int | None = None,
                   gtid: str | None = None) -> BinlogPosition:
    """Scan the server's binlogs for the start position of mode ``timestamp`` or of
    ``specific`` with a GTID (see the module invariants and :func:`find_start`)."""
    start, end = earliest_position(cur), master_position(cur)
    if end <= start:
        return end
    found = start_in(server_source(conn, server_id), start, end, timestamp_ms=timestamp_ms, gtid=gtid)
    if found is not None:
        return found
    if timestamp_ms is not None:
        return end
    raise StartupError(f"GTID {gtid} is not in the source's binlogs (it may have been purged)")


def start_in(opener: Opener, start: BinlogPosition, end: BinlogPosition, *, timestamp_ms: int | None = None,
             gtid: str | None = None) -> BinlogPosition | None:
    """:func:`find_start` over the binlog (start, end] the source ``opener`` opens (an event loop
    that yields transaction starts and reads MySQL's GTID events too)."""
    records = EventLoop(opener, start, end=end, starts=True).records()
    try:
        return find_start(_marks(records), timestamp_s=None if timestamp_ms is None else timestamp_ms // 1000,
                          gtid=gtid, start=start)
    finally:
        records.close()
