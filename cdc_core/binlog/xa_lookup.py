"""Finding an XA transaction's prepared rows in the binlog when its XA PREPARE lies before
where a reader started (cdc_core/binlog/xa.py).

The group is found by the server's own listing (``SHOW BINLOG EVENTS``, no row decoded):
the last ``XA END <xid>`` at or before the reader's start, from its file back to the
oldest binlog the server has; the group is then read from its start (its GTID event, or
MySQL's ``XA START`` without one) to its XA_PREPARE. A rare path (an outcome right after a restart or a start inside the
transaction), so it scans whole files; a file costs about a second per million events.
The group is read by an event loop (cdc_core/binlog/event_loop.py) of its own that shares
the stream loop's decoder and capture: its rows are decoded and captured as the stream's.

Invariants (tests/test_xa_transactions.py):
- The rows found are the group's captured row events, in binlog order, and the layouts
  they are new in come before them; a group no binlog holds any more is
  ``PreparedGroupGone`` (its rows would be lost).
"""

from __future__ import annotations

import logging
import time

from cdc_core.binlog.event_loop import EventLoop
from cdc_core.binlog.event_source import server_source
from cdc_core.binlog.events import RowsEvent, TableLayout, TransactionEnd
from cdc_core.binlog.xa import XaVerb, xa_statement
from cdc_core.errors import TerminalError
from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.startup import binlog_files
from cdc_core.source.connection import ConnectionSettings, connect
from cdc_core.source.flavour import flavour_of

log = logging.getLogger(__name__)

PAGE = 10_000  # event headers per SHOW BINLOG EVENTS
# The look-back reader runs while the caller's own replication connection is open: it takes an id
# far from the pipeline's (server_id, +1 for backfills, +2.. for parallel decoding).
LOOKUP_ID_OFFSET = 1 << 30


class PreparedGroupGone(TerminalError):
    """An XA COMMIT whose XA PREPARE the server's binlogs no longer hold."""


def prepared_group_start(conn: ConnectionSettings, xid: str, before: BinlogPosition) -> BinlogPosition | None:
    """Where the group of the last ``XA END xid`` at or before ``before`` begins, or None when
    no binlog holds it."""
    started = time.monotonic()
    with connect(conn) as c, c.cursor() as cur:
        files = [name for name, _ in binlog_files(cur)]
        events_sql = flavour_of(cur).binlog_events_sql + " IN %s LIMIT %s, %s"
        names = [f for f in files if before.at(f, 0) <= before.at(before.file, 0)]
        for name in reversed(names):
            found, group, offset = None, None, 0
            while True:
                cur.execute(events_sql, (name, offset, PAGE))
                rows = cur.fetchall()
                for r in rows:
                    pos, kind, end = int(r[1]), r[2], int(r[4])
                    if name == before.file and end > before.pos:
                        rows = []
                        break
                    info = str(r[5]).strip()
                    statement = xa_statement(info.rsplit("; ", 1)[-1]) if kind == "Query" else None
                    if kind in ("Gtid", "Anonymous_Gtid") or (statement and statement.verb == XaVerb.START
                                                             and group is None):
                        group = pos
                    elif statement and statement.verb == XaVerb.END and statement.xid == xid and group is not None:
                        found = group
                    elif kind in ("Xid", "XA_prepare") or (kind == "Query" and info == "COMMIT"):
                        group = None
                if len(rows) < PAGE:
                    break
                offset += PAGE
            if found is not None:
                log.info("XA transaction %s: its prepared rows found at %s:%d (%.1f s)", xid, name, found,
                         time.monotonic() - started)
                return before.at(name, found)
    return None


class XaLookBack:
    """The stream loop's ``unread_commit`` (cdc_core/binlog/event_loop.py): the rows of an
    XA COMMIT whose XA PREPARE lies before the loop's start, read from the binlog."""

    def __init__(self, conn: ConnectionSettings, server_id: int) -> None:
        self.conn = conn
        self.opener = server_source(conn, (server_id + LOOKUP_ID_OFFSET) % (1 << 32))

    def __call__(self, xid: str, end: TransactionEnd, loop: EventLoop) -> list[TableLayout | RowsEvent]:
        """The layouts and row events of ``xid``'s prepared group before ``loop.start``, read
        with ``loop``'s decoder and capture; :class:`PreparedGroupGone` when no binlog holds it."""
        start = prepared_group_start(self.conn, xid, loop.start)
        if start is None:
            raise PreparedGroupGone(
                f"XA COMMIT {xid} at {end.position}: its XA PREPARE is in no binlog the server still has, so its "
                "rows cannot be read; re-snapshot or backfill the tables it wrote (binlake backfill --table)")
        group = EventLoop(self.opener, start, decoder=loop.decoder, capture=loop.capture)
        layouts: list[TableLayout | RowsEvent] = []
        records = group.records()
        try:
            for record in records:
                if isinstance(record, TableLayout):
                    layouts.append(record)
                elif isinstance(record, TransactionEnd):  # the group's XA_PREPARE
                    break
        finally:
            records.close()
        rows = group.xa.outcome(xid)
        if rows is None:
            raise PreparedGroupGone(f"XA COMMIT {xid} at {end.position}: the group found at {start} is not its "
                                    "prepared part; re-snapshot or backfill the tables it wrote "
                                    "(binlake backfill --table)")
        return [*layouts, *rows]
