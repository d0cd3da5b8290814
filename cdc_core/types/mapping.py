"""MySQL → Arrow/Delta type mapping, shared by the snapshot and binlog paths: the entry points
that ask a column's codec (one per type family, cdc_core/types/<family>.py, found by
cdc_core/types/registry.py), and the widening of Arrow types.

Invariants (tests/test_types.py):
- For every supported type, a value read by the snapshot path (SQL expression from
  :func:`select_expr`, Arrow column fixed by :func:`snapshot_array`) equals the value
  the binlog path produces (python-mysql-replication with cdc_core/binlog/columns.py's
  corrections, then :func:`binlog_value` and :func:`rows_to_arrow`), and the value a
  text client reads with :func:`text_select_expr` brought through :func:`binlog_value`.
- A column binlake cannot map raises :class:`UnsupportedType` from :func:`arrow_type`;
  :func:`unmappable` words it for the user, naming what leaves it out.

Widening (which Delta type holds another's values: :func:`widest_type` for routes,
:func:`widens` for a retyped column under ``lenient``) is a relation between Arrow types,
the same for every family: it is here, not in the codecs (tests/test_routes.py,
tests/test_schema_evolution.py).
docs/type-mapping.md documents the mapping.
"""

from __future__ import annotations

import re

import pyarrow as pa

from cdc_core.schema.table import Column, TableSchema, quote_ident
from cdc_core.types.codec import UnsupportedType
from cdc_core.types.decimals import MAX_DELTA_DECIMAL_PRECISION
from cdc_core.types.registry import codec_for

__all__ = ["UnsupportedType", "arrow_schema", "arrow_type", "binlog_value", "binlog_value_unchanged",
           "raw_floor", "rows_to_arrow", "select_expr", "snapshot_array", "text_select_expr", "unmappable",
           "widens", "widest_type"]


def arrow_type(col: Column) -> pa.DataType:
    """The Arrow type (and so the Delta type) a column is stored as."""
    return codec_for(col).arrow_type(col)


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


def select_expr(col: Column, raw_dates: bool = False) -> str:
    """SQL expression the snapshot SELECTs for a column; aliased to the column name.

    Types the bulk reader gets wrong or cannot read are fetched in a lossless
    text or integer form and fixed by :func:`snapshot_array`. ``raw_dates``: DATE and
    DATETIME as stored, for a reader that refuses impossible dates itself
    (cdc_core/chunks/reader.py reads the chunk again without it when one is there).
    """
    q = quote_ident(col.name)
    expr = codec_for(col).select_expr(col, q, raw_dates)
    return q if expr is None else f"{expr} AS {q}"


def raw_floor(col: Column) -> object | None:
    """For a column :func:`select_expr` reads as stored under ``raw_dates``, the first valid
    value (one before it is a year-0 date); None for every other column."""
    return codec_for(col).raw_floor(col)


def text_select_expr(col: Column) -> str:
    """SQL expression a text client (pymysql) reads a column with, so that :func:`binlog_value`
    gives its canonical value (verification: pipelines/reconcile/rows.py)."""
    q = quote_ident(col.name)
    expr = codec_for(col).text_select_expr(col, q)
    return q if expr is None else f"{expr} AS {q}"


def snapshot_array(col: Column, arr: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """Turn the bulk reader's column for ``select_expr(col)`` into the canonical Arrow type."""
    return codec_for(col).snapshot_array(col, arr)


def binlog_value_unchanged(col: Column) -> bool:
    """Whether :func:`binlog_value` gives back every value the binlog decoder gives for ``col``
    (equal, of the same type), so that a caller may skip it."""
    return codec_for(col).binlog_value_unchanged(col)


def binlog_value(col: Column, v):
    """Canonical Python value for a value decoded from a binlog row image (with
    cdc_core/binlog/columns.py's corrections) or read by a text client."""
    if v is None:
        return None
    return codec_for(col).binlog_value(col, v)


def rows_to_arrow(schema: TableSchema, rows: list[dict], target: pa.Schema | None = None) -> pa.Table:
    """Arrow table of binlog row images (already canonical via :func:`binlog_value`)."""
    target = target or arrow_schema(schema)
    return pa.table({f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in target}, schema=target)


_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}  # decimal digits of the largest signed value


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is exactly a value of ``new`` (a Delta column of type
    ``new`` holds a MySQL column now mapped to ``old``): a wider integer, a decimal with as
    many integer and fraction digits, DOUBLE for FLOAT, string for string, binary for binary."""
    if old == new:
        return True
    ints = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    if old in ints and new in ints:
        return ints.index(new) >= ints.index(old)
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    if old in ints and pa.types.is_decimal(new):
        return new.precision - new.scale >= _INT_DIGITS[old.bit_width]
    if old == pa.float32() and new == pa.float64():
        return True
    return pa.types.is_string(old) and pa.types.is_string(new) or pa.types.is_binary(old) and pa.types.is_binary(new)


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
