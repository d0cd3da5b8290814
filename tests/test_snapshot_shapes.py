"""Snapshot of tables of every key shape: Delta equals MySQL row by row."""

from __future__ import annotations

import random

from deltalake import DeltaTable

from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from tests.helpers import assert_equal, snapshot


def _fill(conn, sql, rows):
    with conn.cursor() as cur:
        cur.executemany(sql, rows)


def test_uniform_int_pk(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, note VARCHAR(40), amount DECIMAL(12,2))")
    _fill(conn, "INSERT INTO orders VALUES (%s, %s, %s)", [(i, f"note {i}", i * 1.25) for i in range(1, 2001)])
    cfg = make_config(name, chunk_size=150)
    summary = snapshot(cfg, spark)
    (t,) = summary.tables
    assert t.chunks >= 13 and t.rows_written == 2000
    assert_equal(cfg, [f"{name}.orders"])
    cols = DeltaTable(table_uri(cfg.sink.path, f"{name}.orders")).schema().fields
    assert [f.name for f in cols] == ["id", "note", "amount", "_cdc_op", "_cdc_seq"]


def test_sparse_and_skewed_int_pk(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE events (id BIGINT PRIMARY KEY, v INT)")
    rng = random.Random(7)
    ids = set(range(1, 1500)) | {rng.randrange(10**6, 10**15) for _ in range(500)} | {2**62, -(2**62)}
    _fill(conn, "INSERT INTO events VALUES (%s, %s)", [(i, i % 97) for i in ids])
    cfg = make_config(name, chunk_size=100)
    summary = snapshot(cfg, spark)
    assert summary.tables[0].chunks >= 15  # boundary queries, not one huge arithmetic range
    assert_equal(cfg, [f"{name}.events"])


def test_varchar_pk_case_insensitive(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE users (email VARCHAR(80) PRIMARY KEY, nick VARCHAR(20)) COLLATE utf8mb4_general_ci")
    rows = [(f"{'U' if i % 3 else 'u'}ser{i:05d}@example.com", f"n{i} 😀") for i in range(1200)]
    _fill(conn, "INSERT INTO users VALUES (%s, %s)", rows)
    cfg = make_config(name, chunk_size=100)
    assert snapshot(cfg, spark).tables[0].chunks >= 12
    assert_equal(cfg, [f"{name}.users"])


def test_composite_pk_with_heavy_leading_value(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE `lines` (order_id INT, line INT, qty INT, PRIMARY KEY (order_id, line))")
    rows = [(1, i, i) for i in range(500)] + [(o, n, o * n) for o in range(2, 300) for n in range(3)]
    _fill(conn, "INSERT INTO `lines` VALUES (%s, %s, %s)", rows)
    cfg = make_config(name, chunk_size=100)
    snapshot(cfg, spark)
    assert_equal(cfg, [f"{name}.lines"])


def test_no_pk_with_chunk_key(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE logs (ts INT NOT NULL, msg VARCHAR(30))")
    _fill(conn, "INSERT INTO logs VALUES (%s, %s)", [(i // 3, f"m{i}") for i in range(900)] + [(5, "m15")])
    cfg = make_config(name, chunk_size=100,
                      source={"snapshot": {"chunk_size": 100, "chunk_key_columns": {f"{name}.logs": "ts"}}})
    snapshot(cfg, spark)
    assert_equal(cfg, [f"{name}.logs"])


def test_empty_table(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE nothing (id INT PRIMARY KEY, v TEXT)")
    cfg = make_config(name)
    summary = snapshot(cfg, spark)
    assert summary.tables[0].chunks == 1 and summary.tables[0].delta_rows == 0
    assert_equal(cfg, [f"{name}.nothing"])


def test_rerun_after_success_is_noop(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    _fill(conn, "INSERT INTO t VALUES (%s)", [(i,) for i in range(300)])
    cfg = make_config(name, chunk_size=50)
    snapshot(cfg, spark)
    version = DeltaTable(table_uri(cfg.sink.path, f"{name}.t")).version()
    again = snapshot(cfg, spark)
    assert again.tables[0].chunks_read == 0 and again.rows_read == 0
    assert DeltaTable(table_uri(cfg.sink.path, f"{name}.t")).version() == version
    assert_equal(cfg, [f"{name}.t"])


def test_table_without_key_is_read_whole(db, spark, make_config):
    """No key, no index, no configuration: one chunk read in one consistent snapshot, duplicates kept
    (under writes: tests/test_keyless_tables.py)."""
    from cdc_core.chunks.planning import WHOLE_TABLE

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE k (a INT, b INT)")
        cur.execute("INSERT INTO k SELECT seq % 7, NULLIF(seq % 3, 0) FROM seq_1_to_300")
    cfg = make_config(name, source={"snapshot": {"chunk_size": 50}})
    summary = snapshot(cfg, spark)
    assert summary.tables[0].rows_written == 300
    assert [c.key for c in ControlStore.of(cfg).load_plans()[f"{name}.k"]] == [WHOLE_TABLE]
    assert_equal(cfg, [f"{name}.k"])
