"""Micro-batch assembly: row events folded per table until the batch is due.

Invariants (tests/test_engine_parts.py):
- A batch is due at ``max_rows`` rows, ``max_bytes`` of events, or ``max_seconds``
  after its first row; the engine also cuts it at every DDL, before a stop and before
  a reconnect. A batch never splits a row event.
- Which limits apply (``BatchPolicy``): the live ones while the last event read is at
  most ``CATCHUP_LAG_SECONDS`` old by the source's clock, else the catch-up ones, which
  are never smaller. Only when a batch closes changes: the byte bound holds in both.
- One ``TableBatch`` per table and batch, for one set of columns: a table whose rows
  arrive with other columns (its table map changed) needs the batch cut first
  (``accepts`` says so).
- ``absorb`` moves a released hold's rows into the open batch: the held table has no
  rows of its own there (all of them went to the hold), so nothing is reordered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cdc_core.batch.table_batch import TableBatch
from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.table import TableSchema


@dataclass
class BatchLimits:
    """When a micro-batch is due (``stream.max_batch_rows`` / ``max_batch_seconds``)."""

    max_rows: int
    max_seconds: float
    max_bytes: int = 64 << 20


# A stream is catching up (reading a backlog) when the last event it read was written more than
# this long ago by the source's clock. Binlog timestamps are whole seconds of the statement's start,
# so a live stream reads events up to 1 s "old" plus its own batch time; at 20,000 rows/s it stays
# within 2 s (bench/stream.py --latency).
CATCHUP_LAG_SECONDS = 5.0


@dataclass(frozen=True)
class BatchPolicy:
    """The limits of a live stream and the (larger) ones of a stream reading a backlog, whose
    rows are late already: there fewer, larger commits cost less (each commit has a fixed
    cost, on an object store tens of requests: bench/object_store.py) and make fewer files."""

    live: BatchLimits
    catchup: BatchLimits

    @classmethod
    def of(cls, max_rows: int, max_seconds: float, catchup_rows: int, catchup_seconds: float) -> BatchPolicy:
        """Catch-up limits below the live ones are raised to them."""
        live = BatchLimits(max_rows, max_seconds)
        return cls(live, BatchLimits(max(catchup_rows, max_rows), max(catchup_seconds, max_seconds)))

    def limits(self, lag_seconds: float) -> BatchLimits:
        """The limits for a stream whose last event read is ``lag_seconds`` old."""
        return self.catchup if lag_seconds > CATCHUP_LAG_SECONDS else self.live


@dataclass
class MicroBatch:
    """The row events read since the last commit, folded per source table."""

    tables: dict[str, TableBatch] = field(default_factory=dict)
    rows: int = 0
    bytes: int = 0
    opened: float = 0.0  # monotonic time of the first row

    def accepts(self, table: str, schema: TableSchema) -> bool:
        """Whether rows of ``table`` written with ``schema`` can join this batch."""
        tb = self.tables.get(table)
        return tb is None or tb.schema == schema

    def add(self, table: str, schema: TableSchema, make: Callable[[], TableBatch], op: str, rows: list,
            position: BinlogPosition, size: int, now: float, time_us: int = 0,
            gtid: str | None = None, first_row: int = 0) -> TableBatch:
        """Fold one row event of ``table`` (``make`` builds its TableBatch on first use); its rows
        are numbered from ``first_row`` (cdc_core/binlog/events.py: RowsEvent)."""
        tb = self.tables.get(table)
        if tb is None:
            tb = self.tables[table] = make()
        tb.add_event(op, rows, position, time_us, gtid, first_row)
        if not self.rows:
            self.opened = now
        self.rows += len(rows)
        self.bytes += size
        return tb

    def due(self, now: float, limits: BatchLimits) -> bool:
        return bool(self.rows) and (self.rows >= limits.max_rows or self.bytes >= limits.max_bytes
                                    or now - self.opened >= limits.max_seconds)

    def absorb(self, other: MicroBatch) -> None:
        """Take over ``other``'s tables (a released hold's rows; see the invariants)."""
        if not other.rows:
            return
        self.tables.update(other.tables)
        self.opened = min(self.opened, other.opened) if self.rows else other.opened
        self.rows += other.rows
        self.bytes += other.bytes
