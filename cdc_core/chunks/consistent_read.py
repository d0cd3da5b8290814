"""Reading rows in one consistent snapshot at the binlog position it matches.

MariaDB's ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` reports, in the status variables
``binlog_snapshot_file`` and ``binlog_snapshot_position``, the binlog position its read view
matches exactly: every transaction at or before it is visible to the transaction's reads,
none after it. Rows read in that transaction are the table as of that position, whatever
is written meanwhile, so a chunk read so has one position for its low and its high
watermark and needs no window folded: that is how rows without a key (nothing identifies
them in a window's changes) are read exactly under writes (cdc_core/chunks/reader.py).

:func:`consistent_snapshot` is the one place that asks the server; a server that reports
no position (MySQL) answers None, and the planner refuses a table only such a read could
take (cdc_core/chunks/planning.py).

Invariant (tests/test_keyless_tables.py): rows read after :func:`consistent_snapshot` in its
transaction are the table as of the position it returned.
"""

from __future__ import annotations

from cdc_core.offset.position import BinlogPosition


def consistent_snapshot(cursor, base: int = 0) -> BinlogPosition | None:
    """Start a transaction with a consistent snapshot on ``cursor``'s connection and return
    the binlog position its read view matches (in a pipeline whose positions on this server
    carry ``base``); None, with no transaction left open, on a server that does not report
    one. The caller ends the transaction."""
    # The snapshot is taken only under REPEATABLE READ (the session's level may differ).
    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
    cursor.execute("SHOW STATUS LIKE 'binlog\\_snapshot\\_%'")
    status = {str(k).lower(): v for k, v in cursor.fetchall()}
    file = status.get("binlog_snapshot_file")
    if not file:
        cursor.execute("ROLLBACK")
        return None
    return BinlogPosition(file, int(status["binlog_snapshot_position"]), base)


def reports_snapshot_position(cursor) -> bool:
    """Whether the server of ``cursor`` tells the binlog position of a consistent snapshot."""
    found = consistent_snapshot(cursor) is not None
    if found:
        cursor.execute("ROLLBACK")
    return found
