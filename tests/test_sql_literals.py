"""Key values and names that look like SQL, placeholders or format fields, through every place
binlake puts a key into SQL text, against a real MariaDB: values holding ``%s``, ``%``, quotes,
backslashes, NUL bytes, ``?``, ``{}`` and SQL text, in a table and a key column whose names
hold ``%s`` too.

- The chunk SELECT (cdc_core/chunks/reader.py: ``chunk_select_sql``) renders its bounds in one
  pass: for every pair of such bounds it selects exactly the rows the server's own
  parameterized query does, through the bulk reader and through the text protocol in one
  consistent snapshot (cdc_core/chunks/consistent_read.py).
- The planner's walks (cdc_core/chunks/planning.py), the snapshot's row counts
  (pipelines/snapshot/verify.py), the hand-off's key order (cdc_core/types/key_order.py, the
  server's sort keys and its comparisons), the stream, ``binlake reconcile``'s per-chunk
  checksums (pipelines/reconcile/checksums.py) and an online backfill of a range whose bounds
  are such values (pipelines/stream/online_backfill.py): Delta = MySQL row by row.
"""

from __future__ import annotations

import connectorx as cx
import pytest

from cdc_core.chunks.incremental import BackfillState
from cdc_core.chunks.planning import Chunk, plan_chunks
from cdc_core.chunks.reader import ChunkReader, chunk_select_sql
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connect, connection_settings
from cdc_core.types.key_order import KeyOrders, ServerSql
from pipelines.backfill.requests import request_backfill
from pipelines.lake.control_store import ControlStore
from pipelines.reconcile.checksums import reconcile_tables
from pipelines.stream import StreamEngine
from tests.helpers import assert_equal, snapshot

NASTY = ("a%s00001'\\", "%", "%%", "%s", "%s%s", "%(x)s", "100%", "'", "''", '"', "\\", "\\'", "a\x00b", "\x00",
         "?", "??", "{}", "{0}", "{x}", "'; DROP TABLE t; --", "`", "a`b", ") OR 1=1 -- ", "\\%s", "%\\", "\n%s\r")
TABLE, KEY = "p%s'`t", "k%s"  # names holding a placeholder, a quote and a backtick too


def _keys(n: int = 12) -> list[str]:
    return [f"{nasty}{i:03d}" for nasty in NASTY for i in range(n)] + list(NASTY)


def _create(cur, collation: str = "utf8mb4_bin") -> None:
    cur.execute(f"CREATE TABLE `p%s'``t` (`k%s` VARCHAR(40) COLLATE {collation} PRIMARY KEY, v INT, "
                "b VARBINARY(60))")
    cur.executemany("INSERT INTO `p%%s'``t` VALUES (%s, %s, %s)",  # run with parameters: `%` doubled
                    [(k, i, k.encode() + b"\x00%s") for i, k in enumerate(_keys())])


def _rows_between(cur, database: str, lo, hi) -> list:
    """The server's own answer: the rows of ``[lo, hi)``, bounds as parameters."""
    cur.execute(f"SELECT `k%%s`, v FROM `{database}`.`p%%s'``t` WHERE `k%%s` >= %s AND `k%%s` < %s", (lo, hi))
    return sorted(cur.fetchall())


@pytest.mark.parametrize("collation", ["utf8mb4_bin", "utf8mb4_general_ci"])
def test_chunk_select_renders_bounds_in_one_pass(db, make_config, collation):
    name, conn = db
    with conn.cursor() as cur:
        _create(cur, collation)
        schema = describe_table(cur, name, TABLE)
    settings = connection_settings(make_config(name))
    url = settings.connectorx_url(name)
    ordered = sorted(NASTY)
    with connect(settings) as control, control.cursor() as cur:
        reader = ChunkReader(settings, control, lambda sql: cx.read_sql(url, sql, return_type="arrow"), server_id=4323)
        for lo, hi in zip(ordered, ordered[1:]):
            want = _rows_between(cur, name, lo, hi)
            chunk = Chunk(schema.qualified_name, 1, KEY, lo, hi)
            sql = chunk_select_sql(schema, chunk, control.escape)
            got = cx.read_sql(url, sql, return_type="arrow")
            assert sorted(zip(got.column(KEY).to_pylist(), got.column("v").to_pylist())) == want, sql
            consistent = reader.read_consistent(schema, chunk, 1)  # the text protocol, in one snapshot
            assert sorted((r[KEY], r["v"]) for r in consistent.table.to_pylist()) == want, sql


def test_key_order_takes_such_values_as_parameters(db):
    """The server's sort keys (WeightOrder) and its comparisons (ComparisonOrder) of such
    values: every value's chunk is the one the server's ``<=`` gives."""
    name, conn = db
    for collation in ("utf8mb4_general_ci", "utf8mb4_uca1400_nopad_ai_cs"):
        with conn.cursor() as cur:
            cur.execute(f"CREATE OR REPLACE TABLE s (`k%s` VARCHAR(40) COLLATE {collation} PRIMARY KEY)")
            cur.executemany("INSERT IGNORE INTO s VALUES (%s)", [(b,) for b in NASTY[::2]])
            cur.execute("SELECT `k%s` FROM s ORDER BY `k%s`")
            bounds = [r[0] for r in cur.fetchall()]  # distinct and ascending, as the planner makes them
            values = _keys(2)
            truth = []
            for v in values:
                cur.execute("SELECT COUNT(*) FROM s WHERE `k%%s` <= %s", (v,))
                truth.append(cur.fetchone()[0])
            schema = describe_table(cur, name, "s")
        order = KeyOrders(ServerSql.on(conn)).for_column(schema.column(KEY))
        assert order.partition(bounds).locate(values) == truth, collation


def test_snapshot_stream_reconcile_and_backfill_with_such_keys(db, spark, make_config):
    name, conn = db
    with conn.cursor() as cur:
        _create(cur)
        schema = describe_table(cur, name, TABLE)
        bounds = {c.lo for c in plan_chunks(cur, schema, KEY, 9)[1:]}
    assert any("%s" in b for b in bounds) and any("'" in b for b in bounds) and any("\x00" in b for b in bounds)
    cfg = make_config(name, chunk_size=9, parallelism=2)
    table = f"{name}.{TABLE}"
    summary = snapshot(cfg, spark)  # its row counts: a COUNT(*) per span of chunks, bounds as parameters
    assert summary.tables[0].chunks > 20
    assert_equal(cfg, [table])
    with conn.cursor() as cur:  # the stream: changes and key moves among such keys
        cur.execute("UPDATE `p%s'``t` SET v = v + 1000 WHERE `k%s` LIKE 'a%'")  # no parameters: no formatting
        cur.execute("UPDATE `p%s'``t` SET `k%s` = CONCAT(`k%s`, '%s?') WHERE v % 7 = 0")
        cur.execute("DELETE FROM `p%s'``t` WHERE v % 5 = 0")
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, [table])
    report = reconcile_tables(cfg, [table], rechecks=0, record=False)
    assert report.equal and report.tables[0].chunks_checked > 20

    with conn.cursor() as cur:  # MySQL changes the binlog does not carry: Delta is now wrong
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("UPDATE `p%s'``t` SET v = -v")
        cur.execute("SET SESSION sql_log_bin = 1")
    report = reconcile_tables(cfg, [table], rechecks=0, record=False)
    assert not report.equal and all(m.lo is None or isinstance(m.lo, str) for m in report.mismatches)
    req = request_backfill(cfg, table, "%s", "a%s00001'\\")  # bounds holding a placeholder, quote, backslash
    StreamEngine(cfg, until_now=True).run()
    done = next(r for r in ControlStore.of(cfg).backfills() if r.id == req.id)
    assert done.rows > 0 and done.state == BackfillState.DONE, done
    with connect(connection_settings(cfg)) as c2, c2.cursor() as cur:
        repaired = _rows_between(cur, name, "%s", "a%s00001'\\")
    report = reconcile_tables(cfg, [table], rechecks=0, record=False)
    assert not report.equal  # the rest is still wrong...
    request_backfill(cfg, table)
    StreamEngine(cfg, until_now=True).run()
    assert_equal(cfg, [table])  # ...until the whole table is backfilled
    assert repaired
