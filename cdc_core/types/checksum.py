"""Row checksums computed where the rows are: one SQL expression for the source server and
one for DataFusion over the Delta table, giving the same 64-bit value for a row in both.

Invariants (tests/test_reconcile_checksum.py, on the type matrix of tests/test_types.py):
- For every column kept in a :class:`Rendering`, :func:`mysql_value` on the server and
  :func:`delta_value` on the Delta value binlake wrote for it (docs/type-mapping.md) give
  the same text, byte for byte, and NULL exactly when the other does. So a row's hash is
  equal on both sides iff every kept column is equal.
- A row renders as ``CONCAT_WS(',', v1, ..., vn)`` with each ``vi`` NULL-marked as ``N``;
  no rendering of a value is ``N`` or holds an unescaped ``,`` in a way that lets two
  different rows render the same: strings carry their byte length (``5:hello``), binaries
  and long texts are hex (or their MD5 in hex), numbers, dates and positions have no
  commas. The row's hash is the first 8 bytes of MD5 of that text, big-endian.
- A column that cannot be rendered identically on both sides is left out of the hash (and
  named with its reason in :attr:`Rendering.excluded`); it still counts in the row count.
  Nothing is left out silently.

How each type is rendered (server SQL → DataFusion over the Delta column):
- integers: decimal digits (``CAST(c AS SIGNED/UNSIGNED)`` drops ZEROFILL's padding);
  BIGINT UNSIGNED is Delta decimal(20,0), cast to text without a point.
- DECIMAL(p,s): the text with exactly ``s`` fraction digits (``CAST(CAST(c AS DECIMAL(p,s))
  AS CHAR)``, again without ZEROFILL); p > 38 is text in Delta already.
- FLOAT/DOUBLE: the exact value as ``m p k`` (``a = m·2^k``, ``m`` an integer below 2^53,
  ``k`` ≥ -1074), computed with LOG2, POW and division, all exact in IEEE arithmetic once
  the exponent is corrected (the server's LOG2 is ``log(x)/log(2)``, which is off by one
  near powers of two: FLOOR(LOG2(max double)) is 1024 on MariaDB 10.11). Both sides print
  floats differently (``1e15`` / ``1000000000000000.0``), so no float text is compared.
  FLOAT is widened to DOUBLE first (exact) on both sides.
- DATE: days since 1970-01-01; DATETIME(n): microseconds since 1970-01-01 00:00:00 (wall
  clock); zero and impossible dates are NULL as binlake stores them. TIMESTAMP(n): epoch
  microseconds (the zero TIMESTAMP NULL). TIME: signed microseconds. YEAR: the year
  (YEAR(2): the stored four-digit year; 0000 is 0).
- BIT(1): 0/1; BIT(n): hex of its ⌈n/8⌉ big-endian bytes.
- CHAR, VARCHAR, TINYTEXT, ENUM, SET: ``<utf8 byte length>:<utf8 text>`` (the server
  converts to utf8mb4 and to binary, so columns of different collations can be joined);
  TEXT, MEDIUMTEXT, LONGTEXT, JSON (MariaDB): MD5 of the utf8 text in hex, which bounds a
  row's text under ``max_allowed_packet``.
- BINARY, VARBINARY, TINYBLOB: hex; BLOB, MEDIUMBLOB, LONGBLOB: MD5 in hex.
- INET4, INET6, UUID: the server's text.
- spatial: ``<srid>:<md5 of the WKB>`` (the server's stored value is 4 bytes of SRID,
  little-endian, then the WKB).

Left out (with the reason): a column Delta lacks; a Delta column whose type is not the one
binlake maps the source column to (a DDL the stream did not apply, a route's widened type
that prints differently: an integer into a decimal with a scale, decimals of another scale);
MySQL 8's binary JSON (binlake serialises it with ``json.dumps``, the server prints it its
own way); a type binlake does not map.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from cdc_core.schema.table import Column, TableSchema, quote_ident
from cdc_core.types.mapping import SPATIAL_TYPES, UnsupportedType, _big_decimal, _is_year2, arrow_type

NULL_MARK = "N"
_INTEGERS = {"tinyint", "smallint", "mediumint", "int", "bigint"}
_SHORT_TEXT = {"char", "varchar", "tinytext", "enum", "set"}
_LONG_TEXT = {"text", "mediumtext", "longtext", "json"}
_SHORT_BINARY = {"binary", "varbinary", "tinyblob"}
_LONG_BINARY = {"blob", "mediumblob", "longblob"}
_TEXT_FORMS = {"inet4", "inet6", "uuid"}
_EPOCH_DAYS = 719528  # TO_DAYS('1970-01-01')


@dataclass(frozen=True)
class Rendering:
    """How one table's rows are hashed on both sides."""

    columns: tuple[str, ...]  # source columns in the hash, in order
    delta_columns: tuple[str, ...]  # their Delta spelling
    excluded: dict[str, str] = field(default_factory=dict)  # source column → why it is left out

    def mysql_hash(self, schema: TableSchema) -> str:
        """Server SQL: the row's 64-bit hash as BIGINT UNSIGNED."""
        cols = {c.name: c for c in schema.columns}
        parts = [f"COALESCE({mysql_value(cols[n])}, '{NULL_MARK}')" for n in self.columns] or ["''"]
        return f"CAST(CONV(LEFT(MD5(CONCAT_WS(',', {', '.join(parts)})), 16), 16, 10) AS UNSIGNED)"

    def delta_digest(self, schema: TableSchema) -> str:
        """DataFusion SQL: the row's MD5 digest (16 bytes; the hash is its first 8, big-endian)."""
        cols = {c.name: c for c in schema.columns}
        parts = [f"CASE WHEN {df_ident(d)} IS NULL THEN '{NULL_MARK}' ELSE {delta_value(cols[n], df_ident(d))} END"
                 for n, d in zip(self.columns, self.delta_columns, strict=True)] or ["''"]
        return f"digest(concat_ws(',', {', '.join(parts)}), 'md5')"


def df_ident(name: str) -> str:
    """A DataFusion SQL identifier (quoted: keeps its case)."""
    return '"' + name.replace('"', '""') + '"'


def df_string(value: str) -> str:
    """A DataFusion SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def rendering(schema: TableSchema, delta_types: Mapping[str, pa.DataType], mariadb: bool = True) -> Rendering:
    """Which of ``schema``'s columns are hashed: those whose Delta column (``delta_types``:
    Delta name → Arrow type, matched case-insensitively) holds the type binlake maps the
    column to, or one that renders the same. ``mariadb``: the server is MariaDB (JSON is text)."""
    by_lower = {n.lower(): n for n in delta_types}
    kept, spelled, excluded = [], [], {}
    for col in schema.columns:
        name = by_lower.get(col.name.lower())
        if name is None:
            excluded[col.name] = "not in the Delta table"
            continue
        try:
            mapped = arrow_type(col)
        except UnsupportedType:
            excluded[col.name] = f"binlake does not map its type {col.column_type}"
            continue
        if col.data_type == "json" and not mariadb:
            excluded[col.name] = ("MySQL's binary JSON: the server's text and binlake's json.dumps serialisation "
                                  "differ in form")
            continue
        if not renders_alike(mapped, delta_types[name]):
            excluded[col.name] = (f"the Delta column is {_normal(delta_types[name])}, not the mapped "
                                  f"{_normal(mapped)}: its text differs from the server's")
            continue
        kept.append(col.name)
        spelled.append(name)
    return Rendering(tuple(kept), tuple(spelled), excluded)


def _normal(t: pa.DataType) -> pa.DataType:
    """The logical type: string and binary views and large variants as plain string/binary."""
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, tz="UTC")  # "+00:00" and "UTC" are one zone
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _normal(f.type)) for f in t])
    return t


def renders_alike(mapped: pa.DataType, delta: pa.DataType) -> bool:
    """Whether a value of Arrow type ``mapped`` stored in a Delta column of type ``delta``
    renders as the server renders the source value: the same type, or a widening that
    prints the same (an integer into a wider integer or a decimal without scale, a
    decimal into one of the same scale, FLOAT into DOUBLE)."""
    mapped, delta = _normal(mapped), _normal(delta)
    if mapped == delta:
        return True
    ints, decs, floats = pa.types.is_integer, pa.types.is_decimal, pa.types.is_floating
    if ints(mapped) and (ints(delta) or decs(delta) and delta.scale == 0):
        return True
    if decs(mapped) and decs(delta):
        return mapped.scale == delta.scale
    return floats(mapped) and floats(delta)


# --- the server's side -----------------------------------------------------------------------

def _mysql_float(x: str) -> str:
    """Exact ``[-]m p k`` text of a double: see the module docstring."""
    a = f"ABS({x})"
    e0 = f"LEAST(GREATEST(FLOOR(LOG2({a})), -1075), 1023)"
    e = f"({e0} - (POW(2, {e0}) > {a}) + IF({e0} >= 1023, 0, POW(2, {e0} + 1) <= {a}))"
    k = f"GREATEST({e} - 52, -1074)"
    return (f"IF({a} = 0, '0', CONCAT(IF({x} < 0, '-', ''), CAST({a} / POW(2, {k}) AS UNSIGNED), 'p', "
            f"CAST({k} AS SIGNED)))")


def _utf8(col: Column, q: str) -> str:
    """The column's text in utf8mb4 (converted only when it is in another charset)."""
    return q if (col.collation or "").startswith("utf8mb4_") else f"CONVERT({q} USING utf8mb4)"


def mysql_value(col: Column) -> str:
    """Server SQL rendering one value of ``col`` (NULL when Delta holds NULL for it)."""
    q = quote_ident(col.name)
    t = col.data_type
    if t in _INTEGERS:
        return f"CAST({q} AS {'UNSIGNED' if col.unsigned else 'SIGNED'})"
    if t == "decimal":
        return f"CAST(CAST({q} AS DECIMAL({col.precision or 10},{col.scale or 0})) AS CHAR)"
    if t in ("float", "double"):
        return _mysql_float(f"CAST({q} AS DOUBLE)")
    # Date arithmetic gives NULL for exactly the zero and impossible dates (a zero year, month
    # or day, a day past the month's end), which binlake stores as NULL. Numbers, not text: a
    # third of the server's time of DATE_FORMAT with YEAR/MONTH/DAYOFMONTH/LAST_DAY checks, and
    # DataFusion's to_char costs more than its casts. Both sides count proleptic Gregorian days.
    if t == "date":
        return f"TO_DAYS({q} + INTERVAL 0 DAY) - {_EPOCH_DAYS}"
    if t == "datetime":
        return f"TIMESTAMPDIFF(MICROSECOND, TIMESTAMP'1970-01-01 00:00:00', {q} + INTERVAL 0 DAY)"
    if t == "timestamp":
        return f"CAST(NULLIF(UNIX_TIMESTAMP({q}), 0) * 1000000 AS SIGNED)"
    if t == "time":
        return f"CAST(TIME_TO_SEC({q}) * 1000000 AS SIGNED)"
    if t == "year":
        # YEAR(2) shows two digits: YEAR() gives the stored year (1900 for its zero year).
        return f"IF(YEAR({q}) = 1900, 0, YEAR({q}))" if _is_year2(col) else f"CAST({q} AS UNSIGNED)"
    if t == "bit":
        if col.precision == 1:
            return f"CAST({q} AS UNSIGNED)"
        return f"LPAD(LOWER(HEX(CAST({q} AS UNSIGNED))), {2 * (((col.precision or 1) + 7) // 8)}, '0')"
    if t in _SHORT_TEXT:
        # utf8mb4 then binary: the bytes Delta's UTF-8 holds, and no collation to clash with
        # another column's in CONCAT.
        x = f"CAST({_utf8(col, q)} AS BINARY)"
        return f"CONCAT(LENGTH({x}), ':', {x})"
    if t in _LONG_TEXT:
        return f"MD5({_utf8(col, q)})"
    if t in _SHORT_BINARY:
        return f"LOWER(HEX({q}))"
    if t in _LONG_BINARY:
        return f"MD5({q})"
    if t in _TEXT_FORMS:
        return f"CAST({q} AS CHAR)"
    if t in SPATIAL_TYPES:
        b = f"CAST({q} AS BINARY)"
        # The empty value (a NOT NULL spatial column added to existing rows) is {wkb: '', srid: 0}.
        srid = f"IF(LENGTH({b}) = 0, '0', CONV(HEX(REVERSE(LEFT({b}, 4))), 16, 10))"
        return f"CONCAT({srid}, ':', MD5(SUBSTRING({b}, 5)))"
    raise UnsupportedType(col.name, f"has type {col.column_type}, which binlake does not map")


# --- Delta's side (DataFusion) ---------------------------------------------------------------

def _delta_float(x: str) -> str:
    a = f"abs({x})"
    e0 = f"least(greatest(floor(log2({a})), -1075.0), 1023.0)"
    e = (f"({e0} - CASE WHEN power(2.0, {e0}) > {a} THEN 1 ELSE 0 END "
         f"+ CASE WHEN {e0} < 1023 AND power(2.0, {e0} + 1) <= {a} THEN 1 ELSE 0 END)")
    k = f"greatest({e} - 52, -1074.0)"
    return (f"CASE WHEN {a} = 0 THEN '0' ELSE concat(CASE WHEN {x} < 0 THEN '-' ELSE '' END, "
            f"CAST(CAST({a} / power(2.0, {k}) AS BIGINT) AS VARCHAR), 'p', CAST(CAST({k} AS BIGINT) AS VARCHAR)) END")


def delta_value(col: Column, r: str) -> str:
    """DataFusion SQL rendering the non-NULL Delta value ``r`` of source column ``col`` as
    :func:`mysql_value` renders it on the server."""
    t = col.data_type
    if t in _INTEGERS or t in ("time", "year") or t == "decimal" and not _big_decimal(col):
        return f"CAST({r} AS VARCHAR)"
    if t == "decimal":
        return r  # exact text already
    if t in ("float", "double"):
        return _delta_float(f"CAST({r} AS DOUBLE)")
    if t == "date":
        return f"CAST(CAST({r} AS INT) AS VARCHAR)"  # days since 1970-01-01
    if t in ("datetime", "timestamp"):
        return f"CAST(CAST({r} AS BIGINT) AS VARCHAR)"  # microseconds since 1970-01-01 (UTC for TIMESTAMP)
    if t == "bit":
        return f"CASE WHEN {r} THEN '1' ELSE '0' END" if col.precision == 1 else f"encode({r}, 'hex')"
    if t in _SHORT_TEXT:
        return f"concat(CAST(octet_length({r}) AS VARCHAR), ':', {r})"
    if t in _LONG_TEXT or t in _LONG_BINARY:
        return f"md5({r})"
    if t in _SHORT_BINARY:
        return f"encode({r}, 'hex')"
    if t in _TEXT_FORMS:
        return r
    if t in SPATIAL_TYPES:
        return f"concat(CAST(get_field({r}, 'srid') AS VARCHAR), ':', md5(get_field({r}, 'wkb')))"
    raise UnsupportedType(col.name, f"has type {col.column_type}, which binlake does not map")
