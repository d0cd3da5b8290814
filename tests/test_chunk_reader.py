"""The watermark chunk reader's invariant, forced deterministically: writes are made
inside the (LW, HW] window, before or after the chunk's SELECT, and the chunk must
equal its range as of HW."""

from __future__ import annotations

import connectorx as cx
import pyarrow as pa
import pytest

from cdc_core.chunks.planning import Chunk
from cdc_core.chunks.reader import ChunkNotQuiet, ChunkReader
from cdc_core.schema.output import CDC_SEQ
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connect, connection_settings
from pipelines.reconcile.rows import canonical_value


def _reader(cfg, db_name, writes_before=(), writes_after=(), consistent=True):
    settings = connection_settings(cfg)
    control = connect(settings)
    url = settings.connectorx_url(db_name)
    writer = connect(settings, database=db_name)

    def fetch(sql: str) -> pa.Table:
        with writer.cursor() as cur:
            for w in writes_before:
                cur.execute(w)
            result = cx.read_sql(url, sql, return_type="arrow")
            for w in writes_after:
                cur.execute(w)
        return result

    return ChunkReader(settings, control, fetch, server_id=cfg.source.server_id + 1, consistent=consistent), control


def _expected(conn, schema, chunk):
    cond, params = chunk.where()
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{schema.table}` WHERE {cond}", params)
        return sorted(tuple(canonical_value(c, v) for c, v in zip(schema.columns, r)) for r in cur.fetchall())


def _rows(table: pa.Table, schema):
    return sorted(tuple(r[c.name] for c in schema.columns) for r in table.to_pylist())


WRITES_BEFORE = [  # visible to the SELECT and in the window: the fold must be idempotent
    "UPDATE t SET v = CONCAT(v, '+100') WHERE id = 16",
    "DELETE FROM t WHERE id = 18",
    "INSERT INTO t VALUES (35, 'new-before')",
]
WRITES_AFTER = [  # invisible to the SELECT: the fold must apply them
    "UPDATE t SET v = CONCAT(v, '+1000') WHERE id = 12",
    "DELETE FROM t WHERE id = 14",
    "INSERT INTO t VALUES (37, 'new-after')",
    "UPDATE t SET id = 99 WHERE id = 20",  # key moves out of the chunk
    "UPDATE t SET id = 39 WHERE id = 4",  # key moves in from another chunk
    "UPDATE t SET v = 'outside' WHERE id = 50",  # another chunk: ignored
]


@pytest.mark.parametrize("before,after", [(WRITES_BEFORE, []), ([], WRITES_AFTER), (WRITES_BEFORE, WRITES_AFTER)])
def test_chunk_equals_range_as_of_high_watermark(db, make_config, before, after):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"v{i}") for i in range(2, 121, 2)])
    cfg = make_config(name)
    reader, control = _reader(cfg, name, before, after)
    with control.cursor() as cur:
        schema = describe_table(cur, name, "t")
    chunk = Chunk(f"{name}.t", 1, "id", 10, 40)
    result = reader.read(schema, chunk)
    assert result.high_watermark > result.low_watermark
    assert result.window_changes == len([w for w in before + after if "outside" not in w])
    assert _rows(result.table, schema) == _expected(conn, schema, chunk)
    assert len(set(result.table.column("id").to_pylist())) == result.table.num_rows  # no duplicate keys
    seqs = dict(zip(result.table.column("id").to_pylist(), result.table.column(CDC_SEQ).to_pylist()))
    assert seqs[22] == result.high_watermark.seq()  # untouched rows: as of HW
    if after:  # rows the window wrote carry their change's own position, inside (LW, HW]
        assert result.low_watermark.seq() < seqs[37] < result.high_watermark.seq()


def test_string_key_ranges_follow_collation(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id VARCHAR(10) PRIMARY KEY, v INT) COLLATE utf8mb4_general_ci")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(k, 1) for k in ("a", "B", "c", "D", "e", "F")])
    cfg = make_config(name)
    # 'C' sorts between 'b' and 'd' in the collation (Python would put it before 'a')
    reader, control = _reader(cfg, name, [], ["INSERT INTO t VALUES ('Cc', 2)", "UPDATE t SET v = 9 WHERE id = 'c'",
                                              "INSERT INTO t VALUES ('ee', 3)"])
    with control.cursor() as cur:
        schema = describe_table(cur, name, "t")
    chunk = Chunk(f"{name}.t", 1, "id", "b", "d")
    result = reader.read(schema, chunk)
    assert _rows(result.table, schema) == _expected(conn, schema, chunk)
    assert set(result.table.column("id").to_pylist()) == {"B", "c", "Cc"}


def test_keyless_chunk_is_reread_until_quiet(db, make_config):
    """On a server without a consistent snapshot's position (``consistent=False`` stands for
    one): a key-less chunk is read again until a window is quiet for it."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (k INT NOT NULL, v INT)")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(10)])
    cfg = make_config(name)
    reader, control = _reader(cfg, name, [], ["UPDATE t SET v = v + 1 WHERE k = 3"], consistent=False)
    reader.max_attempts = 3
    with control.cursor() as cur:
        schema = describe_table(cur, name, "t")
    with pytest.raises(ChunkNotQuiet, match="rows changed during each of 3 reads"):
        reader.read(schema, Chunk(f"{name}.t", 0, "k", None, None))
    # writes outside the chunk's range do not force a re-read
    reader2, _ = _reader(cfg, name, [], ["UPDATE t SET v = v + 1 WHERE k = 9"], consistent=False)
    result = reader2.read(schema, Chunk(f"{name}.t", 0, "k", None, 5))
    assert result.attempts == 1 and result.table.num_rows == 5


@pytest.mark.parametrize("bad", [None, "0000-01-15 10:00:00", "2020-02-30 01:02:03", "0000-00-00 00:00:00"])
def test_dates_are_read_as_stored_and_impossible_ones_with_the_servers_check(db, make_config, bad):
    """DATE and DATETIME columns are selected as stored; a chunk holding a date the bulk reader
    refuses (a day past the month's end, a zero date: connectorx panics) or passes through as
    year 0 is read again with the server's check, which makes it NULL as the binlog decoder
    does; later chunks of that table use the check from the start. Either way the rows equal
    those of a read with the check alone."""
    from cdc_core.chunks import reader as chunk_reader

    name, conn = db
    table = f"d_{abs(hash(bad)) % 10_000}"
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, d DATE, t DATETIME(6))")
        cur.execute(f"INSERT INTO {table} VALUES (1, '1000-01-01', '9999-12-31 23:59:59.999999'), "
                    "(2, '2024-02-29', '2024-02-29 13:45:30.123456'), (3, NULL, NULL)")
        if bad:
            cur.execute(f"INSERT INTO {table} VALUES (4, %s, %s)", (bad[:10], bad))
        cur.execute(f"INSERT INTO {table} VALUES (10, '2021-03-04', '2021-03-04 05:06:07')")
    cfg = make_config(name)
    settings = connection_settings(cfg)
    schema = describe_table(conn.cursor(), name, table)
    url = settings.connectorx_url(name)
    sqls: list[str] = []

    def fetch(sql: str) -> pa.Table:
        sqls.append(sql)
        return cx.read_sql(url, sql, return_type="arrow")

    control = connect(settings)
    checked = ChunkReader(settings, control, fetch, server_id=cfg.source.server_id + 1)
    raw = ChunkReader(settings, control, fetch, server_id=cfg.source.server_id + 1, raw_dates=True)
    first, second = Chunk(schema.qualified_name, 0, "id", None, 10), Chunk(schema.qualified_name, 1, "id", 10, None)
    for chunk in (first, second):
        sqls.clear()
        expected = checked.read(schema, chunk).table
        assert len(sqls) == 1 and "IF(" in sqls[0]
        sqls.clear()
        got = raw.read(schema, chunk).table
        assert got.equals(expected)
        if bad is None:
            assert len(sqls) == 1 and "IF(" not in sqls[0]  # read as stored
        elif chunk is first:
            assert ["IF(" in s for s in sqls] == [False, True]  # refused or year 0: read again, checked
            assert got.column("d")[3].as_py() is None and got.column("t")[3].as_py() is None
        else:
            assert len(sqls) == 1 and "IF(" in sqls[0]  # the table is known to hold them
    assert (schema.qualified_name in chunk_reader._IMPOSSIBLE_DATES) == (bad is not None)
    control.close()
