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

How each type is rendered (server SQL → DataFusion over the Delta column) is its codec's
part (``Codec.mysql_value`` / ``Codec.delta_value``, described in each family's module:
cdc_core/types/integers.py, decimals.py, floating.py, temporal.py, bit.py, strings.py,
enum_set.py, json_text.py, text_forms.py, geometry.py); this module assembles the row.

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
from cdc_core.types.mapping import UnsupportedType, arrow_type
from cdc_core.types.registry import codec_for

NULL_MARK = "N"


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
        if (why := codec_for(col).checksum_exclusion(col, mariadb)) is not None:
            excluded[col.name] = why
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


def mysql_value(col: Column) -> str:
    """Server SQL rendering one value of ``col`` (NULL when Delta holds NULL for it)."""
    return codec_for(col).mysql_value(col, quote_ident(col.name))


def delta_value(col: Column, r: str) -> str:
    """DataFusion SQL rendering the non-NULL Delta value ``r`` of source column ``col`` as
    :func:`mysql_value` renders it on the server."""
    return codec_for(col).delta_value(col, r)
