"""Where the stream starts, and the server-side checks before it connects.

Invariants:
- Every start position is a transaction boundary (a binlog end the server reported, the
  start of a binlog file, or the end of a transaction found by scanning).
- A start position the server no longer has (purged) is an error that says so and
  what to do; it is never replaced by a later position (that would lose changes).
- ``timestamp`` starts at the first transaction whose first event's binlog timestamp
  (whole seconds) is at or after the given instant's second — read from the events
  themselves, so it works on MySQL and MariaDB, with or without GTIDs; ``specific`` with a
  GTID on MariaDB starts right after that transaction (the GTID names the last transaction
  already applied, as MariaDB's gtid_slave_pos). Tested on mark sequences directly
  (tests/test_engine_parts.py) and against the server (tests/test_stream.py).
- ``specific`` with a GTID set on MySQL (the set of transactions already applied, as
  ``@@gtid_executed`` prints it) starts at the boundary before the binlog's first
  transaction not in the set, and only where that streams exactly the transactions not in
  it: refused when the server purged a transaction the set lacks (``gtid_purged`` not a
  subset), when a transaction without a GTID comes first, or when the binlog holds a
  transaction of the set after that boundary (it would be applied again): those are the
  set's transactions the server executed, less the purged ones and those read before the
  boundary (tests/test_startup_gtid.py).
- The scan is an event loop (cdc_core/binlog/event_loop.py) whose records are the marks:
  what opens and closes a transaction (XA's included) is the loop's decision.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pymysql

from cdc_core.binlog.event_loop import EventLoop, LoopRecord
from cdc_core.binlog.event_source import Opener, server_source
from cdc_core.binlog.events import PreparedCommit, Statement, TransactionEnd, TransactionStart
from cdc_core.errors import BadInput
from cdc_core.offset.gtid import GtidSet, server_gtids, server_purged
from cdc_core.offset.position import BinlogPosition, master_position
from cdc_core.source.connection import ConnectionSettings
from cdc_core.source.flavour import flavour_of

log = logging.getLogger(__name__)


class StartupError(BadInput):
    """The stream cannot start as configured (bad input: exit 2)."""


class PositionPurged(StartupError):
    """The position to resume from is no longer on the server."""


class ServerIdInUse(StartupError):
    """Another replica is connected with the configured server_id."""


def binlog_files(cur) -> list[tuple[str, int]]:
    """(file, size) of every binlog the server still has, oldest first."""
    cur.execute(flavour_of(cur).binary_logs_sql)
    return [(r[0], int(r[1])) for r in cur.fetchall()]


def connected_replicas(cur) -> list[tuple[int, str]] | None:
    """(server_id, reported host) of each replica connected to the server (SHOW REPLICAS, SHOW
    SLAVE HOSTS before MySQL 8.0.22 and on MariaDB), or None when the user may not list them
    (cdc_core/source/flavour.py: ``replicas_privilege``; the server then refuses a second
    replica with one server_id itself, MariaDB with error 4052)."""
    try:
        cur.execute(flavour_of(cur).replicas_sql)
    except pymysql.err.OperationalError as e:
        log.debug("cannot list replicas: %s", e)
        return None
    return [(int(r[0]), r[1]) for r in cur.fetchall()]


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
        replicas = connected_replicas(cur)
        if replicas is None:
            return
        hosts = [r for r in replicas if r[0] == server_id and (own is None or r[1] != own)]
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
    if gtid is not None and not flavour_of(cur).mariadb:
        return after_gtid_set(cur, gtid, end, lambda applied: _first_not_in_binlog(
            server_source(conn, server_id), start, end, applied))
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
    records = EventLoop(opener, start, end=end, starts=True, mysql_gtids=True).records()
    try:
        return find_start(_marks(records), timestamp_s=None if timestamp_ms is None else timestamp_ms // 1000,
                          gtid=gtid, start=start)
    finally:
        records.close()


def first_not_in(marks: Iterable[Mark], applied: GtidSet, start: BinlogPosition
                 ) -> tuple[BinlogPosition | None, GtidSet]:
    """The boundary before the first transaction of ``marks`` whose GTID is not in ``applied``
    (None when every one is), and the GTIDs of the transactions before it."""
    boundary, before, in_txn = start, GtidSet(), False
    for m in marks:
        if not in_txn and m.kind != "commit":  # a transaction's first event
            in_txn = True
            if m.gtid is None:
                raise StartupError(f"the transaction after {boundary} has no GTID (gtid_mode is not ON): "
                                   "startup.gtid cannot place it; start at a file and pos instead")
            if not applied.contains(m.gtid):
                return boundary, before
            before = before.with_transaction(m.gtid)
        if m.kind in ("commit", "statement"):
            boundary, in_txn = m.position, False
    return None, before


def _first_not_in_binlog(opener: Opener, start: BinlogPosition, end: BinlogPosition, applied: GtidSet
                         ) -> tuple[BinlogPosition | None, GtidSet]:
    """:func:`first_not_in` over the binlog (start, end] the source ``opener`` opens."""
    if end <= start:
        return None, GtidSet()
    records = EventLoop(opener, start, end=end, starts=True, mysql_gtids=True).records()
    try:
        return first_not_in(_marks(records), applied, start)
    finally:
        records.close()


def after_gtid_set(cur, text: str, end: BinlogPosition,
                   scan: Callable[[GtidSet], tuple[BinlogPosition | None, GtidSet]]) -> BinlogPosition:
    """Where a MySQL stream starts that must apply exactly the transactions not in the GTID set
    ``text`` (see the module invariants); ``scan`` is :func:`first_not_in` over the server's
    binlogs up to ``end``, its binlog end."""
    try:
        applied = GtidSet.parse(text)
        if applied.mariadb:
            raise ValueError("a MariaDB GTID")
    except ValueError as e:
        raise StartupError(f"source.startup.gtid {text!r} is not a MySQL GTID set ({e}): give the set of "
                           "transactions already applied, as @@gtid_executed prints it (uuid:1-100,...)") from None
    purged = server_purged(cur)
    if lost := purged.difference(applied):
        raise PositionPurged(f"the server has purged transactions {lost}, which are not in source.startup.gtid: "
                             f"they are gone from its binlog; {PURGED_WAY_OUT}")
    found, before = scan(applied)
    found = found or end
    executed = server_gtids(cur)
    later = applied.difference(applied.difference(executed)).difference(purged).difference(before)
    if later:
        raise StartupError(f"source.startup.gtid holds transactions {later} that the binlog has after {found}, where "
                           "the first transaction not in the set begins: binlake starts at one binlog position and "
                           "would apply them again. Give the set of every transaction already applied, as "
                           "@@gtid_executed prints it where they were applied")
    log.info("startup.gtid: the stream starts at %s, before the first transaction not in the set", found)
    return found
