"""How a chunk's SELECT is fetched as Arrow: connectorx (fast) on plain connections, pymysql
over TLS when ``source.ssl`` is set.

connectorx 0.4 cannot speak TLS to MySQL: its MySQL source builds the connection from the URL
alone (rust ``mysql`` crate 25, whose URL takes no TLS option) and sets no TLS options, so it
could neither verify a CA nor even encrypt. Rather than read chunks in the clear, a TLS source
is read with pymysql through the same verified TLS context as every other connection
(cdc_core/source/connection.py); it is slower (pure Python), and exact.

Invariant (tests/test_tls.py::test_text_reader_equals_connectorx_on_the_type_matrix): for
every supported type, :func:`text_fetch` returns, after ``types.snapshot_array``, the same
values as the connectorx fetch. The text protocol prints FLOAT with 6 digits, so FLOAT columns
are fetched as ``CAST(… AS DOUBLE)`` (exact), around the chunk's own SELECT.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pymysql
import pymysql.cursors

from cdc_core.chunks.planning import INTEGER_TYPES
from cdc_core.schema.table import Column, TableSchema, quote_ident
from cdc_core.source.connection import ConnectionSettings, connect
from cdc_core.types.mapping import SPATIAL_TYPES

Fetch = Callable[[str], pa.Table]
FETCH_ROWS = 10_000
_BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


def chunk_fetch(conn: ConnectionSettings, schema: TableSchema) -> Fetch:
    """The fetch a chunk reader of ``schema`` uses: connectorx, or pymysql when TLS is required."""
    if conn.tls is not None:
        return lambda sql: text_fetch(conn, schema, sql)
    import connectorx as cx  # imported where it runs (Spark executors)

    url = conn.connectorx_url(schema.database)
    return lambda sql: cx.read_sql(url, sql, return_type="arrow")


def refuses_impossible_dates(conn: ConnectionSettings) -> bool:
    """Whether :func:`chunk_fetch`'s reader fails on an impossible DATE or DATETIME value
    rather than reading a wrong one (connectorx does; the text reader gets the server's
    check), so a chunk SELECT may read those columns as stored (cdc_core/chunks/reader.py)."""
    return conn.tls is None


def _raw_type(col: Column) -> pa.DataType:
    """The Arrow type of ``types.select_expr(col)``'s value as the text protocol returns it."""
    t = col.data_type
    if t == "decimal" or (t == "bigint" and col.unsigned):
        return pa.string()  # selected as CHAR
    if t == "bit":
        return pa.uint64()  # selected as UNSIGNED
    if t in INTEGER_TYPES or t in ("time", "timestamp", "year"):
        return pa.int64()  # time and timestamp: selected as signed microseconds
    if t in ("float", "double"):
        return pa.float64()
    if t == "date":
        return pa.date32()
    if t == "datetime":
        return pa.timestamp("us")
    if t in _BINARY_TYPES or t in SPATIAL_TYPES:  # spatial: selected AS BINARY
        return pa.binary()
    return pa.string()


def text_fetch(conn: ConnectionSettings, schema: TableSchema, sql: str) -> pa.Table:
    """Run a chunk SELECT of ``schema`` (columns named as in the table) over a pymysql connection
    and return its rows as Arrow, streamed in batches of ``FETCH_ROWS``."""
    outer = ", ".join(f"CAST({quote_ident(c.name)} AS DOUBLE) AS {quote_ident(c.name)}" if c.data_type == "float"
                      else quote_ident(c.name) for c in schema.columns)
    columns: list[list] = [[] for _ in schema.columns]
    with connect(conn, database=schema.database, cursorclass=pymysql.cursors.SSCursor) as c, c.cursor() as cur:
        cur.execute(f"SELECT {outer} FROM ({sql}) AS binlake_chunk")
        while rows := cur.fetchmany(FETCH_ROWS):
            for i, values in enumerate(zip(*rows)):
                columns[i].extend(values)
    return pa.Table.from_arrays([pa.array(v, type=_raw_type(c)) for v, c in zip(columns, schema.columns)],
                                names=[c.name for c in schema.columns])
