"""Rows are decoded and applied with the schema in force at their binlog position, however
late they are read (cdc_core/schema/history.py, pipelines/stream/schema_operator.py).

The DDL matrix runs in two orders under all five behaviours: *live* (the stream started
and stopped between every two statements: a restart between any two steps) and
*catch-up* (everything written after the snapshot, then streamed in one run). In both
orders the rows written before a DDL are read after it already ran in MySQL."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from cdc_core.offset.position import BinlogPosition
from cdc_core.schema.history import Status
from cdc_core.schema.table import describe_table
from cdc_core.source.connection import connect, connection_settings
from pipelines.lake.control_store import ControlStore
from pipelines.lake.tables import table_uri
from pipelines.schema.applier import SchemaChangeRejected
from pipelines.stream import StreamEngine
from tests.helpers import EngineThread, assert_equal, diff_tables, snapshot


def _stream(cfg):
    return StreamEngine(cfg, until_now=True).run()


def test_rename_read_after_it_ran_keeps_the_values(db, spark, make_config):
    """A rename read after it ran: snapshot, then UPDATE, CHANGE COLUMN, INSERT, then stream."""
    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10))")
        cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, i, f"b{i}") for i in range(1, 11)])
    cfg = make_config(name)
    snapshot(cfg, spark)
    with conn.cursor() as cur:
        cur.execute("UPDATE t SET b = 'upd' WHERE id <= 3")
        cur.execute("ALTER TABLE t CHANGE COLUMN b b_long VARCHAR(200)")
        cur.execute("INSERT INTO t VALUES (11, 11, 'after')")
        cur.execute("ALTER TABLE t RENAME COLUMN a TO a2")
        cur.execute("UPDATE t SET a2 = -a2 WHERE id IN (1, 11)")
    _stream(cfg)
    assert_equal(cfg, [f"{name}.t"])
    rows = {r["id"]: r for r in DeltaTable(table_uri(cfg.sink.path, f"{name}.t")).to_pyarrow_table().to_pylist()}
    assert [rows[i]["b_long"] for i in (1, 2, 3, 4, 11)] == ["upd", "upd", "upd", "b4", "after"]
    assert [rows[i]["a2"] for i in (1, 2, 11)] == [-1, 2, -11]


BASE = "id INT PRIMARY KEY, a INT, s VARCHAR(10), d DECIMAL(6,2)"
BASE_COLUMNS = ["id", "a", "s", "d"]
# Each case: one table, its statements in order (DML before, the DDL, DML after; a few
# cases several DDLs). Statements of all cases are interleaved round-robin.
CASES: dict[str, list[str]] = {
    "add_last": ["UPDATE {t} SET s = 'u1' WHERE id = 1", "ALTER TABLE {t} ADD COLUMN n VARCHAR(20)",
                 "INSERT INTO {t} (id, a, n) VALUES (10, 1, 'new')", "UPDATE {t} SET n = 'x' WHERE id = 2"],
    "add_first_default": ["UPDATE {t} SET a = a + 100 WHERE id = 2", "ALTER TABLE {t} ADD COLUMN n INT NOT NULL "
                          "DEFAULT 7 FIRST", "INSERT INTO {t} (id, n) VALUES (10, 3)", "UPDATE {t} SET a = 0"],
    "add_after_default": ["INSERT INTO {t} (id, a) VALUES (9, 9)",
                          "ALTER TABLE {t} ADD COLUMN n VARCHAR(5) DEFAULT 'dv' AFTER a",
                          "UPDATE {t} SET n = 'set' WHERE id = 9", "DELETE FROM {t} WHERE id = 1"],
    "add_after_nullable": ["UPDATE {t} SET d = 1.5", "ALTER TABLE {t} ADD COLUMN n DATE AFTER id",
                           "INSERT INTO {t} (id, n) VALUES (10, '2024-02-29')"],
    "dropcol": ["UPDATE {t} SET s = 'gone' WHERE id = 3", "ALTER TABLE {t} DROP COLUMN s",
             "INSERT INTO {t} (id, a) VALUES (10, 5)", "UPDATE {t} SET a = 9 WHERE id = 1"],
    "rename": ["UPDATE {t} SET s = 'before' WHERE id <= 2", "ALTER TABLE {t} RENAME COLUMN s TO s2",
               "INSERT INTO {t} (id, s2) VALUES (10, 'r')", "UPDATE {t} SET s2 = 'after' WHERE id = 2"],
    "change": ["UPDATE {t} SET s = 'upd' WHERE id <= 3", "ALTER TABLE {t} CHANGE COLUMN s s_long VARCHAR(200)",
               "INSERT INTO {t} (id, s_long) VALUES (10, REPEAT('y', 150))"],
    "widen": ["UPDATE {t} SET a = -a", "ALTER TABLE {t} MODIFY a BIGINT",
              "INSERT INTO {t} (id, a) VALUES (10, 50000000000)"],
    "decimal": ["UPDATE {t} SET d = 12.34 WHERE id = 1", "ALTER TABLE {t} MODIFY d DECIMAL(12,4)",
                "INSERT INTO {t} (id, d) VALUES (10, 12345678.1234)"],
    "multi": ["UPDATE {t} SET s = 'm' WHERE id = 1",
              "ALTER TABLE {t} ADD COLUMN m1 INT DEFAULT 3 AFTER id, DROP COLUMN d, RENAME COLUMN s TO s3, "
              "MODIFY a BIGINT", "INSERT INTO {t} (id, m1, s3) VALUES (10, 1, 'z')",
              "UPDATE {t} SET a = 7000000000 WHERE id = 2"],
    "sequence": ["ALTER TABLE {t} ADD COLUMN mid INT DEFAULT 5 AFTER a", "UPDATE {t} SET mid = 6 WHERE id = 1",
                 "ALTER TABLE {t} RENAME COLUMN a TO a2", "INSERT INTO {t} (id, a2, mid) VALUES (10, 10, 10)",
                 "UPDATE {t} SET a2 = a2 * 2", "ALTER TABLE {t} CHANGE COLUMN s s2 VARCHAR(40)",
                 "ALTER TABLE {t} MODIFY mid BIGINT", "ALTER TABLE {t} DROP COLUMN d",
                 "DELETE FROM {t} WHERE id = 3", "INSERT INTO {t} (id, s2) VALUES (11, 'last')"],
    "trunc": ["UPDATE {t} SET a = 1", "TRUNCATE TABLE {t}", "INSERT INTO {t} (id, a) VALUES (10, 1)"],
    "created": ["CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(5))", "INSERT INTO {t} VALUES (1, 'a'), (2, 'b')",
                "ALTER TABLE {t} ADD COLUMN w INT DEFAULT 4", "UPDATE {t} SET v = 'c' WHERE id = 2"],
    "recreated": ["DROP TABLE {t}", "CREATE TABLE {t} (id INT PRIMARY KEY, q INT)", "INSERT INTO {t} VALUES (5, 5)"],
}
AFTER_SNAPSHOT = {"created"}  # created by the statements, not before the snapshot


def _statements():
    """(case, statement) of every case, interleaved round-robin."""
    queues = {case: list(stmts) for case, stmts in CASES.items()}
    while any(queues.values()):
        for case, q in queues.items():
            if q:
                yield case, q.pop(0)


def _write(cur, name: str):
    """Run the statements in order; yields after each one."""
    for case, stmt in _statements():
        cur.execute(stmt.format(t=f"`{name}`.`{case}`"))
        yield case


def _setup(db, spark, make_config, behavior: str, order: str):
    name, conn = db
    with conn.cursor() as cur:
        for case in CASES:
            if case not in AFTER_SNAPSHOT:
                cur.execute(f"CREATE TABLE `{case}` ({BASE})")
                cur.executemany(f"INSERT INTO `{case}` VALUES (%s, %s, %s, %s)",
                                [(i, i, f"s{i}", i / 4) for i in (1, 2, 3)])
    cfg = make_config(name, pipeline={"schema_change_behavior": behavior, "name": f"{behavior}_{order}_{name}"})
    snapshot(cfg, spark)
    return name, conn, cfg


def _delta_columns(cfg, table: str) -> list[str]:
    names = DeltaTable(table_uri(cfg.sink.path, table)).schema().to_arrow().names
    return [n for n in names if not n.startswith("_cdc_")]


def _live(cases: list[str], name: str) -> list[str]:
    return [f"{name}.{c}" for c in cases]


def _check(cfg, name: str, behavior: str) -> None:
    tables = _live(CASES, name)
    if behavior in ("evolve", "try_evolve", "lenient"):
        diffs = [d for d in diff_tables(cfg, tables) if not d.equal]
        assert not diffs, "\n".join(d.describe() for d in diffs)
    if behavior in ("evolve", "try_evolve"):
        with_mysql = {d.table: d for d in diff_tables(cfg, tables)}
        assert set(with_mysql) == set(tables)
        with connect(connection_settings(cfg)) as c, c.cursor() as cur:
            for t in tables:
                mysql = [col.name for col in describe_table(cur, *t.split(".", 1)).columns]
                assert sorted(_delta_columns(cfg, t)) == sorted(mysql), t  # same columns (Delta appends new ones)
    if behavior == "ignore":  # Delta keeps the columns it had; those still in MySQL hold MySQL's values
        for case in CASES:
            if case in AFTER_SNAPSHOT or case == "recreated":
                continue
            assert _delta_columns(cfg, f"{name}.{case}") == BASE_COLUMNS, case
        (trunc,) = diff_tables(cfg, _live(["trunc"], name))
        assert trunc.equal, trunc.describe()  # TRUNCATE and rows of unchanged columns apply under ignore
    history = ControlStore(cfg.sink.path, cfg.pipeline.name).schema_history()
    assert not [e for e in history if e.status == Status.DIVERGED], "the history read every change right"


@pytest.mark.parametrize("behavior", ["evolve", "try_evolve", "lenient", "ignore"])
def test_matrix_written_first_then_one_catch_up(db, spark, make_config, behavior):
    name, conn, cfg = _setup(db, spark, make_config, behavior, "catchup")
    with conn.cursor() as cur:
        for _ in _write(cur, name):
            pass
    _stream(cfg)
    _check(cfg, name, behavior)


def test_matrix_with_a_restart_between_every_two_statements(db, spark, make_config):
    name, conn, cfg = _setup(db, spark, make_config, "lenient", "restarts")
    with conn.cursor() as cur:
        for _ in _write(cur, name):
            _stream(cfg)
    _check(cfg, name, "lenient")


@pytest.mark.parametrize("behavior", ["evolve", "lenient"])
def test_matrix_streamed_live_as_it_happens(db, spark, make_config, behavior):
    name, conn, cfg = _setup(db, spark, make_config, behavior, "live")
    engine = EngineThread(StreamEngine(cfg))
    engine.start()
    try:
        with conn.cursor() as cur:
            for _ in _write(cur, name):
                time.sleep(0.02)
    finally:
        time.sleep(1)
        summary = engine.stop()
    assert summary.stop_reason == "stop requested"
    _stream(cfg)
    _check(cfg, name, behavior)


def test_exception_stops_at_the_first_change_naming_table_statement_and_position(db, spark, make_config):
    name, conn, cfg = _setup(db, spark, make_config, "exception", "catchup")
    with conn.cursor() as cur:
        for _ in _write(cur, name):
            pass
    with pytest.raises(SchemaChangeRejected) as raised:
        _stream(cfg)
    message = str(raised.value)
    case, ddl = next((c, s) for c, s in _statements() if s.startswith(("ALTER", "TRUNCATE", "DROP")))
    assert f"{name}.{case}" in message and ddl.format(t=f"`{name}`.`{case}`") in message, message
    assert "binlog." in message  # the DDL's position
    cp = ControlStore(cfg.sink.path, cfg.pipeline.name).checkpoint()
    ddl_at = message[message.index("binlog."):].split()[0].rstrip(":)")
    file, pos = ddl_at.split(":")
    assert cp.offset.applied < BinlogPosition(file, int(pos))  # nothing at or after the DDL


def test_ddl_during_the_snapshot_reads_the_table_again(db, spark, make_config):
    """A DDL between two chunk groups: chunks read before it hold other columns than those read
    after it, so the table's snapshot is taken again (pipelines/snapshot/driver.py)."""
    from pipelines.snapshot.driver import SnapshotJob

    name, conn = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10))")
        cur.execute("INSERT INTO t SELECT seq, seq, CONCAT('b', seq) FROM seq_1_to_3000")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO other SELECT seq, seq FROM seq_1_to_500")
    # One chunk per group: 35 groups, so the DDL after the first commit always lands before t's
    # last group, however loaded the machine (with 4 groups of 9 it could come after them all).
    cfg = make_config(name, chunk_size=100, parallelism=2, source={"snapshot": {"chunk_size": 100,
                                                                             "max_rows_per_task": 100}})
    fired = []

    def ddl_mid_snapshot(done: int, total: int, rows: int) -> None:
        if done and not fired:
            fired.append(done)
            with conn.cursor() as cur:
                cur.execute("UPDATE t SET a = -a WHERE id % 7 = 0")
                cur.execute("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 7 AFTER id, CHANGE b b2 VARCHAR(20)")
                cur.execute("UPDATE t SET c = 8, b2 = 'late' WHERE id % 11 = 0")

    summary = SnapshotJob(cfg, spark, ddl_mid_snapshot).run()
    assert fired and fired[0] < sum(s.chunks for s in summary.tables)  # the DDL came mid-snapshot
    baselines = [e for e in ControlStore(cfg.sink.path, cfg.pipeline.name).schema_history()
                 if e.table == f"{name}.t" and e.status == Status.BASELINE]
    assert len(baselines) == 2 and [c.name for c in baselines[-1].schema.columns] == ["id", "c", "a", "b2"]
    _stream(cfg)
    assert_equal(cfg, [f"{name}.t", f"{name}.other"])
    again = SnapshotJob(cfg, spark).run()  # a re-run after success is a no-op, checked once
    assert all(s.chunks_read == 0 for s in again.tables)
