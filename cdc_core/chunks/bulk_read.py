"""How a chunk's SELECT is fetched as Arrow: connectorx (fast) on plain connections, pymysql
over TLS when ``source.ssl`` is set.

connectorx 0.4 cannot speak TLS to MySQL: its MySQL source builds the connection from the URL
alone (rust ``mysql`` crate 25, whose URL takes no TLS option) and sets no TLS options, so it
could neither verify a CA nor even encrypt. Rather than read chunks in the clear, a TLS source
is read with pymysql through the same verified TLS context as every other connection
(cdc_core/source/connection.py); it is slower (pure Python), and exact.

Invariant (tests/test_tls.py::test_text_reader_equals_connectorx_on_the_type_matrix): for
every supported type, :func:`text_fetch` returns, after ``types.snapshot_array``, the same
values as the connectorx fetch. Each column's codec gives the Arrow type of its value as the
text protocol returns it (``Codec.raw_type``) and its outer SELECT (``Codec.text_fetch_expr``:
the text protocol prints FLOAT with 6 digits, so FLOAT columns are fetched as ``CAST(… AS
DOUBLE)``, exact, around the chunk's own SELECT).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pymysql
import pymysql.cursors

from cdc_core.schema.table import TableSchema, quote_ident
from cdc_core.source.connection import ConnectionSettings, connect
from cdc_core.types.registry import codec_for

Fetch = Callable[[str], pa.Table]
FETCH_ROWS = 10_000


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


def text_fetch(conn: ConnectionSettings, schema: TableSchema, sql: str) -> pa.Table:
    """Run a chunk SELECT of ``schema`` (columns named as in the table) over a pymysql connection
    and return its rows as Arrow, streamed in batches of ``FETCH_ROWS``."""
    with connect(conn, database=schema.database) as c:
        return text_rows(c, schema, sql)


def text_rows(conn: pymysql.connections.Connection, schema: TableSchema, sql: str) -> pa.Table:
    """:func:`text_fetch` on an open connection (in its transaction, if one is open)."""
    column_codecs = [codec_for(c) for c in schema.columns]
    outer = ", ".join(k.text_fetch_expr(c, quote_ident(c.name)) for k, c in zip(column_codecs, schema.columns))
    columns: list[list] = [[] for _ in schema.columns]
    with conn.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(f"SELECT {outer} FROM ({sql}) AS binlake_chunk")
        while rows := cur.fetchmany(FETCH_ROWS):
            for i, values in enumerate(zip(*rows)):
                columns[i].extend(values)
    arrays = [pa.array(v, type=k.raw_type(c)) for v, k, c in zip(columns, column_codecs, schema.columns)]
    return pa.Table.from_arrays(arrays, names=[c.name for c in schema.columns])
