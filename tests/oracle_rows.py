"""Test oracle: a Delta table equals its MySQL source table, row by row and type by type.

Independent of the code under test: nothing of binlake is imported here (tests/test_oracle.py
parses this module's imports to keep it so), so a mapping bug that the stream and a
comparison built from binlake's own codecs would share cannot hide.

- MySQL's side: the column list from information_schema.COLUMNS, the key from its PRIMARY
  index, and every value as the server's own text over the text protocol (pymysql with no
  decoders: each value arrives as the server printed it) — binary values through ``HEX()``,
  BIT through ``HEX()``, FLOAT through ``CAST(… AS DOUBLE)`` (its text has six digits, not
  the stored bits), spatial values through ``ST_AsBinary``/``ST_SRID`` (an empty stored value, which
  ``ST_AsBinary`` makes NULL, by ``LENGTH``), YEAR(2) through
  ``YEAR()``, temporal values in a UTC session — parsed here into Python values by the rules
  docs/type-mapping.md states (a zero or impossible date is null, TIME is signed
  microseconds, the ZEROFILL padding is display only).
- Delta's side: read by a second reader, not delta-rs which wrote it: DuckDB's delta
  extension (delta-kernel-rs under DuckDB's own Parquet reader) for a table on a local
  path; an object-store table (``s3://…``) through the ``deltalake`` package's reader.
- Types: each compared column's Arrow type as the reader returns it is the type
  docs/type-mapping.md maps the MySQL column to, parsed from the document
  (tests/oracle_types.py), DECIMAL precision and scale included; where a schema change or a
  route widened a column (``widened=True``) a type holding every value of it; the reserved
  columns ``_cdc_op`` and ``_cdc_seq`` (``_cdc_source`` in a route's sink) have their
  documented types, and ``_cdc_op`` is never a delete (deleted rows are deleted).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
from pymysql.converters import conversions

from tests.oracle_types import (
    ServerColumn,
    delta_arrow,
    documented_type,
    holds,
    reserved_columns,
    same_type,
)

_INTEGERS = {"tinyint", "smallint", "mediumint", "int", "bigint", "year"}
_TEXTS = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json", "inet4", "inet6",
          "uuid"}
_BINARIES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_SPATIAL = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
            "geometrycollection", "geomcollection"}
_DATETIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")
_TIME = re.compile(r"^(-?)(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")
_OPS = {"r", "c", "u"}  # _cdc_op of a row Delta holds: a snapshot read, an insert or an update
# Encoders only: pymysql turns no column value into a Python type, so each is the server's text.
_TEXT_ONLY = {k: v for k, v in conversions.items() if not isinstance(k, int)}


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class DeltaSide:
    """Where a table's rows are in Delta: the table's URI and storage options, and for a
    route's sink the ``db.table`` of the source whose rows are compared (``_cdc_source``)."""

    uri: str
    storage_options: dict[str, str] | None = None
    source: str | None = None
    # The table's mode (docs/history.md): a soft_delete table's live rows are those whose
    # _cdc_deleted is not true, a history table's those whose _is_current is.
    mode: str = "current"


@dataclass
class TableDiff:
    """What the oracle found for one table; ``equal`` when it found nothing."""

    table: str
    mysql_rows: int = 0
    delta_rows: int = 0
    reader: str = ""
    missing: list = field(default_factory=list)  # keys in MySQL, not in Delta
    extra: list = field(default_factory=list)  # keys in Delta, not in MySQL
    different: list = field(default_factory=list)  # (key, column, MySQL value, Delta value)
    problems: list[str] = field(default_factory=list)  # types, reserved columns, deleted rows kept

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.different or self.problems) and (
            self.mysql_rows == self.delta_rows)

    def describe(self, limit: int = 5) -> str:
        if self.equal:
            return f"{self.table}: {self.mysql_rows} rows equal ({self.reader})"
        return (f"{self.table} ({self.reader}): MySQL {self.mysql_rows} rows, Delta {self.delta_rows}; "
                f"missing {self.missing[:limit]}, extra {self.extra[:limit]}, different {self.different[:limit]}"
                + "".join(f"; {p}" for p in self.problems[:limit]))


# --- MySQL: the server's text --------------------------------------------------------------


def server_connection(**kwargs) -> pymysql.connections.Connection:
    """A connection that returns every value as the server's text, in a UTC session.
    ``kwargs``: pymysql's (host, port, user, password, ssl…)."""
    return pymysql.connect(**kwargs, charset="utf8mb4", autocommit=True, conv=_TEXT_ONLY,
                           init_command="SET time_zone = '+00:00'")


def server_columns(cur, database: str, table: str,
                   excluded: Callable[[str], bool] = lambda _: False) -> list[ServerColumn]:
    """The table's columns from information_schema, in order, but those ``excluded`` names
    (``db.table.column``) leaves out."""
    cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (database, table))
    cols = [ServerColumn(n, t.lower(), ct) for n, t, ct in cur.fetchall()]
    if not cols:
        raise LookupError(f"{database}.{table}: no such table on the server")
    return [c for c in cols if not excluded(f"{database}.{table}.{c.name}")]


def primary_key(cur, database: str, table: str) -> list[str]:
    cur.execute("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX", (database, table))
    return [r[0] for r in cur.fetchall()]


def _select(col: ServerColumn) -> list[str]:
    """What the SELECT reads of ``col``: the expressions whose text :func:`_value` parses."""
    q = _quote(col.name)
    if col.data_type in _SPATIAL:
        # LENGTH: an empty stored value (a NOT NULL column's implicit value in a non-strict
        # insert) is no geometry, so ST_AsBinary gives NULL for it
        return [f"HEX(ST_AsBinary({q}))", f"ST_SRID({q})", f"LENGTH({q})"]
    if col.data_type in _BINARIES or col.data_type == "bit":
        return [f"HEX({q})"]
    if col.data_type == "float":
        return [f"CAST({q} AS DOUBLE)"]
    if col.data_type == "year" and col.args == ("2",):
        return [f"YEAR({q})"]  # YEAR(2) prints two digits; the server stores the four-digit year
    return [q]


def _datetime(text: str, tz: dt.tzinfo | None = None) -> dt.datetime | None:
    m = _DATETIME.match(text)
    if not m:
        raise ValueError(f"not a DATETIME text: {text!r}")
    try:
        return dt.datetime(*map(int, m.groups()[:6]), int((m[7] or "").ljust(6, "0")), tzinfo=tz)
    except ValueError:  # year, month or day zero, or past the month's end
        return None


def _date(text: str) -> dt.date | None:
    parsed = _datetime(text + " 00:00:00")
    return None if parsed is None else parsed.date()


def _time(text: str) -> int:
    m = _TIME.match(text)
    if not m:
        raise ValueError(f"not a TIME text: {text!r}")
    us = (int(m[2]) * 3600 + int(m[3]) * 60 + int(m[4])) * 1_000_000 + int((m[5] or "").ljust(6, "0"))
    return -us if m[1] else us


def _value(col: ServerColumn, documented: str, texts: list):
    """The Python value of ``col`` from the server's text of :func:`_select`'s expressions:
    what Delta holds for it (docs/type-mapping.md)."""
    text = texts[0]
    t = col.data_type
    if t in _SPATIAL and texts[2] == "0":
        return b"", 0  # empty as stored, not null: the column holds a value
    if text is None:
        return None
    if t in _INTEGERS:
        return int(text)
    if t == "decimal":
        plain = re.sub(r"^0+(?=\d)", "", text)  # ZEROFILL pads the text only
        return plain if documented == "string" else Decimal(plain)
    if t in ("float", "double"):
        return float(text)
    if t == "bit":
        bits = int(text, 16)
        return bool(bits) if documented == "boolean" else bits.to_bytes((int(col.args[0]) + 7) // 8, "big")
    if t == "date":
        return _date(text)
    if t in ("datetime", "timestamp"):
        return _datetime(text, dt.UTC if t == "timestamp" else None)
    if t == "time":
        return _time(text)
    if t in _BINARIES:
        return bytes.fromhex(text)
    if t in _SPATIAL:
        return bytes.fromhex(text), int(texts[1])
    if t in _TEXTS:
        if not isinstance(text, str):
            raise TypeError(f"column {col.name} ({col.column_type}): the server sent bytes, not text")
        return text
    raise ValueError(f"the oracle does not read type {col.column_type!r} (column {col.name})")


def server_rows(cur, database: str, table: str, columns: list[ServerColumn], documented: list[str]) -> list[tuple]:
    """Every row of the table, each value from the server's text (:func:`_value`)."""
    exprs = [_select(c) for c in columns]
    cur.execute(f"SELECT {', '.join(e for es in exprs for e in es)} FROM {_quote(database)}.{_quote(table)}")
    rows = []
    for raw in cur.fetchall():
        values, i = [], 0
        for col, es, doc in zip(columns, exprs, documented):
            values.append(_value(col, doc, list(raw[i:i + len(es)])))
            i += len(es)
        rows.append(tuple(values))
    return rows


# --- Delta: a second reader ----------------------------------------------------------------


@cache
def _delta_extension() -> str:
    """The delta extension file the duckdb-ext-delta package ships for the duckdb installed."""
    import duckdb
    import duckdb_ext  # a namespace package: the extension files of the duckdb-ext-* packages

    found = [p for root in duckdb_ext.__path__
             for p in Path(root).glob(f"extensions/v{duckdb.__version__}/*/delta.duckdb_extension")]
    if not found:
        raise RuntimeError(f"no DuckDB delta extension for duckdb {duckdb.__version__}: "
                           "pip install the dev extras (duckdb-ext-delta)")
    return str(found[0])


def read_duckdb(uri: str) -> pa.Table:
    """The Delta table at local ``uri`` as DuckDB's delta extension reads it."""
    import duckdb

    path = uri.removeprefix("file://")
    with duckdb.connect(config={"allow_unsigned_extensions": "true"}) as con:
        con.execute(f"LOAD '{_delta_extension()}'")
        return con.execute("SELECT * FROM delta_scan(?)", [path]).fetch_arrow_table()


def read_deltalake(uri: str, storage_options: dict[str, str] | None) -> pa.Table:
    """The Delta table at ``uri`` as the deltalake package reads it (object stores)."""
    from deltalake import DeltaTable

    return DeltaTable(uri, storage_options=storage_options or None).to_pyarrow_table()


def read_delta(side: DeltaSide) -> tuple[pa.Table, str]:
    """The Delta table's rows and the name of the reader that read them: DuckDB for a local
    path, deltalake for an object store (DuckDB would need its httpfs extension and secrets)
    and for a local path DuckDB's delta extension mishandles (folder names with quotes, ``?`` or
    bytes it does not decode: tests/test_identifiers.py's tables; a file truly missing fails
    deltalake's read too)."""
    if "://" not in side.uri or side.uri.startswith("file://"):
        if not Path(side.uri.removeprefix("file://"), "_delta_log").is_dir():
            raise LookupError(f"no Delta table at {side.uri}")
        import duckdb

        try:
            return read_duckdb(side.uri), "duckdb"
        except (UnicodeDecodeError, duckdb.IOException) as e:
            return read_deltalake(side.uri, side.storage_options), f"deltalake (duckdb: {type(e).__name__})"
    return read_deltalake(side.uri, side.storage_options), "deltalake"


def _delta_value(v):
    return (v["wkb"], v["srid"]) if isinstance(v, dict) and v.keys() == {"wkb", "srid"} else v


# --- the comparison ------------------------------------------------------------------------


def _check_types(columns, documented, delta: pa.Table, names: dict[str, str], routed: bool, widened: bool,
                 problems: list[str]) -> None:
    for col, doc in zip(columns, documented):
        if col.name.lower() not in names:
            problems.append(f"column {col.name} is not in Delta")
            continue
        actual = delta.schema.field(names[col.name.lower()]).type
        if not (holds if widened else same_type)(delta_arrow(doc), actual):
            problems.append(f"column {col.name} ({col.column_type}) is {actual} in Delta, documented {doc}"
                            + (" (or a type holding it)" if widened else ""))
    for name, doc in reserved_columns().items():
        if name == "_cdc_source" and not routed:
            continue
        if name not in names:
            problems.append(f"reserved column {name} is not in Delta")
        elif not same_type(delta_arrow(doc), delta.schema.field(names[name]).type):
            problems.append(f"reserved column {name} is {delta.schema.field(names[name]).type}, documented {doc}")


def compare_table(server: dict, table: str, side: DeltaSide, *, excluded: Callable[[str], bool] = lambda _: False,
                  widened: bool = False) -> TableDiff:
    """Compare MySQL's ``table`` ("db.table", reached with pymysql's ``server`` arguments)
    with its Delta rows, keyed by primary key (the whole row without one), on MySQL's columns
    but those ``excluded``; ``widened``: a column's Delta type may hold more than documented."""
    database, name = table.split(".", 1)
    with server_connection(**server) as conn, conn.cursor() as cur:
        columns = server_columns(cur, database, name, excluded)
        key = [c for c in primary_key(cur, database, name) if any(k.name == c for k in columns)]
        documented = [documented_type(c) for c in columns]
        mysql = server_rows(cur, database, name, columns, documented)
    delta, reader = read_delta(side)
    names = {n.lower(): n for n in delta.column_names}
    diff = TableDiff(table, len(mysql), reader=reader)
    _check_types(columns, documented, delta, names, side.source is not None, widened, diff.problems)
    if side.source is not None:
        delta = delta.filter(pc.equal(delta[names["_cdc_source"]], side.source))
    if side.mode == "soft_delete":
        delta = delta.filter(pc.invert(pc.fill_null(delta[names["_cdc_deleted"]], False)))
    elif side.mode == "history":
        delta = delta.filter(pc.fill_null(delta[names["_is_current"]], False))
    diff.delta_rows = delta.num_rows
    if "_cdc_op" in names:
        ops = set(delta[names["_cdc_op"]].to_pylist())
        if ops - _OPS:
            diff.problems.append(f"_cdc_op values {sorted(map(str, ops - _OPS))} in Delta (only {sorted(_OPS)})")
    picked = [delta[names[c.name.lower()]].to_pylist() if c.name.lower() in names else [None] * delta.num_rows
              for c in columns]
    lake = [tuple(_delta_value(v) for v in row) for row in zip(*picked)] if columns else []

    idx = [i for i, c in enumerate(columns) if c.name in key] if key else list(range(len(columns)))

    def keyed(rows):
        out: dict = {}
        for r in rows:
            out.setdefault(tuple(r[i] for i in idx), []).append(r)
        return out

    a, b = keyed(mysql), keyed(lake)
    diff.missing = [k for k in a if k not in b]
    diff.extra = [k for k in b if k not in a]
    for k in a.keys() & b.keys():
        ra, rb = sorted(a[k], key=repr), sorted(b[k], key=repr)
        if len(ra) != len(rb):
            diff.different.append((k, "<row count>", len(ra), len(rb)))
            continue
        for x, y in zip(ra, rb):
            diff.different += [(k, c.name, vx, vy) for c, vx, vy in zip(columns, x, y) if vx != vy]
    return diff
