"""What a Delta table keeps of its source rows (``sink.table_modes``) and the source metadata
columns (``sink.metadata_columns``), as reserved columns after ``_cdc_op`` and ``_cdc_seq``
(docs/history.md; the layout: docs/contracts.md, "Delta tables"):

- ``_cdc_ts`` (timestamp, UTC, µs): the change's time on the source, from its binlog event
  header (whole seconds: MariaDB's event header and MySQL's carry seconds); ``_cdc_position``
  (string): the change's transaction GTID where the server writes them, else ``file:pos``
  of its event. Rows read by the snapshot or a backfill: the host's clock when their chunk's
  high watermark was taken, and that high watermark as ``file:pos``.
- ``current`` (the default): the table holds the source's rows as they are; nothing more.
- ``soft_delete``: a deleted row stays, its values those it had, with ``_cdc_deleted`` true,
  ``_cdc_op`` 'd' and the delete's ``_cdc_seq`` (and ``_cdc_ts``/``_cdc_position`` when
  enabled); an insert of its key brings it back (``_cdc_deleted`` false).
- ``history`` (SCD type 2): every version of every row, ``_valid_from``/``_valid_to`` (UTC µs;
  ``_valid_to`` NULL for the current version), ``_valid_to_seq`` (the ``_cdc_seq`` of the change
  that closed it; ``_cdc_seq`` is the one that opened it) and ``_is_current``; a delete closes
  the current version.

Invariants (tests/test_history_modes.py):
- The default (``current``, no metadata column, no change feed) is exactly the table binlake
  always wrote: ``SinkColumns.plain`` tables take the unchanged code path.
- The extra columns come in one order (:meth:`SinkColumns.fields`), after the reserved ones
  of cdc_core/schema/output.py, so every writer of a table builds the same schema.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pyarrow as pa

from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.table import TableSchema

CDC_TS, CDC_POSITION, CDC_DELETED = "_cdc_ts", "_cdc_position", "_cdc_deleted"
VALID_FROM, VALID_TO, VALID_TO_SEQ, IS_CURRENT = "_valid_from", "_valid_to", "_valid_to_seq", "_is_current"
UTC_MICROS = pa.timestamp("us", tz="UTC")
# Every column a mode or the metadata may add (reserved: never a source column's name).
MODE_COLUMNS = frozenset({CDC_TS, CDC_POSITION, CDC_DELETED, VALID_FROM, VALID_TO, VALID_TO_SEQ, IS_CURRENT})
FEED_SUFFIX = "__changes"  # the changelog table of db.t is db.t__changes


class TableMode(enum.StrEnum):
    """``sink.table_modes``' values."""

    CURRENT = "current"
    SOFT_DELETE = "soft_delete"
    HISTORY = "history"


def position_text(position: BinlogPosition, gtid: str | None) -> str:
    """``_cdc_position`` of a change: its transaction's GTID, else its event's ``file:pos``."""
    return gtid or f"{position.file}:{position.pos}"


@dataclass(frozen=True)
class SinkColumns:
    """A Delta table's mode and the metadata columns it holds (pickles: snapshot tasks carry it)."""

    mode: TableMode = TableMode.CURRENT
    ts: bool = False  # _cdc_ts
    position: bool = False  # _cdc_position
    feed: bool = False  # a changelog table <db>.<table>__changes beside it

    @classmethod
    def of(cls, sink, table: str) -> SinkColumns:
        """The columns of Delta table ``table`` under ``sink`` (cdc_core/config.py: SinkConfig)."""
        names = set(sink.metadata_columns)
        return cls(TableMode(sink.mode_of(table)), CDC_TS in names, CDC_POSITION in names, sink.feeds(table))

    def applied(self, schema: TableSchema, routed: bool) -> SinkColumns:
        """The columns Delta table ``schema`` gets: metadata columns are for tables with a row key
        that are not routed (others keep the default layout; :func:`mode_problem` refuses a mode
        or a change feed there)."""
        return self if schema.row_key and not routed else SinkColumns()

    @property
    def plain(self) -> bool:
        """The default: the table binlake always wrote, by the unchanged code path."""
        return self.mode is TableMode.CURRENT and not (self.ts or self.position or self.feed)

    @property
    def soft(self) -> bool:
        return self.mode is TableMode.SOFT_DELETE

    @property
    def history(self) -> bool:
        return self.mode is TableMode.HISTORY

    def fields(self) -> tuple[pa.Field, ...]:
        """The table's columns after ``_cdc_op`` and ``_cdc_seq``, in their order."""
        out = []
        if self.ts:
            out.append(pa.field(CDC_TS, UTC_MICROS))
        if self.position:
            out.append(pa.field(CDC_POSITION, pa.string()))
        if self.soft:
            out.append(pa.field(CDC_DELETED, pa.bool_()))
        if self.history:
            out += [pa.field(VALID_FROM, UTC_MICROS), pa.field(VALID_TO, UTC_MICROS),
                    pa.field(VALID_TO_SEQ, pa.int64()), pa.field(IS_CURRENT, pa.bool_())]
        return tuple(out)

    def read_columns(self, n: int, high_watermark: BinlogPosition, read_at_us: int) -> dict[str, pa.Array]:
        """The extra columns of ``n`` rows read from the source (a snapshot chunk, a backfill's
        row): taken at ``high_watermark``, at ``read_at_us`` (µs since the epoch, UTC), live and
        current."""
        values = {CDC_TS: pa.array([read_at_us] * n, UTC_MICROS),
                  CDC_POSITION: pa.array([str(high_watermark)] * n, pa.string()),
                  CDC_DELETED: pa.array([False] * n, pa.bool_()),
                  VALID_FROM: pa.array([read_at_us] * n, UTC_MICROS), VALID_TO: pa.nulls(n, UTC_MICROS),
                  VALID_TO_SEQ: pa.nulls(n, pa.int64()), IS_CURRENT: pa.array([True] * n, pa.bool_())}
        return {f.name: values[f.name] for f in self.fields()}

    def with_read_columns(self, table: pa.Table, high_watermark: BinlogPosition, read_at_us: int) -> pa.Table:
        """``table`` (a chunk's rows, source columns then ``_cdc_op``/``_cdc_seq``) with the extra
        columns of rows read at ``high_watermark`` (:meth:`read_columns`)."""
        for name, array in self.read_columns(table.num_rows, high_watermark, read_at_us).items():
            table = table.append_column(name, array)
        return table


FEED_COLUMNS = SinkColumns(ts=True, position=True)  # a changelog table's columns after _cdc_op, _cdc_seq


def mode_problem(columns: SinkColumns, schema: TableSchema, routed: bool) -> str | None:
    """Why Delta table ``schema`` cannot be written in ``columns``' mode or with its change feed
    (None: it can): they need a row key and a table of its own. (Metadata columns alone are
    left out of such a table: :meth:`SinkColumns.applied`.)"""
    if columns.mode is TableMode.CURRENT and not columns.feed:
        return None
    if routed:
        return (f"{schema.qualified_name} is routed: sink.table_modes and sink.change_feed apply to tables that are "
                "not routed")
    if not schema.row_key:
        return (f"{schema.qualified_name} has no row key: sink.table_modes and sink.change_feed need one (a primary "
                "key, a NOT NULL unique key or source.key_columns)")
    return None
