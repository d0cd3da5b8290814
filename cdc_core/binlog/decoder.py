"""The one binlog decoder: python-mysql-replication's row events turned into value
tuples in the column order of their table map, with the table map's own description
of the columns (``TableLayout``). The stream's reader process and the snapshot's
chunk reader both decode through ``RowDecoder``.

Invariants (tests/test_binlog_decoder.py, tests/test_types.py):
- Reading starts at a transaction boundary (a SHOW MASTER STATUS position or a
  committed offset), so every row event is preceded by its table map.
- Column names and types come from the row event's own table map
  (binlog_row_metadata=FULL), never from the live information_schema: a row written
  before a DDL is decoded with the columns it was written with, however late it is read.
- ``layout_schema`` describes a table map's columns as ``describe_table`` describes
  information_schema's (data_type, column_type, precision, scale, fsp, BINARY length,
  ENUM/SET members, signedness, primary key); types the binlog stores alike
  (MariaDB's INET6/UUID as BINARY(16), JSON as LONGTEXT) are refined by the schema
  history (cdc_core/schema/history.py).
- A layout is reported once per change: the decoder hands out a new ``TableLayout``
  only when a table's table map differs from the last one it reported for that table.
- Values are decoded as the server stores them (character sets, ENUM/SET members,
  MariaDB compressed columns, old-format TIME, the empty SET, negative TIME fractions): each
  column's codec (cdc_core/types/<family>.py) corrects the library around it, prepared by
  cdc_core/binlog/columns.py on each event before its rows are read.
- A table map whose every column has a simple binlog format is decoded by
  cdc_core/binlog/row_images.py instead of the library, into the very same values (a fraction of
  the library's CPU: the reader's largest cost); any other, by the library.
- Columns ``keep`` rejects (``source.exclude_columns``) are in neither the layout nor the
  value tuples.
- ``read_changes`` stops at the first event whose end position is at or past ``end``;
  as ``end`` is itself a transaction boundary, no transaction is cut in half.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    MariadbBinLogCheckPointEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    StopEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_core.binlog import columns as binlog_columns
from cdc_core.binlog.events import Op, Statement, TableLayout
from cdc_core.binlog.row_images import RowImages, column_key, compile_images
from cdc_core.binlog.xa import FL_PREPARED_XA, XaHold, XaOutsideWindow, XaVerb, xa_statement
from cdc_core.errors import TerminalError
from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.table import Column, TableSchema
from cdc_core.source.connection import ConnectionSettings
from cdc_core.types.registry import table_map_codec

log = logging.getLogger(__name__)

ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
# MariaDB's compressed events (log_bin_compress=ON): QUERY_COMPRESSED and the compressed
# WRITE/UPDATE/DELETE_ROWS, v1 and v2. python-mysql-replication does not decode them, and a
# reader that skipped them would lose their rows: reading stops at the first one instead.
COMPRESSED_EVENTS = frozenset(range(0xA5, 0xAC))


class CompressedBinlog(TerminalError):
    """The binlog holds an event MariaDB compressed (log_bin_compress=ON)."""


class PartialRowImage(Exception):
    """A row event whose images leave columns out (its session's binlog_row_image was MINIMAL
    or NOBLOB): its rows cannot be known from the binlog (a chunk's window is read again)."""


def partial_image(event) -> bool:
    """Whether a row event's images leave columns out (a session's ``binlog_row_image`` other
    than FULL, although the server's is FULL): its values cannot be applied as rows."""
    n = event.number_of_columns
    full = bytes([0xFF] * (n // 8) + ([(1 << (n % 8)) - 1] if n % 8 else []))
    maps = [event.columns_present_bitmap] + [getattr(event, "columns_present_bitmap2", full)]
    return any(bytes(m) != full for m in maps)


def refuse_compressed(event, at: BinlogPosition) -> None:
    """Raise :class:`CompressedBinlog` for a compressed event (see ``COMPRESSED_EVENTS``)."""
    if isinstance(event, NotImplementedEvent) and event.event_type in COMPRESSED_EVENTS:
        raise CompressedBinlog(f"the binlog event ending at {at} is compressed (the server's log_bin_compress was ON "
                               "when it was written), which binlake cannot decode: SET GLOBAL log_bin_compress = OFF, "
                               "then backfill the tables written while it was on (binlake backfill --table)")
OPS = {WriteRowsEvent: Op.INSERT, UpdateRowsEvent: Op.UPDATE, DeleteRowsEvent: Op.DELETE}


# Every kind of event a binlog end (SHOW MASTER STATUS) can come right after: a transaction's
# end, a statement, and the events a server writes between transactions (a new file's
# header, a binlog checkpoint, a shutdown). A reader that filters events must still see these,
# or one stopping at an end position that follows them would wait for the next event forever
# (found with a server restarted mid-snapshot: tests/test_snapshot_faults.py).
END_MARKERS = (XidEvent, QueryEvent, RotateEvent, FormatDescriptionEvent, MariadbGtidListEvent,
               MariadbBinLogCheckPointEvent, StopEvent)


def open_binlog(conn: ConnectionSettings, server_id: int, start: BinlogPosition, **options) -> BinLogStreamReader:
    """A blocking replication reader from ``start`` (a transaction boundary); the
    callers stop it themselves at their end position. ``only_events`` always includes
    END_MARKERS, so every end position is seen."""
    if options.get("only_events") is not None:
        options["only_events"] = list(dict.fromkeys([*options["only_events"], *END_MARKERS]))
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


# --- table map → columns -------------------------------------------------------------------

def table_map_column(col) -> Column:
    """A python-mysql-replication table-map column as ``describe_table`` would describe it
    (its codec's ``table_map_column``). Nullability is not in the table map's column list:
    columns are reported nullable."""
    name = getattr(col, "collation_name", None)
    return table_map_codec(col).table_map_column(col, None if name == "binary" else name)


def layout_schema(table, keep: Callable[[str, str], bool] | None = None) -> TableSchema:
    """The schema a python-mysql-replication table map (``Table``) describes, without the
    columns ``keep("db.table", column)`` rejects."""
    name = f"{table.schema}.{table.table}"
    kept = [c for c in table.columns if keep is None or keep(name, c.name)]
    pk = tuple(c.name for c in kept if c.is_primary)
    return TableSchema(table.schema, table.table, tuple(table_map_column(c) for c in kept), pk)


# --- row events → value tuples -----------------------------------------------------------------

@dataclass(frozen=True)
class _Decoding:
    layout: TableLayout
    names: tuple[str, ...]
    fixes: tuple  # (fix function, column name) for the columns the decoder gets wrong (their codecs' library_fix)
    images: RowImages | None  # binlake's own decoding of the rows, when every column allows it


class RowDecoder:
    """Decodes row events into value tuples and reports each table's layout once per change;
    ``keep("db.table", column)`` says which columns are captured (all when None). Layout ids
    count up from ``first_id`` (decoders of one stream get disjoint id ranges)."""

    def __init__(self, keep: Callable[[str, str], bool] | None = None, first_id: int = 1) -> None:
        self._keep = keep
        self._by_map: dict[tuple, _Decoding] = {}  # (table id, column_key of each column) -> decoding
        self._last: dict[str, TableLayout] = {}  # "db.table" -> the layout last reported
        self._next_id = first_id - 1  # the ids this decoder hands out: first_id, first_id + 1, ...

    def reset(self) -> None:
        """Forget cached table maps (table ids are reused after a reconnect or a server restart)."""
        self._by_map.clear()

    def decoding(self, event) -> tuple[_Decoding, bool]:
        """The decoding of ``event``'s table map, and whether its layout is new for the table."""
        binlog_columns.prepare(event)
        table = event.table_map[event.table_id]
        # Every attribute the decoding reads: a table id reused for changed columns decodes with them.
        key = (event.table_id, tuple(map(column_key, table.columns)))
        hit = self._by_map.get(key)
        if hit is not None:
            return hit, False
        schema = layout_schema(table, self._keep)
        last = self._last.get(schema.qualified_name)
        new = last is None or last.schema != schema
        if new:
            self._next_id += 1
            last = self._last[schema.qualified_name] = TableLayout(self._next_id, schema)
        names = tuple(c.name for c in schema.columns)
        fixes = tuple((fix, c.name) for c in table.columns
                      if c.name in names and (fix := table_map_codec(c).library_fix(c)) is not None)
        kept = tuple(i for i, c in enumerate(table.columns) if c.name in names)
        images = compile_images(table.columns, None if len(kept) == len(table.columns) else kept)
        d = self._by_map[key] = _Decoding(last, names, fixes, images)
        return d, new

    @staticmethod
    def rows(event, d: _Decoding) -> list:
        """The event's rows as value tuples in layout order (updates: (before, after) pairs);
        :meth:`decoding` prepared the event."""
        if d.images is not None and d.images.applies(event):
            return d.images.rows(event)
        names, fixes = d.names, d.fixes

        def image(values: dict, none_sources: dict) -> tuple:
            binlog_columns.decode_values(event, values)
            for fix, name in fixes:
                fix(values, none_sources, name)
            return tuple(values[n] for n in names)

        if isinstance(event, UpdateRowsEvent):
            return [(image(r["before_values"], r["before_none_sources"]),
                     image(r["after_values"], r["after_none_sources"])) for r in event.rows]
        return [image(r["values"], r["none_sources"]) for r in event.rows]


# --- the chunk reader's window ------------------------------------------------------------------


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
    decoder, xa = RowDecoder(), XaHold()
    try:
        for event in reader:
            pos = start.at(reader.log_file, reader.log_pos)
            if isinstance(event, RotateEvent):
                decoder.reset()
            elif isinstance(event, ROW_EVENTS) and (tables is None or (event.schema, event.table) in tables):
                if partial_image(event):
                    raise PartialRowImage(f"the row event of {event.schema}.{event.table} ending at {pos} leaves "
                                          "columns out (binlog_row_image was not FULL in its session)")
                d, _ = decoder.decoding(event)
                if xa.holding:  # an XA transaction's rows: changes only once committed (cdc_core/binlog/xa.py)
                    for change in _changes(event, d, pos):
                        xa.hold(change)
                else:
                    yield from _changes(event, d, pos)
            elif isinstance(event, MariadbGtidEvent) and event.flags & FL_PREPARED_XA:
                xa.start()
            elif isinstance(event, XAPrepareEvent):
                xa.prepared()
            elif isinstance(event, QueryEvent) and (statement := xa_statement(statement_text(event)[1])):
                yield from _xa_outcome(xa, statement, pos, start)
            else:
                refuse_compressed(event, pos)
            if pos >= end:
                break
    finally:
        reader.close()


def _xa_outcome(xa: XaHold, statement, pos: BinlogPosition, start: BinlogPosition) -> Iterator[RowChange]:
    """``read_changes`` at an XA statement: a group's start and xid, or its outcome: the held
    changes of a commit, at the commit's position; a commit whose XA PREPARE is before
    ``start`` is :class:`XaOutsideWindow` (its rows are not here)."""
    if statement.verb == XaVerb.START:
        xa.start()
    elif statement.verb == XaVerb.END:
        xa.end(statement.xid)
    else:
        held = xa.outcome(statement.xid)
        if statement.verb == XaVerb.COMMIT:
            if held is None:
                raise XaOutsideWindow(f"XA COMMIT {statement.xid} at {pos}: prepared before {start}")
            yield from (dataclasses.replace(change, position=pos) for change in held)


def _changes(event, d: _Decoding, pos: BinlogPosition) -> Iterator[RowChange]:
    op, names = OPS[type(event)], d.names
    for i, row in enumerate(RowDecoder.rows(event, d)):
        if op == Op.UPDATE:
            yield RowChange(event.schema, event.table, op, dict(zip(names, row[0])), dict(zip(names, row[1])), pos, i)
        elif op == Op.INSERT:
            yield RowChange(event.schema, event.table, op, None, dict(zip(names, row)), pos, i)
        else:
            yield RowChange(event.schema, event.table, op, dict(zip(names, row)), None, pos, i)


def statement_text(event: QueryEvent) -> tuple[str, str]:
    """A QueryEvent's (default database, SQL text)."""
    sql = event.query if isinstance(event.query, str) else event.query.decode("utf-8", "replace")
    db = event.schema if isinstance(event.schema, str) else event.schema.decode("utf-8", "replace")
    return db, sql


def is_transaction_statement(sql: str) -> bool:
    """BEGIN / COMMIT: transaction bounds, not statements of their own."""
    head = sql.lstrip()[:8].upper()
    return head.startswith("BEGIN") or head.startswith("COMMIT")


def read_statements(conn: ConnectionSettings, server_id: int, start: BinlogPosition,
                    end: BinlogPosition) -> Iterator[Statement]:
    """Statements other than BEGIN/COMMIT and XA's (DDL, TRUNCATE) in (start, end]; row events
    are skipped undecoded, so this is cheap next to reading the changes."""
    if end <= start:
        return
    reader = open_binlog(conn, server_id, start, only_events=[QueryEvent, XidEvent, RotateEvent])
    try:
        for event in reader:
            pos = start.at(reader.log_file, reader.log_pos)
            if isinstance(event, QueryEvent):
                db, sql = statement_text(event)
                if not is_transaction_statement(sql) and xa_statement(sql) is None:
                    yield Statement(db, sql, pos, None, event.timestamp)
            if pos >= end:
                break
    finally:
        reader.close()
