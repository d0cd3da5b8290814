"""Partition maintenance changes rows without writing them to the binlog: TRUNCATE PARTITION
and DROP PARTITION delete a partition's rows, EXCHANGE PARTITION swaps them with another
table's, CONVERT PARTITION moves them into a new table. Before, the stream recorded these
ALTERs as "not understood" and streamed on, and Delta kept the rows MySQL dropped; now every
captured table whose rows they changed is backfilled online (cdc_core/schema/change.py:
``ROWS_CHANGED_UNSEEN``)."""

from __future__ import annotations

from cdc_core.offset.position import master_position
from cdc_core.schema.change import UnparsedDDL, parse_ddl
from tests.helpers import assert_equal
from tests.test_stream import stream_until_now


def test_which_alters_change_rows_unseen():
    def unparsed(sql: str) -> UnparsedDDL:
        try:
            parse_ddl(sql, "db")
        except UnparsedDDL as e:
            return e
        raise AssertionError(f"parsed: {sql}")

    e = unparsed("ALTER TABLE s EXCHANGE PARTITION p2 WITH TABLE other.x WITHOUT VALIDATION")
    assert e.rows_changed and e.tables == ("db.s", "other.x")
    e = unparsed("ALTER TABLE s CONVERT PARTITION p3 TO TABLE y")
    assert e.rows_changed and e.tables == ("db.s", "db.y")
    for sql in ("ALTER TABLE s TRUNCATE PARTITION p0, p1", "ALTER TABLE s DROP PARTITION p1"):
        assert unparsed(sql).rows_changed and unparsed(sql).tables == ("db.s",), sql
    assert parse_ddl("ALTER TABLE s REORGANIZE PARTITION p0 INTO (PARTITION a VALUES LESS THAN (5), "
                     "PARTITION b VALUES LESS THAN (10))", "db") == []  # rows stay in the table


def test_partition_maintenance_is_backfilled(db, make_config):
    name, conn = db
    tables = [f"{name}.{t}" for t in ("s", "x", "y")]
    with conn.cursor() as cur:
        at = master_position(cur)
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, v INT) PARTITION BY RANGE (id) "
                    "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20), "
                    "PARTITION p2 VALUES LESS THAN (30), PARTITION p3 VALUES LESS THAN (40), "
                    "PARTITION p4 VALUES LESS THAN MAXVALUE)")
        cur.execute("INSERT INTO s SELECT seq, seq FROM seq_1_to_50")
        cur.execute("CREATE TABLE x (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO x VALUES (25, 250), (26, 260)")
    cfg = make_config(name, source={"startup": {"mode": "specific", "file": at.file, "pos": at.pos}})
    stream_until_now(cfg)
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE s TRUNCATE PARTITION p0")
        cur.execute("ALTER TABLE s DROP PARTITION p1")
        cur.execute("ALTER TABLE s EXCHANGE PARTITION p2 WITH TABLE x")
        cur.execute("ALTER TABLE s CONVERT PARTITION p3 TO TABLE y")
        cur.execute("UPDATE s SET v = -v WHERE id > 45")  # streamed after the backfill's baseline, or in it
    stream_until_now(cfg)
    assert_equal(cfg, tables)
