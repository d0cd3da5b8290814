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
  MariaDB compressed columns, old-format TIME): cdc_core/binlog/columns.py corrects the
  library around it, prepared on each event before its rows are read.
- A table map whose every column has a simple binlog format is decoded by
  cdc_core/binlog/row_images.py instead of the library, into the very same values (a fraction of
  the library's CPU: the reader's largest cost); any other, by the library.
- Columns ``keep`` rejects (``source.exclude_columns``) are in neither the layout nor the
  value tuples.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cdc_core.binlog import columns as binlog_columns
from cdc_core.binlog.events import Op, TableLayout
from cdc_core.binlog.row_images import RowImages, column_key, compile_images
from cdc_core.schema.table import Column, TableSchema

log = logging.getLogger(__name__)

ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)


def partial_image(event) -> bool:
    """Whether a row event's images leave columns out (a session's ``binlog_row_image`` other
    than FULL, although the server's is FULL): its values cannot be applied as rows."""
    n = event.number_of_columns
    full = bytes([0xFF] * (n // 8) + ([(1 << (n % 8)) - 1] if n % 8 else []))
    maps = [event.columns_present_bitmap] + [getattr(event, "columns_present_bitmap2", full)]
    return any(bytes(m) != full for m in maps)


OPS = {WriteRowsEvent: Op.INSERT, UpdateRowsEvent: Op.UPDATE, DeleteRowsEvent: Op.DELETE}


# --- table map → columns -------------------------------------------------------------------

_INTS = {FIELD_TYPE.TINY: "tinyint", FIELD_TYPE.SHORT: "smallint", FIELD_TYPE.INT24: "mediumint",
         FIELD_TYPE.LONG: "int", FIELD_TYPE.LONGLONG: "bigint"}
_TEMPORAL = {FIELD_TYPE.DATETIME2: "datetime", FIELD_TYPE.DATETIME: "datetime", FIELD_TYPE.TIMESTAMP2: "timestamp",
             FIELD_TYPE.TIMESTAMP: "timestamp", FIELD_TYPE.TIME2: "time", FIELD_TYPE.TIME: "time"}
_BLOBS = {1: "tiny", 2: "", 3: "medium", 4: "long"}


def _quoted(members) -> str:
    return ",".join("'" + m.replace("'", "''") + "'" for m in members)


def table_map_column(col) -> Column:
    """A python-mysql-replication table-map column as ``describe_table`` would describe it.
    Nullability is not in the table map's column list: columns are reported nullable."""
    t = getattr(col, "binlake_type", col.type)  # as the table map declares it (binlog_columns may re-type)
    binary = getattr(col, "collation_name", None) == "binary"
    collation = None if binary else getattr(col, "collation_name", None)
    if t in _INTS:
        name = _INTS[t]
        return Column(col.name, name, name + (" unsigned" if col.unsigned else ""))
    if t in (FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DECIMAL):
        p, s = getattr(col, "precision", 10), getattr(col, "decimals", 0)
        return Column(col.name, "decimal", f"decimal({p},{s})" + (" unsigned" if col.unsigned else ""),
                      precision=p, scale=s)
    if t in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
        name = "float" if t == FIELD_TYPE.FLOAT else "double"
        return Column(col.name, name, name + (" unsigned" if col.unsigned else ""))
    if t in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        return Column(col.name, "date", "date")
    if t in _TEMPORAL:
        fsp = getattr(col, "fsp", 0) or 0
        name = _TEMPORAL[t]
        return Column(col.name, name, name + (f"({fsp})" if fsp else ""), datetime_precision=fsp)
    if t == FIELD_TYPE.YEAR:
        return Column(col.name, "year", "year(4)")
    if t == FIELD_TYPE.BIT:
        return Column(col.name, "bit", f"bit({col.bits})", precision=col.bits)
    if t in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
        name = "enum" if t == FIELD_TYPE.ENUM else "set"
        members = (col.enum_values or [""])[1:] if t == FIELD_TYPE.ENUM else (col.set_values or [])
        return Column(col.name, name, f"{name}({_quoted(members)})", collation=collation)
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
        n = getattr(col, "max_length", 0)
        return (Column(col.name, "varbinary", f"varbinary({n})", char_length=n) if binary
                else Column(col.name, "varchar", "varchar", collation=collation))
    if t == FIELD_TYPE.STRING:
        n = getattr(col, "max_length", 0)
        return (Column(col.name, "binary", f"binary({n})", char_length=n) if binary
                else Column(col.name, "char", "char", collation=collation))
    if t in (FIELD_TYPE.BLOB, FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB):
        size = _BLOBS.get(getattr(col, "length_size", 2), "")
        name = f"{size}blob" if binary else f"{size}text"
        return Column(col.name, name, name, collation=collation)
    if t == FIELD_TYPE.JSON:
        return Column(col.name, "json", "json")
    if t == FIELD_TYPE.GEOMETRY:
        return Column(col.name, "geometry", "geometry")
    return Column(col.name, f"binlog type {t}", f"binlog type {t}")


def layout_schema(table, keep: Callable[[str, str], bool] | None = None) -> TableSchema:
    """The schema a python-mysql-replication table map (``Table``) describes, without the
    columns ``keep("db.table", column)`` rejects."""
    name = f"{table.schema}.{table.table}"
    kept = [c for c in table.columns if keep is None or keep(name, c.name)]
    pk = tuple(c.name for c in kept if c.is_primary)
    return TableSchema(table.schema, table.table, tuple(table_map_column(c) for c in kept), pk)


# --- row events → value tuples -----------------------------------------------------------------

_US = dt.timedelta(microseconds=1)


def _fix_set(values: dict, none_sources: dict, name: str) -> None:
    """The empty SET comes back as None (none source "empty set"): it is ''."""
    if values[name] is None and none_sources.get(name) == NONE_SOURCE.EMPTY_SET:
        values[name] = ""


def _fix_time(values: dict, none_sources: dict, name: str) -> None:
    """A negative TIME with a fraction is stored as the two's complement of the whole packed
    value, but the decoder complements seconds and fraction apart, giving -(s + 1 - f) for -(s + f)."""
    v = values[name]
    if v is not None and v < dt.timedelta(0):
        us = -(v // _US)
        frac = us % 1_000_000
        if frac:
            values[name] = -_US * (us + 1_000_000 - 2 * frac)


_FIXES = {FIELD_TYPE.SET: _fix_set, FIELD_TYPE.TIME2: _fix_time}


@dataclass(frozen=True)
class _Decoding:
    layout: TableLayout
    names: tuple[str, ...]
    fixes: tuple  # (fix function, column name) for the columns the decoder gets wrong
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
        fixes = tuple((_FIXES[c.type], c.name) for c in table.columns if c.type in _FIXES and c.name in names)
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
