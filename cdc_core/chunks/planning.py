"""Chunk planning: split a table into ranges of its chunk key.

Invariants (tested directly in tests/test_chunking.py):
- Chunks cover the whole key space: the first has no lower bound, the last no
  upper bound, and each chunk's ``hi`` is the next chunk's ``lo``; so rows
  inserted during the snapshot beyond the old MIN/MAX still fall in a chunk.
- Ranges are half-open, ``lo <= key < hi``, so no row is in two chunks.
- Boundaries come from the server (its collation orders strings), so string and
  composite keys split the way MySQL sorts them; a composite key splits on its
  leading column, and all rows sharing a leading value stay in one chunk.
- Integer keys split arithmetically when dense enough (at most
  ``DENSE_FACTOR`` key values per row), else by boundary queries.
- ENUM and SET keys are split in the server's order of them, by member index and bits
  (``Ordinal`` bounds, compared by the server as numbers): the index walks them so, but
  compares them with a string bound as text (tests/test_chunk_key_types.py).
- Bounds of a key Python orders (every key without a collation, and ENUM/SET) ascend in
  its codec's sort keys, as the hand-off and the chunk reader compare them: a key the
  server orders otherwise (a UUID column in MariaDB's pre-10.11.2 storage) is refused.
- The chunk key (:func:`choose_chunk_key`) is the configured column, else the row key's
  leading column, else a NOT NULL column leading an index; a table with none of these is
  one chunk without a key (``WHOLE_TABLE``), read in one consistent snapshot
  (cdc_core/chunks/consistent_read.py) on a server that reports its position, and refused
  on one that does not (tests/test_keyless_tables.py).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cdc_core.errors import BadInput
from cdc_core.schema.table import Column, TableSchema, quote_ident
from cdc_core.types.enum_set import Ordinal
from cdc_core.types.registry import codec_for

DENSE_FACTOR = 4.0
INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "bigint"}
WHOLE_TABLE = ""  # the chunk key of a table read as one chunk: it has no key to split on
# An ENUM/SET chunk whose numbers are at most this many is selected as `k IN (...)`, which
# the server reads through the index (it does not for `k >= n AND k < m`).
ORDINAL_IN_LIST = 1024


class ChunkKeyError(BadInput, ValueError):
    """A table cannot be chunked (no primary key and no usable chunk key)."""


@dataclass(frozen=True)
class Chunk:
    """Rows of ``table`` with ``lo <= key < hi`` (None: unbounded on that side)."""

    table: str
    index: int
    key: str
    lo: Any = None
    hi: Any = None

    def where(self) -> tuple[str, list]:
        """SQL condition and parameters selecting this chunk's rows, in pymysql's form: its
        ``%s`` placeholders take the parameters, a ``%`` of the key's name is written ``%%``."""
        if self.key == WHOLE_TABLE:
            return "1=1", []
        q = pyformat(quote_ident(self.key))
        ordinal = isinstance(self.lo, Ordinal) or isinstance(self.hi, Ordinal)
        if ordinal:
            first = 0 if self.lo is None else int(self.lo)
            if self.hi is not None and int(self.hi) - first <= ORDINAL_IN_LIST:
                return f"{q} IN ({', '.join(str(n) for n in range(first, int(self.hi))) or 'NULL'})", []
        parts, params = [], []
        for bound, op in ((self.lo, ">="), (self.hi, "<")):
            if bound is not None:
                parts.append(f"{q} {op} %s")
                params.append(int(bound) if ordinal else bound)  # a plain int: pymysql renders it as a number
        return (" AND ".join(parts) or "1=1"), params

    @staticmethod
    def span(chunks: list[Chunk]) -> Chunk:
        """One chunk covering consecutive ``chunks`` (read together with one pair of watermarks)."""
        first, last = chunks[0], chunks[-1]
        return Chunk(first.table, first.index, first.key, first.lo, last.hi)

    def contains(self, value) -> bool:
        """Whether ``value`` lies in the range, compared in Python (integer keys only)."""
        return (self.lo is None or value >= self.lo) and (self.hi is None or value < self.hi)

    def to_json(self) -> str:
        return json.dumps({"lo": encode_value(self.lo), "hi": encode_value(self.hi)})


def pyformat(sql: str) -> str:
    """SQL text in a statement run with parameters (pymysql formats it with ``%``): ``%`` doubled."""
    return sql.replace("%", "%%")


def encode_value(v: Any) -> Any:
    """JSON-safe, type-tagged form of a key value (for durable chunk plans)."""
    if isinstance(v, Ordinal):
        return {"ordinal": int(v)}
    if isinstance(v, dt.timedelta):
        return {"time": v // dt.timedelta(microseconds=1)}
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, Decimal):
        return {"decimal": str(v)}
    if isinstance(v, dt.datetime):
        return {"datetime": v.isoformat()}
    if isinstance(v, dt.date):
        return {"date": v.isoformat()}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": bytes(v).hex()}
    if isinstance(v, float):
        return {"float": repr(v)}
    raise TypeError(f"cannot encode chunk boundary of type {type(v).__name__}")


def decode_value(v: Any) -> Any:
    """Inverse of :func:`encode_value`."""
    if not isinstance(v, dict):
        return v
    (kind, s), = v.items()
    return {
        "decimal": Decimal,
        "datetime": dt.datetime.fromisoformat,
        "date": dt.date.fromisoformat,
        "bytes": bytes.fromhex,
        "float": float,
        "ordinal": Ordinal,
        "time": lambda us: dt.timedelta(microseconds=us),
    }[kind](s)


def chunk_key(schema: TableSchema, configured: dict[str, str]) -> str:
    """The column a table with a row key (or a configured chunk key) is split on: its
    configured chunk key, else the row key's leading column."""
    name = configured.get(schema.qualified_name)
    if name:
        try:
            col = schema.column(name)
        except KeyError:
            raise ChunkKeyError(
                f"{schema.qualified_name}: chunk_key_columns names {name!r}, which is not a column"
            ) from None
        if col.nullable:
            raise ChunkKeyError(f"{schema.qualified_name}: chunk key column {name!r} must be NOT NULL")
        return _orderable(schema, col)
    if schema.row_key:
        return _orderable(schema, schema.column(schema.row_key[0]))
    raise ChunkKeyError(
        f"{schema.qualified_name} has no primary key and no NOT NULL unique key: add one, or set "
        f"source.snapshot.chunk_key_columns: {{'{schema.qualified_name}': <a NOT NULL column>}}"
    )


def _orderable(schema: TableSchema, col: Column) -> str:
    problem = codec_for(col).chunk_key_problem(col)
    if problem:
        raise ChunkKeyError(f"{schema.qualified_name}: {problem}; set source.snapshot.chunk_key_columns: "
                            f"{{'{schema.qualified_name}': <another NOT NULL column>}}")
    return col.name


def choose_chunk_key(cursor, schema: TableSchema, configured: dict[str, str],
                     whole_table: Callable[[], bool]) -> str:
    """The column ``schema``'s table is split on (see the module invariants): as
    :func:`chunk_key`, else for a table without a row key a NOT NULL column leading one of its
    indexes (unique ones first, then by index name), else ``WHOLE_TABLE`` when
    ``whole_table()`` says the server can read the table in one consistent snapshot."""
    if configured.get(schema.qualified_name) or schema.row_key:
        return chunk_key(schema, configured)
    indexed = indexed_column(cursor, schema)
    if indexed is not None:
        return indexed
    if whole_table():
        return WHOLE_TABLE
    raise ChunkKeyError(
        f"{schema.qualified_name} has no key and no NOT NULL indexed column, and this server cannot read it in one "
        "consistent snapshot (it reports no binlog_snapshot_position): add a primary key or an index on a "
        f"NOT NULL column, or set source.snapshot.chunk_key_columns: {{'{schema.qualified_name}': <a NOT NULL "
        "column>}}"
    )


def indexed_column(cursor, schema: TableSchema) -> str | None:
    """The first NOT NULL column (whole, not a prefix) leading a B-tree index of the table, unique
    indexes first and then by index name, that binlake can order; None if there is none."""
    cursor.execute(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
        "AND SEQ_IN_INDEX = 1 AND SUB_PART IS NULL AND INDEX_TYPE = 'BTREE' ORDER BY NON_UNIQUE, INDEX_NAME",
        (schema.database, schema.table),
    )
    columns = {c.name.lower(): c for c in schema.columns}  # the captured columns only
    for (name,) in cursor.fetchall():
        col = columns.get(str(name).lower())
        if col is not None and not col.nullable and codec_for(col).chunk_key_problem(col) is None:
            return col.name
    return None


def plan_chunks(cursor, schema: TableSchema, key: str, chunk_size: int) -> list[Chunk]:
    """Split ``schema``'s table on ``key`` into chunks of about ``chunk_size`` rows (one chunk
    for ``WHOLE_TABLE``)."""
    name = schema.qualified_name
    if key == WHOLE_TABLE:
        return [Chunk(name, 0, key)]
    table = f"{quote_ident(schema.database)}.{quote_ident(schema.table)}"
    q = quote_ident(key)
    col = schema.column(key)
    if codec_for(col).ordinal_keys:
        return _from_boundaries(name, key, _ordinal_boundaries(cursor, table, q, chunk_size))
    cursor.execute(f"SELECT MIN({q}), MAX({q}) FROM {table}")
    lo, hi = cursor.fetchone()
    if lo is None:
        return [Chunk(name, 0, key)]
    if col.data_type in INTEGER_TYPES:
        cursor.execute(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (schema.database, schema.table),
        )
        estimate = max(int(cursor.fetchone()[0] or 0), 1)
        if (hi - lo + 1) / estimate <= DENSE_FACTOR:
            step = max(int(chunk_size * (hi - lo + 1) / estimate), 1)
            return _from_boundaries(name, key, list(range(lo + step, hi + 1, step)))
    bounds = _query_boundaries(cursor, table, q, codec_for(col).key_bound_sql(col, q), chunk_size)
    if col.collation is None:
        check_bounds_order(schema, col, bounds)
    return _from_boundaries(name, key, bounds)


def check_bounds_order(schema: TableSchema, col: Column, bounds: list) -> None:
    """Refuse a key whose bounds, in the server's index order, do not ascend in its codec's sort
    keys: the hand-off would place keys in the wrong chunks."""
    keys = [codec_for(col).key_sort_key(col, b) for b in bounds]
    if any(a > b for a, b in zip(keys, keys[1:])):
        raise ChunkKeyError(
            f"{schema.qualified_name}: the server orders {col.name} ({col.column_type}) otherwise than binlake "
            f"models it (a UUID column from a MariaDB before 10.11.2 is rebuilt by ALTER TABLE ... FORCE); set "
            f"source.snapshot.chunk_key_columns: {{'{schema.qualified_name}': <another NOT NULL column>}}")


def _ordinal_boundaries(cursor, table: str, q: str, chunk_size: int) -> list[Ordinal]:
    """Boundaries of an ENUM or SET key, in the server's order of it (member index, bits): one
    index scan counts the rows of each value, and a boundary starts a chunk once the rows
    before it since the last boundary reach ``chunk_size`` (a value's rows stay in one chunk)."""
    cursor.execute(f"SELECT {q} + 0 AS n, COUNT(*) FROM {table} GROUP BY {q} ORDER BY n")
    bounds: list[Ordinal] = []
    rows = 0
    for n, count in cursor.fetchall():
        if rows >= chunk_size:
            bounds.append(Ordinal(n))
            rows = 0
        rows += count
    return bounds


def _query_boundaries(cursor, table: str, q: str, bound_sql: str, chunk_size: int) -> list:
    """Boundaries by index walks: each is the key ``chunk_size`` rows past the previous one,
    read as ``bound_sql``."""
    table, q, bound_sql = pyformat(table), pyformat(q), pyformat(bound_sql)  # run with parameters
    bounds: list = []
    lo = None
    while True:
        if lo is None:
            cursor.execute(f"SELECT {bound_sql}, 1 FROM {table} ORDER BY {q} LIMIT 1 OFFSET %s", (chunk_size,))
        else:
            # `key > lo` is evaluated by the server, so equality follows the column's collation.
            cursor.execute(f"SELECT {bound_sql}, {q} > %s FROM {table} WHERE {q} >= %s ORDER BY {q} "
                           "LIMIT 1 OFFSET %s", (lo, lo, chunk_size))
        row = cursor.fetchone()
        if row is None:
            return bounds
        b, advanced = row
        if not advanced:  # more than chunk_size rows share this value: skip past it
            cursor.execute(f"SELECT MIN({bound_sql}) FROM {table} WHERE {q} > %s", (lo,))
            b = cursor.fetchone()[0]
            if b is None:
                return bounds
        bounds.append(b)
        lo = b


def _from_boundaries(table: str, key: str, bounds: list) -> list[Chunk]:
    edges = [None, *bounds, None]
    return [Chunk(table, i, key, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]
