"""Reads of a bounded binlog range (start, end]: a snapshot chunk's window of row changes
(cdc_core/chunks/reader.py) and the statements of a range (the snapshot's DDL check, the
stream's stable describe). Both are consumers of the event loop (cdc_core/binlog/event_loop.py),
which owns the bounds, rotates, XA groups and refusals.

Invariants (tests/test_chunk_reader.py, tests/test_xa_transactions.py, tests/test_partial_row_images.py):
- ``read_changes`` yields the row changes of ``tables`` in (start, end] in binlog order and
  stops at the first event at or past ``end``; as ``end`` is itself a transaction boundary,
  no transaction is cut in half.
- A window's changes are complete or refused: an XA COMMIT whose XA PREPARE lies before
  ``start`` is ``XaOutsideWindow``, a row event whose images leave columns out is
  ``PartialRowImage`` (the chunk's window is read again); rows prepared in the window and
  not committed in it are not changes; a committed group's rows are at its XA COMMIT.
- ``read_statements`` yields the statements other than BEGIN/COMMIT and XA's (DDL,
  TRUNCATE) in (start, end], row events undecoded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cdc_core.binlog.decoder import RowDecoder
from cdc_core.binlog.event_loop import EventLoop
from cdc_core.binlog.event_source import Opener, TableFilter, server_source
from cdc_core.binlog.events import Op, PreparedCommit, RowsEvent, Statement, TableLayout, TransactionEnd
from cdc_core.binlog.xa import XaOutsideWindow
from cdc_core.offset.position import BinlogPosition
from cdc_core.source.connection import ConnectionSettings


class PartialRowImage(Exception):
    """A row event whose images leave columns out (its session's binlog_row_image was MINIMAL
    or NOBLOB): its rows cannot be known from the binlog (a chunk's window is read again)."""


@dataclass(frozen=True)
class RowChange:
    """One row change: op is 'c' (insert), 'u' (update) or 'd' (delete).

    ``before`` is set for updates and deletes, ``after`` for inserts and updates, as
    {column: value} in the names of the row's own table map. ``position`` is the end of
    the row event; ``row_index`` orders rows inside it.
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


def read_changes(conn: ConnectionSettings, server_id: int, start: BinlogPosition, end: BinlogPosition,
                 tables: set[tuple[str, str]] | None = None) -> Iterator[RowChange]:
    """Yield row changes in (start, end] for ``tables`` (all tables when None), read from the server."""
    return changes(server_source(conn, server_id), start, end, tables)


def changes(opener: Opener, start: BinlogPosition, end: BinlogPosition,
            tables: set[tuple[str, str]] | None = None) -> Iterator[RowChange]:
    """:func:`read_changes` from the source ``opener`` opens."""
    capture = TableFilter(lambda db, table: (db, table) in tables) if tables is not None else None
    loop = EventLoop(opener, start, end=end, decoder=RowDecoder(), capture=capture, unread_commit=_outside_window)
    layouts: dict[int, TableLayout] = {}
    for record in loop.records():
        kind = type(record)
        if kind is RowsEvent:
            yield from _row_changes(record, layouts[record.layout])
        elif kind is TableLayout:
            layouts[record.id] = record
        elif kind is PreparedCommit:
            for ev in record.events:
                yield from _row_changes(ev, layouts[ev.layout])


def _outside_window(xid: str, end: TransactionEnd, loop: EventLoop) -> list:
    raise XaOutsideWindow(f"XA COMMIT {xid} at {end.position}: prepared before {loop.start}")


def _row_changes(ev: RowsEvent, layout: TableLayout) -> Iterator[RowChange]:
    if ev.partial:
        raise PartialRowImage(f"the row event of {ev.table} ending at {ev.position} leaves columns out "
                              "(binlog_row_image was not FULL in its session)")
    db, table = layout.schema.database, layout.schema.table
    names = tuple(c.name for c in layout.schema.columns)
    op, at = ev.op, ev.position
    for i, row in enumerate(ev.rows):
        if op == Op.UPDATE:
            yield RowChange(db, table, op, dict(zip(names, row[0])), dict(zip(names, row[1])), at, i)
        elif op == Op.INSERT:
            yield RowChange(db, table, op, None, dict(zip(names, row)), at, i)
        else:
            yield RowChange(db, table, op, dict(zip(names, row)), None, at, i)


def read_statements(conn: ConnectionSettings, server_id: int, start: BinlogPosition,
                    end: BinlogPosition) -> Iterator[Statement]:
    """Statements other than BEGIN/COMMIT and XA's (DDL, TRUNCATE) in (start, end], read from the
    server; row events are not decoded, so this is cheap next to reading the changes."""
    return statements(server_source(conn, server_id), start, end)


def statements(opener: Opener, start: BinlogPosition, end: BinlogPosition) -> Iterator[Statement]:
    """:func:`read_statements` from the source ``opener`` opens."""
    for record in EventLoop(opener, start, end=end).records():
        if type(record) is Statement:
            yield record
