"""The one binlog decoder: python-mysql-replication's row events turned into value
tuples in the column order of their table map, with the table map's own description
of the columns (``TableLayout``). Every reader that decodes rows does so through
``RowDecoder``, inside the event loop (cdc_core/binlog/event_loop.py).

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
- With ``packed`` (the stream's reader process), such a table map's rows are handed out undecoded
  (``PackedRows``): they unpickle into the same value tuples in the process that takes them.
- Columns ``keep`` rejects (``source.exclude_columns``) are in neither the layout nor the
  value tuples.
- A MySQL partial JSON update (PARTIAL_UPDATE_ROWS) is an update whose after images binlake
  completes by applying its JSON diffs to the before images (cdc_core/binlog/json_diff.py); one it
  cannot complete raises ``DiffError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pymysqlreplication.row_event import DeleteRowsEvent, PartialUpdateRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_core.binlog import columns as binlog_columns
from cdc_core.binlog.events import Op, TableLayout
from cdc_core.binlog.json_diff import partial_rows
from cdc_core.binlog.row_images import PackedRows, RowImages, column_key, compile_images
from cdc_core.schema.table import Column, TableSchema
from cdc_core.types.registry import table_map_codec

log = logging.getLogger(__name__)

ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent)


def partial_image(event) -> bool:
    """Whether a row event's images leave columns out (a session's ``binlog_row_image`` other
    than FULL, although the server's is FULL): its values cannot be applied as rows. Only the
    bits of the columns count: MySQL sets the unused bits of a bitmap's last byte, MariaDB
    clears them."""
    maps = (event.columns_present_bitmap, getattr(event, "columns_present_bitmap2", None))
    return any(not full_bitmap(m, event.number_of_columns) for m in maps if m is not None)


def full_bitmap(bitmap: bytes, columns: int) -> bool:
    """Whether a column bitmap names each of ``columns`` columns (whatever its unused bits)."""
    mask = (1 << columns) - 1
    return int.from_bytes(bitmap, "little") & mask == mask


OPS = {WriteRowsEvent: Op.INSERT, UpdateRowsEvent: Op.UPDATE, DeleteRowsEvent: Op.DELETE,
       PartialUpdateRowsEvent: Op.UPDATE}


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
    count up from ``first_id`` (decoders of one stream get disjoint id ranges). With ``packed``, rows
    row_images.py decodes are left for the process that unpickles them (``PackedRows``)."""

    def __init__(self, keep: Callable[[str, str], bool] | None = None, first_id: int = 1,
                 packed: bool = False) -> None:
        self._keep = keep
        self._packed = packed
        self._by_map: dict[tuple, _Decoding] = {}  # (table id, column_key of each column) -> decoding
        # table id -> (the table map's Table, its decoding, its columns' corrections): the row events
        # after one table map share its Table, so only the first of them computes the key above
        self._by_table: dict[int, tuple[object, _Decoding, list]] = {}
        self._last: dict[str, TableLayout] = {}  # "db.table" -> the layout last reported
        self._next_id = first_id - 1  # the ids this decoder hands out: first_id, first_id + 1, ...

    def reset(self) -> None:
        """Forget cached table maps (table ids are reused after a reconnect or a server restart)."""
        self._by_map.clear()
        self._by_table.clear()

    def decoding(self, event) -> tuple[_Decoding, bool]:
        """The decoding of ``event``'s table map, and whether its layout is new for the table."""
        table = event.table_map[event.table_id]
        same = self._by_table.get(event.table_id)
        if same is not None and same[0] is table:
            event.binlake_decoders = same[2]  # what prepare() would set: the columns are prepared
            return same[1], False
        binlog_columns.prepare(event)
        # Every attribute the decoding reads: a table id reused for changed columns decodes with them.
        key = (event.table_id, tuple(map(column_key, table.columns)))
        hit = self._by_map.get(key)
        if hit is not None:
            self._by_table[event.table_id] = (table, hit, event.binlake_decoders)
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
        images = compile_images(table.columns, None if len(kept) == len(table.columns) else kept, key[1])
        d = self._by_map[key] = _Decoding(last, names, fixes, images)
        self._by_table[event.table_id] = (table, d, event.binlake_decoders)
        return d, new

    def rows(self, event, d: _Decoding) -> list | PackedRows:
        """The event's rows as value tuples in layout order (updates: (before, after) pairs), or
        packed (see the class doc); :meth:`decoding` prepared the event."""
        if d.images is not None and d.images.applies(event):
            return d.images.packed(event) if self._packed else d.images.rows(event)
        names, fixes = d.names, d.fixes

        def image(values: dict, none_sources: dict) -> tuple:
            binlog_columns.decode_values(event, values)
            for fix, name in fixes:
                fix(values, none_sources, name)
            return tuple(values[n] for n in names)

        if isinstance(event, UpdateRowsEvent):
            # a partial JSON update's rows: binlake applies its JSON diffs (cdc_core/binlog/json_diff.py)
            source = partial_rows(event) if type(event) is PartialUpdateRowsEvent else event.rows
            return [(image(r["before_values"], r["before_none_sources"]),
                     image(r["after_values"], r["after_none_sources"])) for r in source]
        return [image(r["values"], r["none_sources"]) for r in event.rows]
