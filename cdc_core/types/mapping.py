"""MySQL → Arrow/Delta type mapping, shared by the snapshot and binlog paths.

Invariants (tests/test_types.py):
- For every supported type, a value read by the snapshot path (SQL expression from
  :func:`select_expr`, Arrow column fixed by :func:`snapshot_array`) equals the value
  the binlog path produces (python-mysql-replication with cdc_core/binlog/columns.py's
  corrections, then :func:`binlog_value` and :func:`rows_to_arrow`), and the value a
  text client reads with :func:`text_select_expr` brought through :func:`binlog_value`.
- A column binlake cannot map raises :class:`UnsupportedType` from :func:`arrow_type`;
  :func:`unmappable` words it for the user, naming what leaves it out.
docs/type-mapping.md documents the mapping.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
import uuid
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.errors import BadInput
from cdc_core.schema.table import Column, TableSchema, quote_ident
from cdc_core.types.charsets import decoder

MAX_DELTA_DECIMAL_PRECISION = 38
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=dt.UTC)

_INT_TYPES = {
    # data_type: (signed arrow type, unsigned arrow type)
    "tinyint": (pa.int8(), pa.int16()),
    "smallint": (pa.int16(), pa.int32()),
    "mediumint": (pa.int32(), pa.int32()),
    "int": (pa.int32(), pa.int64()),
    "bigint": (pa.int64(), pa.decimal128(20, 0)),
}
_STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
_BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
# MySQL 8 names GEOMETRYCOLLECTION's data type "geomcollection".
SPATIAL_TYPES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                  "geometrycollection", "geomcollection"}
# MariaDB's fixed-size binary types shown as text: their size in the binlog row image, where
# trailing zero bytes are cut (as for BINARY(n)).
_TEXT_FORM_SIZES = {"inet4": 4, "inet6": 16, "uuid": 16}
# A spatial value: its WKB and its SRID (Debezium's io.debezium.data.geometry.Geometry).
GEOMETRY = pa.struct([pa.field("wkb", pa.binary()), pa.field("srid", pa.int64())])


class UnsupportedType(BadInput, ValueError):
    """A column type binlake cannot map exactly. ``excludable``: leaving the column out
    (source.exclude_columns) is enough; otherwise its rows cannot even be decoded from the
    binlog and the table has to be left out (or the column converted)."""

    def __init__(self, column: str, message: str, excludable: bool = True):
        super().__init__(f"column {column!r} {message}")
        self.excludable = excludable


def _big_decimal(col: Column) -> bool:
    return col.data_type == "decimal" and (col.precision or 10) > MAX_DELTA_DECIMAL_PRECISION


def arrow_type(col: Column) -> pa.DataType:
    """The Arrow type (and so the Delta type) a column is stored as."""
    t = col.data_type
    if "mariadb-5.3" in col.column_type and (col.datetime_precision or 0) > 0:
        # MariaDB 5.3's fractional temporal format: logged without the metadata that gives its
        # size, so the binlog decoder cannot find where the next column starts.
        raise UnsupportedType(col.name, f"has type {col.column_type}, MariaDB 5.3's storage format of fractional "
                              "temporal values, which the binlog decoder cannot read", excludable=False)
    if t in _INT_TYPES:
        return _INT_TYPES[t][col.unsigned]
    if t == "decimal":
        if _big_decimal(col):
            return pa.string()  # Delta decimals stop at 38 digits: keep the exact text
        return pa.decimal128(col.precision or 10, col.scale or 0)
    if t == "float":
        return pa.float32()
    if t == "double":
        return pa.float64()
    if t == "date":
        return pa.date32()
    if t == "datetime":
        return pa.timestamp("us")  # Delta timestamp_ntz: wall-clock, no zone
    if t == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if t == "time":
        return pa.int64()  # microseconds, signed (TIME spans ±838:59:59)
    if t == "year":
        return pa.int16()
    if t == "bit":
        return pa.bool_() if col.precision == 1 else pa.binary()
    if t in _STRING_TYPES:
        return pa.string()
    if t in _BINARY_TYPES:
        return pa.binary()
    if t in SPATIAL_TYPES:
        return GEOMETRY
    if t in _TEXT_FORM_SIZES:
        return pa.string()
    raise UnsupportedType(col.name, f"has type {col.column_type}, which binlake does not map")


def unmappable(schema: TableSchema) -> list[str]:
    """One line per column of ``schema`` binlake cannot map, saying how to leave it out."""
    out = []
    for col in schema.columns:
        try:
            arrow_type(col)
        except UnsupportedType as e:
            if e.excludable:
                fix = (f"add '{re.escape(f'{schema.qualified_name}.{col.name}')}' to source.exclude_columns "
                       "to leave it out")
            else:
                fix = (f"convert it (ALTER TABLE {quote_ident(schema.database)}.{quote_ident(schema.table)} FORCE "
                       f"rewrites it in the current format) or add '{re.escape(schema.qualified_name)}' to "
                       "source.exclude_tables")
            out.append(f"{schema.qualified_name}: {e}; {fix}")
    return out


def arrow_schema(schema: TableSchema) -> pa.Schema:
    """Arrow schema of a table's source columns (reserved _cdc_ columns excluded)."""
    return pa.schema([pa.field(c.name, arrow_type(c), nullable=True) for c in schema.columns])


# Column types whose impossible values ('0000-00-00', '2020-02-30', year 0) the snapshot reads as NULL.
DATE_TYPES = ("date", "datetime")


def select_expr(col: Column, raw_dates: bool = False) -> str:
    """SQL expression the snapshot SELECTs for a column; aliased to the column name.

    Types the bulk reader gets wrong or cannot read are fetched in a lossless
    text or integer form and fixed by :func:`snapshot_array`. ``raw_dates``: DATE and
    DATETIME as stored, for a reader that refuses impossible dates itself
    (cdc_core/chunks/reader.py reads the chunk again without it when one is there).
    """
    q = quote_ident(col.name)
    t = col.data_type
    if t == "decimal":
        expr = f"CAST({q} AS CHAR)"
    elif t in SPATIAL_TYPES:
        expr = f"CAST({q} AS BINARY)"  # the stored SRID and WKB, as the binlog carries them
    elif _is_year2(col):
        expr = f"YEAR({q})"
    elif t in DATE_TYPES and not raw_dates:
        # Zero and other impossible dates ('0000-00-00', '2020-00-15') are NULL, as the binlog
        # decoder gives them (and the bulk reader panics on them).
        valid = f"YEAR({q}) > 0 AND MONTH({q}) > 0 AND DAYOFMONTH({q}) BETWEEN 1 AND DAYOFMONTH(LAST_DAY({q}))"
        expr = f"IF({valid}, {q}, NULL)"
    elif t == "time":
        expr = f"CAST(TIME_TO_SEC({q}) * 1000000 AS SIGNED)"
    elif t == "timestamp":
        # Epoch microseconds: independent of the session and server time zones. Epoch 0 is
        # the zero TIMESTAMP ('0000-00-00 00:00:00'; real values start at 1 s): NULL.
        expr = f"CAST(NULLIF(UNIX_TIMESTAMP({q}), 0) * 1000000 AS SIGNED)"
    elif t == "bit":
        expr = f"CAST({q} AS UNSIGNED)"
    elif t == "bigint" and col.unsigned:
        expr = f"CAST({q} AS CHAR)"
    else:
        return q
    return f"{expr} AS {q}"


def text_select_expr(col: Column) -> str:
    """SQL expression a text client (pymysql) reads a column with, so that :func:`binlog_value`
    gives its canonical value (verification: pipelines/reconcile/rows.py)."""
    q = quote_ident(col.name)
    return f"YEAR({q}) AS {q}" if _is_year2(col) else q


def _is_year2(col: Column) -> bool:
    """YEAR(2): shown as two digits (1969 and 2069 both as 69), stored as the full year."""
    return col.data_type == "year" and col.column_type.startswith("year(2)")


def snapshot_array(col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """Turn the bulk reader's column for ``select_expr(col)`` into the canonical Arrow type."""
    target = arrow_type(col)
    t = col.data_type
    if t == "bit":
        values = arr.to_pylist()
        return pa.array([_bit_value(col, v) for v in values], type=target)
    if t == "timestamp":
        return pc.cast(pc.cast(arr, pa.int64()), target)
    if t == "datetime":
        return pc.cast(arr, target)
    if t in SPATIAL_TYPES:
        return pa.array([_geometry(v) for v in arr.to_pylist()], type=target)
    if t == "year":
        arr = pc.if_else(pc.equal(arr, 1900), 0, arr)  # YEAR(2)'s zero year, read with YEAR()
    if _big_decimal(col) and "zerofill" in col.column_type:
        return pa.array([None if v is None else _plain_decimal(v) for v in arr.to_pylist()], type=target)
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        arr = pc.cast(arr, pa.binary() if pa.types.is_large_binary(arr.type) else pa.string())
    if t == "binary" and col.char_length:
        # Snapshot values already carry the 0x00 padding; pad anyway for safety (idempotent).
        return pa.array([_pad_binary(col, v) for v in arr.to_pylist()], type=target)
    return arr if arr.type == target else pc.cast(arr, target)


def _pad_binary(col: Column, v: bytes | None) -> bytes | None:
    return None if v is None else v.ljust(col.char_length or 0, b"\x00")


def _bit_value(col: Column, v: int | str | bytes | None):
    if v is None:
        return None
    if isinstance(v, str):  # python-mysql-replication gives BIT as a string of '0'/'1'
        v = int(v, 2) if v else 0
    elif isinstance(v, bytes):
        v = int.from_bytes(v, "big")
    if col.precision == 1:
        return bool(v)
    return int(v).to_bytes(((col.precision or 1) + 7) // 8, "big")


def _plain_decimal(v) -> str:
    """A decimal as plain text without exponent or ZEROFILL's leading zeros."""
    return format(Decimal(v), "f")


def _geometry(v: bytes | None) -> dict | None:
    """A stored spatial value (4-byte little-endian SRID, then WKB) as {wkb, srid}."""
    if v is None:
        return None
    if not v:  # the empty value MariaDB gives a NOT NULL spatial column added to existing rows
        return {"wkb": b"", "srid": 0}
    return {"wkb": v[4:], "srid": struct.unpack_from("<I", v)[0]}


def _inet6_text(b: bytes) -> str:
    """An IPv6 address as MariaDB's INET6 prints it (sql_type_inet.cc: lower-case hex without
    leading zeros, the first longest run of zero words, even a single one, as '::', and the
    IPv4-compatible ::a.b.c.d and IPv4-mapped ::ffff:a.b.c.d forms)."""
    words = struct.unpack(">8H", b)
    gap_pos, gap_len, run_pos, run_len = -1, -1, -1, -1
    for i, w in enumerate((*words, 1)):  # a sentinel word ends a run at the end
        if w == 0:
            run_pos, run_len = (run_pos, run_len + 1) if run_pos >= 0 else (i, 1)
        elif run_pos >= 0:
            if run_len > gap_len:
                gap_pos, gap_len = run_pos, run_len
            run_pos, run_len = -1, -1
    out, i = [], 0
    while i < 8:
        if i == gap_pos:
            out.append("::" if i == 0 else ":")
            i += gap_len
        elif i == 6 and gap_pos == 0 and (gap_len == 6 or gap_len == 5 and words[5] == 0xFFFF):
            out.append(".".join(str(x) for x in b[12:]))
            break
        else:
            out.append(f"{words[i]:x}" + (":" if i < 7 else ""))
            i += 1
    return "".join(out)


def _text_form(t: str, v: bytes) -> str:
    """INET4, INET6 and UUID text, as the server prints them, from their binlog bytes."""
    b = v.ljust(_TEXT_FORM_SIZES[t], b"\x00")  # the binlog cuts trailing zero bytes
    if t == "inet4":
        return ".".join(str(x) for x in b)
    if t == "inet6":
        return _inet6_text(b)
    return str(uuid.UUID(bytes=b))  # the binlog holds the RFC 4122 byte order, not the swapped stored one


# Types whose values, as the binlog decoder gives them, binlog_value returns as they are (a DECIMAL
# that Delta holds as a decimal is copied: an equal Decimal).
_BINLOG_UNCHANGED = {"tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "char", "varchar",
                     "decimal", "date", "datetime"}


def binlog_value_unchanged(col: Column) -> bool:
    """Whether :func:`binlog_value` gives back every value the binlog decoder gives for ``col``
    (equal, of the same type), so that a caller may skip it."""
    t = col.data_type
    return t in _BINLOG_UNCHANGED and not (t == "bigint" and col.unsigned) and not _big_decimal(col)


def binlog_value(col: Column, v):
    """Canonical Python value for a value decoded from a binlog row image (with
    cdc_core/binlog/columns.py's corrections) or read by a text client."""
    if v is None:
        return None
    t = col.data_type
    if t == "decimal":
        if _big_decimal(col):
            return _plain_decimal(v)
        return Decimal(v)
    if t == "bigint" and col.unsigned:
        return Decimal(v)
    if t in ("date", "datetime", "timestamp") and isinstance(v, str):
        return None  # a zero or impossible date, which text clients (pymysql) return unparsed
    if t == "time":
        return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    if t == "timestamp":
        if isinstance(v, dt.datetime):  # decoded with utcfromtimestamp: naive UTC
            v = v.replace(tzinfo=dt.UTC) if v.tzinfo is None else v
        else:
            v = dt.datetime.fromtimestamp(v, dt.UTC)
        return None if v == _EPOCH_UTC else v  # epoch 0 is the zero TIMESTAMP
    if t == "year":
        return 0 if v == 1900 else v  # the binlog stores YEAR 0000 as 0 and the decoder adds 1900
    if t == "bit":
        return _bit_value(col, v)
    if t == "set" and not isinstance(v, str):  # member names without order: definition order
        return ",".join(m for m in col.members if m in v)
    if t in SPATIAL_TYPES:
        return _geometry(v)
    if t in _TEXT_FORM_SIZES:  # text from a text client; bytes, or '' when all were cut, from the binlog
        return v if isinstance(v, str) and v else _text_form(t, v or b"")
    if t == "json" and not isinstance(v, (str, bytes)):
        return json.dumps(v)  # MySQL binary JSON decoded to Python objects
    if t in _STRING_TYPES and isinstance(v, bytes):  # undecoded text (the binlog readers decode it already)
        return decoder(col.collation)(v)
    if t in _BINARY_TYPES and isinstance(v, str):  # the decoder gives an empty binary value as ''
        v = v.encode("utf-8", "surrogateescape")
    if t == "binary":
        return _pad_binary(col, v)
    return v


def rows_to_arrow(schema: TableSchema, rows: list[dict], target: pa.Schema | None = None) -> pa.Table:
    """Arrow table of binlog row images (already canonical via :func:`binlog_value`)."""
    target = target or arrow_schema(schema)
    return pa.table({f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in target}, schema=target)


_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}  # decimal digits of the largest signed value


def widest_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The narrowest Arrow type that holds every value of ``a`` and of ``b`` exactly, or None
    when there is none (routes merge several source tables' columns into one Delta column).

    Integers widen to the larger integer; integers and decimals to a decimal with the most
    integer digits and the largest scale (at most 38 digits); float32 with float64 to
    float64, and integers of up to 32 bits with a float to a float that holds them; equal
    types stay. Anything else (string with a number, a wall-clock timestamp with a UTC one,
    date with timestamp, boolean with binary...) has no exact common type.
    """
    if a == b:
        return a
    ints = pa.types.is_integer
    if ints(a) and ints(b):
        return a if a.bit_width >= b.bit_width else b
    if (ints(a) or pa.types.is_decimal(a)) and (ints(b) or pa.types.is_decimal(b)):
        def digits(t: pa.DataType) -> tuple[int, int]:
            return (t.precision - t.scale, t.scale) if pa.types.is_decimal(t) else (_INT_DIGITS[t.bit_width], 0)

        (ia, sa), (ib, sb) = digits(a), digits(b)
        whole, scale = max(ia, ib), max(sa, sb)
        return pa.decimal128(whole + scale, scale) if whole + scale <= MAX_DELTA_DECIMAL_PRECISION else None
    floats = pa.types.is_floating
    if floats(a) and floats(b):
        return pa.float64()
    if ints(a) and floats(b) or floats(a) and ints(b):
        i, f = (a, b) if ints(a) else (b, a)
        if i.bit_width <= 16:  # float32's 24-bit mantissa holds every 16-bit integer
            return f
        return pa.float64() if i.bit_width <= 32 else None
    return None
