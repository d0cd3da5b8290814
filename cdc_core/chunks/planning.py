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
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cdc_core.errors import BadInput
from cdc_core.schema.table import TableSchema, quote_ident

DENSE_FACTOR = 4.0
INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "bigint"}


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
        """SQL condition and parameters selecting this chunk's rows."""
        q = quote_ident(self.key)
        parts, params = [], []
        if self.lo is not None:
            parts.append(f"{q} >= %s")
            params.append(self.lo)
        if self.hi is not None:
            parts.append(f"{q} < %s")
            params.append(self.hi)
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


def encode_value(v: Any) -> Any:
    """JSON-safe, type-tagged form of a key value (for durable chunk plans)."""
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
    }[kind](s)


def chunk_key(schema: TableSchema, configured: dict[str, str]) -> str:
    """The column a table is split on: its configured chunk key, else the leading PK column."""
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
        return name
    if schema.row_key:
        return schema.row_key[0]
    raise ChunkKeyError(
        f"{schema.qualified_name} has no primary key and no NOT NULL unique key: add one, or set "
        f"source.snapshot.chunk_key_columns: {{'{schema.qualified_name}': <a NOT NULL column>}}"
    )


def plan_chunks(cursor, schema: TableSchema, key: str, chunk_size: int) -> list[Chunk]:
    """Split ``schema``'s table on ``key`` into chunks of about ``chunk_size`` rows."""
    table = f"{quote_ident(schema.database)}.{quote_ident(schema.table)}"
    q = quote_ident(key)
    cursor.execute(f"SELECT MIN({q}), MAX({q}) FROM {table}")
    lo, hi = cursor.fetchone()
    name = schema.qualified_name
    if lo is None:
        return [Chunk(name, 0, key)]
    if schema.column(key).data_type in INTEGER_TYPES:
        cursor.execute(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (schema.database, schema.table),
        )
        estimate = max(int(cursor.fetchone()[0] or 0), 1)
        if (hi - lo + 1) / estimate <= DENSE_FACTOR:
            step = max(int(chunk_size * (hi - lo + 1) / estimate), 1)
            return _from_boundaries(name, key, list(range(lo + step, hi + 1, step)))
    return _from_boundaries(name, key, _query_boundaries(cursor, table, q, chunk_size))


def _query_boundaries(cursor, table: str, q: str, chunk_size: int) -> list:
    """Boundaries by index walks: each is the key ``chunk_size`` rows past the previous one."""
    bounds: list = []
    lo = None
    while True:
        if lo is None:
            cursor.execute(f"SELECT {q}, 1 FROM {table} ORDER BY {q} LIMIT 1 OFFSET %s", (chunk_size,))
        else:
            # `key > lo` is evaluated by the server, so equality follows the column's collation.
            cursor.execute(f"SELECT {q}, {q} > %s FROM {table} WHERE {q} >= %s ORDER BY {q} LIMIT 1 OFFSET %s",
                           (lo, lo, chunk_size))
        row = cursor.fetchone()
        if row is None:
            return bounds
        b, advanced = row
        if not advanced:  # more than chunk_size rows share this value: skip past it
            cursor.execute(f"SELECT MIN({q}) FROM {table} WHERE {q} > %s", (lo,))
            b = cursor.fetchone()[0]
            if b is None:
                return bounds
        bounds.append(b)
        lo = b


def _from_boundaries(table: str, key: str, bounds: list) -> list[Chunk]:
    edges = [None, *bounds, None]
    return [Chunk(table, i, key, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]
