"""Finding an XA transaction's prepared rows in the binlog when its XA PREPARE lies before
where a reader started (cdc_core/binlog/xa.py).

The group is found by the server's own listing (``SHOW BINLOG EVENTS``, no row decoded):
the last ``XA END <xid>`` at or before the reader's start, from its file back to the
oldest binlog the server has; the group is then read from its start (its GTID event, or
MySQL's ``XA START`` without one) to its XA_PREPARE. A rare path (an outcome right after a restart or a start inside the
transaction), so it scans whole files; a file costs about a second per million events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from pymysqlreplication.event import MariadbGtidEvent, XAPrepareEvent

from cdc_core.binlog.decoder import open_binlog
from cdc_core.binlog.xa import XaVerb, xa_statement
from cdc_core.errors import TerminalError
from cdc_core.offset.position import BinlogPosition
from cdc_core.source.connection import ConnectionSettings, connect

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
        cur.execute("SHOW BINARY LOGS")
        files = [r[0] for r in cur.fetchall()]
        names = [f for f in files if before.at(f, 0) <= before.at(before.file, 0)]
        for name in reversed(names):
            found, group, offset = None, None, 0
            while True:
                cur.execute("SHOW BINLOG EVENTS IN %s LIMIT %s, %s", (name, offset, PAGE))
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


def prepared_group(conn: ConnectionSettings, server_id: int, xid: str,
                   before: BinlogPosition) -> Iterator[tuple[object, BinlogPosition]]:
    """The events (with their end positions) of ``xid``'s prepared group before ``before``,
    up to its XA_PREPARE; :class:`PreparedGroupGone` when no binlog holds it any more."""
    start = prepared_group_start(conn, xid, before)
    if start is None:
        raise PreparedGroupGone(
            f"XA COMMIT {xid} after {before}: its XA PREPARE is in no binlog the server still has, so its rows "
            "cannot be read; re-snapshot or backfill the tables it wrote (binlake backfill --table)")
    reader = open_binlog(conn, (server_id + LOOKUP_ID_OFFSET) % (1 << 32), start, filter_non_implemented_events=False)
    try:
        for event in reader:
            at = before.at(reader.log_file, reader.log_pos)
            if not isinstance(event, MariadbGtidEvent):
                yield event, at
            if isinstance(event, XAPrepareEvent):
                return
    finally:
        reader.close()
