"""Reading rows in one consistent snapshot at the binlog position it matches.

MariaDB's ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` reports, in the status variables
``binlog_snapshot_file`` and ``binlog_snapshot_position``, the binlog position its read view
matches exactly: every transaction at or before it is visible to the transaction's reads,
none after it. Rows read in that transaction are the table as of that position, whatever
is written meanwhile, so a chunk read so has one position for its low and its high
watermark and needs no window folded: that is how rows without a key (nothing identifies
them in a window's changes) are read exactly under writes (cdc_core/chunks/reader.py).

:func:`consistent_snapshot` is the one place that opens such a read; whether a server can
is its flavour's answer (cdc_core/source/flavour.py: MariaDB and Percona Server can, MySQL
cannot), and the planner refuses a table only such a read could take on a server that cannot
(cdc_core/chunks/planning.py).

Invariant (tests/test_keyless_tables.py): rows read after :func:`consistent_snapshot` in its
transaction are the table as of the position it returned.
"""

from __future__ import annotations

from cdc_core.offset.position import BinlogPosition
from cdc_core.offset.visibility import reported_snapshot_position
from cdc_core.source.flavour import flavour_of


def consistent_snapshot(cursor, base: int = 0) -> BinlogPosition | None:
    """Start a transaction with a consistent snapshot on ``cursor``'s connection and return
    the binlog position its read view matches (in a pipeline whose positions on this server
    carry ``base``); None, with no transaction left open, on a server that does not report
    one. The caller ends the transaction."""
    if not reports_snapshot_position(cursor):
        return None
    # The snapshot is taken only under REPEATABLE READ (the session's level may differ).
    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
    at = reported_snapshot_position(cursor, base)
    if at is None:
        cursor.execute("ROLLBACK")
    return at


def reports_snapshot_position(cursor) -> bool:
    """Whether the server of ``cursor`` tells the binlog position of a consistent snapshot
    (its flavour answers: cdc_core/source/flavour.py)."""
    return flavour_of(cursor).snapshot_position
