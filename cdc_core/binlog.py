"""Reading row changes from the binlog between two positions.

Invariants:
- Reading starts at a transaction boundary (a SHOW MASTER STATUS position or a
  committed offset), so every row event is preceded by its table map.
- Reading stops at the first event whose end position is at or past ``end``; as
  ``end`` is itself a transaction boundary, no transaction is cut in half.
- Column names and types come from the table map (binlog_row_metadata=FULL),
  never from the live information_schema.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_core import binlog_columns  # types hook: column decoding the library gets wrong
from cdc_core.positions import BinlogPosition
from cdc_core.source import ConnectionSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RowChange:
    """One row change: op is 'c' (insert), 'u' (update) or 'd' (delete).

    ``before`` is set for updates and deletes, ``after`` for inserts and updates.
    ``position`` is the end of the row event; ``row_index`` orders rows inside it.
    """

    database: str
    table: str
    op: str
    before: dict | None
    after: dict | None
    position: BinlogPosition
    row_index: int

    @property
    def seq(self) -> int:
        return self.position.seq(self.row_index)


def open_binlog(conn: ConnectionSettings, server_id: int, start: BinlogPosition, **options) -> BinLogStreamReader:
    """A blocking replication reader from ``start`` (a transaction boundary); the
    callers stop it themselves at their end position."""
    return BinLogStreamReader(
        connection_settings=conn.pymysql_kwargs(),
        server_id=server_id,
        is_mariadb=False,  # with True, MariaDB resumes by GTID only and ignores log_file/log_pos
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=True,  # non-blocking reconnects from the first binlog at its end
        **options,
    )


def read_changes(
    conn: ConnectionSettings,
    server_id: int,
    start: BinlogPosition,
    end: BinlogPosition,
    tables: set[tuple[str, str]] | None = None,
) -> Iterator[RowChange]:
    """Yield row changes in (start, end] for ``tables`` (all tables when None)."""
    if end <= start:
        return
    reader = open_binlog(
        conn, server_id, start,
        filter_non_implemented_events=False,  # every event returns, so the end check sees each one
        only_schemas=sorted({db for db, _ in tables}) if tables else None,
        only_tables=sorted({t for _, t in tables}) if tables else None,
    )
    try:
        for event in reader:
            pos = BinlogPosition(reader.log_file, reader.log_pos)
            if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)) and (
                tables is None or (event.schema, event.table) in tables
            ):
                yield from _row_changes(event, pos)
            if pos >= end:
                break
    finally:
        reader.close()


def _row_changes(event, pos: BinlogPosition) -> Iterator[RowChange]:
    binlog_columns.prepare(event)  # types hook: before event.rows is decoded
    for i, row in enumerate(event.rows):
        if isinstance(event, WriteRowsEvent):
            after = fix_image(event, row["values"], row["none_sources"])
            yield RowChange(event.schema, event.table, "c", None, after, pos, i)
        elif isinstance(event, UpdateRowsEvent):
            before = fix_image(event, row["before_values"], row["before_none_sources"])
            after = fix_image(event, row["after_values"], row["after_none_sources"])
            yield RowChange(event.schema, event.table, "u", before, after, pos, i)
        else:
            before = fix_image(event, row["values"], row["none_sources"])
            yield RowChange(event.schema, event.table, "d", before, None, pos, i)


_US = dt.timedelta(microseconds=1)


def fix_image(event, values: dict, none_sources: dict) -> dict:
    """A row image with python-mysql-replication's decoding slips undone:
    - the empty SET comes back as None (with none source "empty set"): it is '';
    - a negative TIME with a fraction is stored as the two's complement of the whole
      packed value, but the decoder complements seconds and fraction apart, giving
      -(s + 1 - f) for -(s + f);
    - strings, ENUM, SET, MariaDB compressed columns, old-format TIME: cdc_core/binlog_columns.py."""
    binlog_columns.decode_values(event, values)  # types hook
    for col in event.columns:
        v = values.get(col.name)
        if v is None:
            if col.type == FIELD_TYPE.SET and none_sources.get(col.name) == NONE_SOURCE.EMPTY_SET:
                values[col.name] = ""
        elif col.type == FIELD_TYPE.TIME2 and v < dt.timedelta(0):
            us = -(v // _US)
            frac = us % 1_000_000
            if frac:
                values[col.name] = -_US * (us + 1_000_000 - 2 * frac)
    return values
