"""Tables without any key, snapshotted without configuration (cdc_core/chunks/planning.py:
``choose_chunk_key``; cdc_core/chunks/consistent_read.py; cdc_core/chunks/reader.py).

- The chunk key of a table without a row key is a NOT NULL column leading one of its indexes;
  a table with none is one chunk without a key, or, on a server that reports no consistent
  snapshot position, refused by name with the ways out (validate says the same).
- A consistent snapshot's rows are the table as of the position it reports, whatever is
  written after it starts; a key-less chunk changed in its window is read that way.
- End to end: key-less tables holding duplicate rows (one with a NOT NULL index, one with an
  index on a nullable column only, one with no index), written during the snapshot and
  after it: after the stream, Delta = MySQL as multisets of rows.
"""

from __future__ import annotations

import random
import threading
import time

import connectorx as cx
import pytest

from cdc_core.chunks.consistent_read import consistent_snapshot, reports_snapshot_position
from cdc_core.chunks.planning import WHOLE_TABLE, Chunk, ChunkKeyError, choose_chunk_key
from cdc_core.chunks.reader import ChunkReader
from cdc_core.offset.position import master_position
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connect, connection_settings
from cdc_core.source.validate import check
from pipelines.lake.control_store import ControlStore
from pipelines.reconcile.rows import mysql_rows
from pipelines.stream import StreamEngine
from tests.helpers import assert_equal, snapshot
from tests.mysql_double import MySqlDouble


def test_chunk_key_of_a_table_without_a_key(db):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE idx (a INT, b VARCHAR(10) NOT NULL, c INT NOT NULL, t TEXT NOT NULL, "
                    "KEY ka (a), KEY zb (b), KEY kc (c, a), KEY kt (t(5)))")
        cur.execute("CREATE TABLE uniq (a INT, b INT NOT NULL, UNIQUE KEY ua (a, b), KEY kb (b))")
        cur.execute("CREATE TABLE bare (a INT, b INT)")
        cur.execute("CREATE TABLE nulls (a INT, b INT, KEY (a))")
        schemas = {t: describe_table(cur, name, t) for t in ("idx", "uniq", "bare", "nulls")}
        assert not any(s.row_key for s in schemas.values())
        can, cannot = (lambda: True), (lambda: False)
        # NOT NULL and leading an index (not a prefix), by index name: kc's c before zb's b.
        assert choose_chunk_key(cur, schemas["idx"], {}, cannot) == "c"
        assert choose_chunk_key(cur, schemas["uniq"], {}, cannot) == "b"  # ua leads with a nullable column
        assert choose_chunk_key(cur, schemas["idx"], {f"{name}.idx": "b"}, cannot) == "b"  # configured wins
        for t in ("bare", "nulls"):
            assert choose_chunk_key(cur, schemas[t], {}, can) == WHOLE_TABLE
            with pytest.raises(ChunkKeyError, match=rf"{name}\.{t} has no key and no NOT NULL indexed column, "
                                                    r"and this server cannot read it in one consistent snapshot"):
                choose_chunk_key(cur, schemas[t], {}, cannot)
        assert reports_snapshot_position(cur)  # MariaDB does


def test_mysql_reports_no_snapshot_position_and_opens_no_transaction():
    """MySQL's flavour answers that its consistent snapshot tells no binlog position: no read is
    opened (the planner then refuses a table only such a read could take, as above)."""
    server = MySqlDouble()
    with server.connect() as conn, conn.cursor() as cur:
        assert not reports_snapshot_position(cur)
        assert consistent_snapshot(cur) is None
    assert not any("TRANSACTION" in sql.upper() for sql in server.sent)


def test_consistent_snapshot_is_the_table_at_its_position(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (a INT, b INT)")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i % 4, i) for i in range(20)])
        schema = describe_table(cur, name, "t")
        cur.execute("SELECT a, b FROM t")
        before = sorted(cur.fetchall())
    settings = connection_settings(make_config(name))
    with connect(settings) as reader, reader.cursor() as rcur:
        at = consistent_snapshot(rcur)
        with conn.cursor() as cur:  # committed after the snapshot started: not in its reads
            cur.execute("INSERT INTO t VALUES (1, 100), (1, 100)")
            cur.execute("DELETE FROM t WHERE b < 5")
            after = master_position(cur)
        rcur.execute(f"SELECT a, b FROM `{name}`.t")
        assert sorted(rcur.fetchall()) == before
        rcur.execute("ROLLBACK")
    assert at is not None and at < after
    with connect(settings) as control, control.cursor() as cur:
        assert master_position(cur) == after  # nothing else was written: the snapshot's position is the end
        result = ChunkReader(settings, control, lambda sql: None, server_id=4321).read(
            schema, Chunk(schema.qualified_name, 0, WHOLE_TABLE))
    assert result.low_watermark == result.high_watermark == after  # the table, as of the binlog end
    with conn.cursor() as cur:
        cur.execute("SELECT a, b FROM t")
        assert sorted((r["a"], r["b"]) for r in result.table.to_pylist()) == sorted(cur.fetchall())


def test_keyless_chunk_changed_in_its_window_is_read_in_one_snapshot(db, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (k INT NOT NULL, v INT, KEY (k))")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i % 10, i) for i in range(40)])
        schema = describe_table(cur, name, "t")
    settings = connection_settings(make_config(name))
    writer = connect(settings, database=name)

    def fetch(sql: str):  # the watermark read: a write lands in every window
        table = cx.read_sql(settings.connectorx_url(name), sql, return_type="arrow")
        with writer.cursor() as cur:
            cur.execute("UPDATE t SET v = v + 1 WHERE k = 3 LIMIT 1")
            cur.execute("INSERT INTO t VALUES (4, 7)")
        return table

    chunk = Chunk(schema.qualified_name, 1, "k", 2, 6)
    with connect(settings) as control:
        result = ChunkReader(settings, control, fetch, server_id=4322).read(schema, chunk)
    writer.close()
    assert result.attempts == 2 and result.low_watermark == result.high_watermark
    with conn.cursor() as cur:
        assert master_position(cur) == result.high_watermark  # read after the last write
        cur.execute("SELECT k, v FROM t WHERE k >= 2 AND k < 6")
        assert sorted((r["k"], r["v"]) for r in result.table.to_pylist()) == sorted(cur.fetchall())


_WRITES = (
    "INSERT INTO {t} (a, b, note) VALUES (%(n)s, %(m)s, 'dup'), (%(n)s, %(m)s, 'dup'), (%(n)s, NULL, NULL)",
    "UPDATE {t} SET b = b + 1 WHERE a = %(n)s LIMIT 1",
    "UPDATE {t} SET note = 'same' WHERE a BETWEEN %(n)s AND %(n)s + 3",
    "DELETE FROM {t} WHERE a = %(n)s LIMIT 1",
    "DELETE FROM {t} WHERE a = %(n)s AND note = 'dup' LIMIT 2",
    "UPDATE {t} SET a = a + 1000 WHERE a = %(n)s LIMIT 1",
)


def _writer(settings, database: str, tables: list[str], stop: threading.Event, counts: dict) -> None:
    rng = random.Random(23)
    with connect(settings, database=database) as conn, conn.cursor() as cur:
        while not stop.is_set():
            statement = rng.choice(_WRITES).format(t=rng.choice(tables))
            cur.execute(statement, {"n": rng.randrange(80), "m": rng.randrange(5)})
            counts["ops"] += 1
            time.sleep(0.002)


def test_keyless_tables_with_duplicates_under_writes(db, spark, make_config):
    name, conn = db
    tables = {"indexed": "KEY (a)", "nullable_index": "KEY (b)", "bare": ""}
    with conn.cursor() as cur:
        for t, index in tables.items():
            a = "INT NOT NULL" if t == "indexed" else "INT"
            cur.execute(f"CREATE TABLE {t} (a {a}, b INT, note VARCHAR(10){', ' + index if index else ''})")
            cur.execute(f"INSERT INTO {t} SELECT seq % 60, seq % 5, IF(seq % 3, 'dup', NULL) FROM seq_1_to_600")
    cfg = make_config(name, parallelism=2, source={"snapshot": {"chunk_size": 40, "max_rows_per_task": 40}})
    assert check(cfg) == []  # no key is needed: validate refuses none of them
    names = [f"{name}.{t}" for t in tables]
    stop, counts = threading.Event(), {"ops": 0}
    t = threading.Thread(target=_writer, args=(connection_settings(cfg), name, list(tables), stop, counts))
    t.start()
    try:
        snapshot(cfg, spark)
        during = counts["ops"]
        while counts["ops"] < during + 200 and t.is_alive():
            time.sleep(0.05)
    finally:
        stop.set()
        t.join()
    assert during > 50, "the writer barely ran during the snapshot"
    plans = ControlStore.of(cfg).load_plans()
    assert {c.key for c in plans[f"{name}.indexed"]} == {"a"} and len(plans[f"{name}.indexed"]) > 5
    for whole in ("nullable_index", "bare"):
        assert plans[f"{name}.{whole}"] == [Chunk(f"{name}.{whole}", 0, WHOLE_TABLE)]
    records = {r.table: r for r in ControlStore.of(cfg).chunk_records()}
    assert records[f"{name}.bare"].low_watermark == records[f"{name}.bare"].high_watermark  # one snapshot

    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, names)  # keyless: compared as multisets of whole rows
    with connect(connection_settings(cfg)) as c2, c2.cursor() as cur:
        schema = describe_table(cur, name, "bare")
        rows = mysql_rows(cur, schema)
    assert len(rows) > len(set(rows)), "the table holds no duplicate rows: the test exercised nothing"
