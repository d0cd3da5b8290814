"""Micro-batch assembly: row events folded per table until the batch is due.

Invariants (tests/test_engine_parts.py):
- A batch is due at ``max_rows`` rows, ``max_bytes`` of events, or ``max_seconds``
  after its first row; the engine also cuts it at every DDL, before a stop and before
  a reconnect. A batch never splits a row event.
- One ``TableBatch`` per table and batch, for one set of columns: a table whose rows
  arrive with other columns (its table map changed) needs the batch cut first
  (``accepts`` says so).
- ``absorb`` moves a released hold's rows into the open batch: the held table has no
  rows of its own there (all of them went to the hold), so nothing is reordered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cdc_core.positions import BinlogPosition
from cdc_core.table_batch import TableBatch
from cdc_core.table_schema import TableSchema


@dataclass
class BatchLimits:
    """When a micro-batch is due (``stream.max_batch_rows`` / ``max_batch_seconds``)."""

    max_rows: int
    max_seconds: float
    max_bytes: int = 64 << 20


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
            position: BinlogPosition, size: int, now: float) -> TableBatch:
        """Fold one row event of ``table`` (``make`` builds its TableBatch on first use)."""
        tb = self.tables.get(table)
        if tb is None:
            tb = self.tables[table] = make()
        tb.add_event(op, rows, position)
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
